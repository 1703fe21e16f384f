// RoPE on the lean run (H200): does the persistent grid with each thread's next token in flight
// in a shared-memory ring (cuda/rope/rope_lean_run.cuh, what the QK-norm + RoPE lean run
// uses) beat the library's lean kernel (one block per token, LeanRows) on long runs?
// bf16 q [T, 32, D], k [T, 8, D], f32 cache of T rows (the main job's table size), random
// int64 positions; D 128 neox, gptj and the inverse rotation, D 64 neox.
// Ownership: the library's kernels; the experiment's lean-run kernel (rope_lean_run with the
// lean kernel's rotation) on the library's arguments (cuda::fill_rope_args) at 2, 3 and 4 blocks
// per multiprocessor (the tokens interleaved over the grid's blocks from the commit after
// 58e3061 on, contiguous runs of ceil(T / grid) tokens before), its data copies through L2 only
// or through L1. Each output is compared bit for bit with the library call's.
// At 7cac74a (bench/results/rope-lean-run-7cac74a-nvidia-h200.log) the lean run was no faster
// than the library's lean kernel for neox D 128 (361.8 against 360.0 us at T = 65536), slower
// for D 64 (195.6 against 172.3) and far slower for gptj (489.1 against 374.5, its data copies
// through L2 only then), so RoPE keeps
// its lean kernel.
// Cold-L2 CUDA-event medians. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rope_lean_run.cu build/libropenorm.a -o rope_lean_run
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_lean_run.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kHq = 32, kHk = 8;

// Lean-run RoPE (forward or inverse, a.inverse) of style kGptj: the library's rope_lean_run with
// the lean kernel's rope_rotate_store per token, so the lean kernel's bits; kDataViaL1 as
// rope_lean_run's.
template <typename T, typename C, bool kGptj, typename Spec, bool kDataViaL1>
__global__ void __launch_bounds__(core::kRopeLeanLongRunThreads, 2)
    rope_lean_run_kernel(const RopeKernelArgs a) {
  constexpr int V = core::kRopeLeanVec;
  extern __shared__ uint4 rope_lean_run_ring[];
  const LeanRunLane ln = lean_run_lane<kGptj>(a, a.half);
  if (ln.hh >= a.hq + a.hk) return;
  const int hh = ln.hh, head = ln.head, oa = ln.oa, ob = ln.ob;
  const RopeOperand& out = ln.is_q ? a.q_out : a.k_out;
  griddep_wait();
  rope_lean_run<T, C, Spec, kDataViaL1>(
      a, rope_lean_run_ring, ln,
      [&](int64_t, int64_t b, int64_t s, const RopeHeadRegs<T, V>& regs, const float(&c)[V],
          const float(&sn)[V]) {
        rope_rotate_store<T, V, kGptj>(
            [&] { return const_cast<T*>(rope_head_ptr<T>(out, b, s, head)); }, oa, ob, regs, c, sn);
      });
}

std::vector<uint16_t> to_host16(const void* p, size_t n) {
  std::vector<uint16_t> v(n);
  CK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main() {
  const int64_t max_t = 65536, max_d = 128;
  const size_t qn = max_t * kHq * max_d, kn = max_t * kHk * max_d;
  std::mt19937_64 rng(20261202);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16 *yq = device_bf16({}, qn), *yk = device_bf16({}, kn), *yq2 = device_bf16({}, qn),
       *yk2 = device_bf16({}, kn);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("registers: lean run neox %d, gptj %d\n",
              regs_of(reinterpret_cast<const void*>(
                  rope_lean_run_kernel<bf16, float, false, LeanRowsI64<0>, false>)),
              regs_of(reinterpret_cast<const void*>(
                  rope_lean_run_kernel<bf16, float, true, LeanRowsI64<0>, false>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  const Device d0 = Device::cuda(0);
  struct Config {
    const char* name;
    int d;
    RopeStyle style;
    bool inverse;
  };
  const Config configs[] = {{"D128 neox", 128, RopeStyle::kNeox, false},
                            {"D128 gptj", 128, RopeStyle::kGptj, false},
                            {"D128 inverse", 128, RopeStyle::kNeox, true},
                            {"D64 neox", 64, RopeStyle::kNeox, false}};
  for (const Config& cf : configs) {
    for (int64_t t : {int64_t{4096}, int64_t{16384}, int64_t{65536}}) {
      const DeviceCosSin csd = device_cos_sin(rng, t, cf.d, t);
      auto view = [&](void* p, int64_t heads) {
        return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, cf.d}, d0);
      };
      RopePositions rp;
      rp.positions = TensorRef::contiguous(csd.pos, DType::kInt64, {t}, d0);
      RopeCosSin cs;
      cs.kind = CosSinKind::kCache;
      cs.cache = TensorRef::contiguous(csd.cache, DType::kFloat32, {t, cf.d}, d0);
      RopeParams prm;
      prm.style = cf.style;
      prm.inverse = cf.inverse;
      auto lib = [&] {
        check(rope(view(q, kHq), view(k, kHk), view(yq, kHq), view(yk, kHk), rp, cs, prm),
              "library");
      };
      const core::RopeCall call{view(q, kHq), view(k, kHk), view(yq2, kHq), view(yk2, kHk), rp,
                                cs,           prm};
      core::RopeGeometry geo;
      check(core::validate_rope(call, -1, &geo), "validate");
      RopeKernelArgs ra{};
      fill_rope_args(call, geo, &ra);
      const int threads = cf.d / 16 * (kHq + kHk);
      const auto smem = static_cast<size_t>(core::rope_lean_run_ring_bytes(2, 4, threads));
      auto run = [&](int per_sm, bool via_l1) -> std::function<void()> {
        const auto kernel =
            cf.style == RopeStyle::kGptj
                ? (via_l1 ? rope_lean_run_kernel<bf16, float, true, LeanRowsI64<0>, true>
                          : rope_lean_run_kernel<bf16, float, true, LeanRowsI64<0>, false>)
                : (via_l1 ? rope_lean_run_kernel<bf16, float, false, LeanRowsI64<0>, true>
                          : rope_lean_run_kernel<bf16, float, false, LeanRowsI64<0>, false>);
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)));
        return [&, kernel, per_sm] {
          const int64_t grid = std::min<int64_t>(t, int64_t{sms} * per_sm);
          CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)),
                             dim3(static_cast<unsigned>(cf.d / 16), kHq + kHk), smem, nullptr, ra));
        };
      };
      const std::vector<std::function<void()>> vs = {run(2, false), run(3, false), run(4, false),
                                                     run(2, true), run(3, true)};
      const char* names[] = {"run 2/SM", "run 3/SM", "run 4/SM", "run 2/SM data via L1",
                             "run 3/SM data via L1"};
      const size_t nq = t * kHq * cf.d, nk = t * kHk * cf.d;
      CK(cudaMemset(yq, 0xff, qn * 2));
      CK(cudaMemset(yk, 0xff, kn * 2));
      lib();
      CK(cudaDeviceSynchronize());
      const auto ref_q = to_host16(yq, nq), ref_k = to_host16(yk, nk);
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        CK(cudaMemset(yq2, 0xff, qn * 2));
        CK(cudaMemset(yk2, 0xff, kn * 2));
        vs[vi]();
        CK(cudaDeviceSynchronize());
        const auto eq = to_host16(yq2, nq), ek = to_host16(yk2, nk);
        size_t differ = 0;
        for (size_t i = 0; i < nq; ++i) differ += eq[i] != ref_q[i];
        for (size_t i = 0; i < nk; ++i) differ += ek[i] != ref_k[i];
        std::printf("  %s T=%5lld check %s: %zu elements differ\n", cf.name,
                    static_cast<long long>(t), names[vi], differ);
      }
      const double bytes = 2.0 * static_cast<double>(nq + nk) * 2 + static_cast<double>(t) * 8;
      const float t_lib = time_med(lib, true);
      std::printf("%-12s T=%5lld cold: library %8.2f us (%6.0f GB/s)", cf.name,
                  static_cast<long long>(t), t_lib, bytes / t_lib / 1e3);
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        std::printf(" | %s %.2f", names[vi], time_med(vs[vi], true));
      }
      std::printf(" us\n");
      CK(cudaFree(csd.cache));
      CK(cudaFree(csd.pos));
    }
  }
  return 0;
}
