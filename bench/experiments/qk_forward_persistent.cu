// QK-norm + RoPE forward on a persistent grid (H200): does the lean backward's form (a block of
// 8 lanes x 40 heads looping over a contiguous run of tokens, the next token's position loaded
// with the current token's data) also beat the library's lean forward (one block per token,
// each block's cos/sin loads waiting for its position) on long runs?
// bf16 q [T, 32, 128], k [T, 8, 128], bf16 weights, f32 cache of T rows, random int64
// positions, neox, rstd saved; the library's arguments (cuda::fill_qk_norm_rope_args).
// Ownership of the experiment kernel (grid of B blocks, block (8, 40)):
//  - Tokens: block b owns the contiguous tokens [b C, min(T, (b + 1) C)), C = ceil(T / B), one
//    per round; with kPrefetch each thread loads token t + 1's position with token t's data.
//  - Head: thread row y owns head y of every token (q heads 0 .. 31, then k heads); lane x owns
//    channels 8x .. 8x + 7 and 64 + 8x .. 64 + 8x + 7 (its 8 rotary pairs). The lane's 16
//    weights stay in registers for the whole run.
//  - Per head vector the library's qk_pair_head (the lean kernel's arithmetic in its order, lane
//    0 storing r), so q_out, k_out and the rstd should be the library's bits; the program counts
//    the elements that differ.
// Cold-L2 CUDA-event medians at T = 4096, 16384 and 65536: the library's qk_norm_rope against the
// experiment kernel at 2 blocks per multiprocessor without and with the prefetch, and at 3
// blocks with it. At 3653989 (bench/results/qk-forward-persistent-3653989-nvidia-h200.log) the
// first ran T = 65536 in 405.1 us against the lean kernel's 466.8, with the same bits, and the
// prefetch did not matter, so the library has that form (core::QkKernel::kLeanRun) and the
// "library" column is that kernel from then on. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/qk_forward_persistent.cu build/libropenorm.a -o qk_forward_persistent
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "core/qk_norm_rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope_cache.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kV = 8, kLanes = kD / 2 / kV, kHq = 32, kHk = 8;
constexpr int kHeads = kHq + kHk, kThreads = kLanes * kHeads;

template <int kMinBlocks, bool kPrefetch>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    persistent_qk_kernel(const QkNormRopeArgs args, int64_t tokens_per_block) {
  const RopeKernelArgs& a = args.rope;
  const int lane = (threadIdx.y * kLanes + threadIdx.x) & 31;
  const unsigned mask = ((1u << kLanes) - 1u) << (lane & ~(kLanes - 1));
  const int hh = threadIdx.y;
  const bool is_q = hh < a.hq;
  const int head = is_q ? hh : hh - a.hq;
  const int i0 = static_cast<int>(threadIdx.x) * kV;
  const int oa = i0, ob = kD / 2 + i0;
  const int64_t* pos = static_cast<const int64_t*>(a.pos);
  griddep_wait();
  float w0[kV], w1[kV];
  qk_head_weights<kV, bf16>(args, hh, oa, ob, w0, w1);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tokens_per_block;
  const int64_t t_end = t0 + tokens_per_block < a.tokens ? t0 + tokens_per_block : a.tokens;
  int64_t p_next = kPrefetch && t0 < t_end ? pos[t0] : 0;
  for (int64_t t = t0; t < t_end; ++t) {
    const bf16* x = rope_head_ptr<bf16>(is_q ? a.q : a.k, 0, t, head);
    bf16* y = const_cast<bf16*>(rope_head_ptr<bf16>(is_q ? a.q_out : a.k_out, 0, t, head));
    RopeHeadRegs<bf16, kV> regs;
    load_raw<bf16, kV>(x + oa, regs.x0);
    load_raw<bf16, kV>(x + ob, regs.x1);
    const int64_t p = kPrefetch ? p_next : pos[t];
    float c[kV], sn[kV];
    load_pack<float, kV>(static_cast<const float*>(a.cos) + p * a.cos_row + i0, c);
    load_pack<float, kV>(static_cast<const float*>(a.sin) + p * a.sin_row + i0, sn);
    if (kPrefetch && t + 1 < t_end) p_next = pos[t + 1];
    qk_pair_head<bf16, kV, false, kD>(
        args, [&] { return y; }, t, hh, oa, ob, regs, c, sn, mask, kLanes,
        [&](float(&f0)[kV], float(&f1)[kV]) {
#pragma unroll
          for (int i = 0; i < kV; ++i) {
            f0[i] = w0[i];
            f1[i] = w1[i];
          }
        });
  }
}

std::vector<uint16_t> to_host16(const void* p, size_t n) {
  std::vector<uint16_t> v(n);
  CK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

std::vector<float> to_host32(const float* p, size_t n) {
  std::vector<float> v(n);
  CK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main() {
  const int64_t max_t = 65536;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261204);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *yq = device_bf16({}, qn), *yk = device_bf16({}, kn), *yq2 = device_bf16({}, qn),
       *yk2 = device_bf16({}, kn);
  const DeviceCosSin csd = device_cos_sin(rng, max_t, kD, max_t);
  float *rq, *rk, *rq2, *rk2;
  CK(cudaMalloc(&rq, max_t * kHq * 4));
  CK(cudaMalloc(&rk, max_t * kHk * 4));
  CK(cudaMalloc(&rq2, max_t * kHq * 4));
  CK(cudaMalloc(&rk2, max_t * kHk * 4));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("registers: 2 blocks %d, 2 blocks prefetch %d, 3 blocks prefetch %d\n",
              regs_of(reinterpret_cast<const void*>(persistent_qk_kernel<2, false>)),
              regs_of(reinterpret_cast<const void*>(persistent_qk_kernel<2, true>)),
              regs_of(reinterpret_cast<const void*>(persistent_qk_kernel<3, true>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  const Device d0 = Device::cuda(0);
  for (int64_t t : {int64_t{4096}, int64_t{16384}, int64_t{65536}}) {
    auto view = [&](void* p, int64_t heads) {
      return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, kD}, d0);
    };
    const TensorRef twq = TensorRef::contiguous(w, DType::kBFloat16, {kD}, d0);
    const TensorRef twk = TensorRef::contiguous(w + kD, DType::kBFloat16, {kD}, d0);
    auto rstd = [&](float* p, int64_t heads) {
      return TensorRef::contiguous(p, DType::kFloat32, {t, heads}, d0);
    };
    RopePositions rp;
    rp.positions = TensorRef::contiguous(csd.pos, DType::kInt64, {t}, d0);
    RopeCosSin cs;
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(csd.cache, DType::kFloat32, {max_t, kD}, d0);
    RopeParams prm;
    QkNormParams np;
    auto lib = [&] {
      check(qk_norm_rope(view(q, kHq), view(k, kHk), twq, twk, view(yq, kHq), view(yk, kHk),
                         rstd(rq, kHq), rstd(rk, kHk), rp, cs, prm, np, nullptr),
            "library");
    };
    // The library's arguments for the same call, writing the second outputs.
    const core::QkNormRopeCall call =
        core::qk_norm_rope_call(view(q, kHq), view(k, kHk), twq, twk, view(yq2, kHq),
                                view(yk2, kHk), rstd(rq2, kHq), rstd(rk2, kHk), rp, cs, prm, np);
    core::RopeGeometry geo;
    check(core::validate_qk_norm_rope(call, -1, &geo), "validate");
    QkNormRopeArgs qa{};
    core::QkNormRopeFacts facts;
    fill_qk_norm_rope_args(call, geo, &qa, &facts);
    auto persistent = [&](auto kernel, int blocks_per_sm) {
      return [&, kernel, blocks_per_sm] {
        const int64_t grid = std::min<int64_t>(t, int64_t{sms} * blocks_per_sm);
        CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads), 0,
                           nullptr, qa, (t + grid - 1) / grid));
      };
    };
    const auto v2 = persistent(persistent_qk_kernel<2, false>, 2);
    const auto v2p = persistent(persistent_qk_kernel<2, true>, 2);
    const auto v3p = persistent(persistent_qk_kernel<3, true>, 3);
    // The library's lean-run kernel in its two instances, on the library's arguments.
    auto library_run = [&](auto kernel) {
      return [&, kernel] {
        const int64_t grid = std::min<int64_t>(t, int64_t{sms} * core::kQkLeanRunMinBlocks);
        CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads), 0,
                           nullptr, qa, (t + grid - 1) / grid));
      };
    };
    const auto r_lanes =
        library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanLanes<8>>);
    const auto r_i64 =
        library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanRowsI64<8>>);
    const size_t nq = t * kHq * kD, nk = t * kHk * kD;
    CK(cudaMemset(yq, 0xff, qn * 2));
    CK(cudaMemset(yk, 0xff, kn * 2));
    lib();
    CK(cudaDeviceSynchronize());
    const auto ref_q = to_host16(yq, nq), ref_k = to_host16(yk, nk);
    const auto ref_rq = to_host32(rq, t * kHq), ref_rk = to_host32(rk, t * kHk);
    const std::function<void()> vs[5] = {v2, v2p, v3p, r_lanes, r_i64};
    const char* names[5] = {"2 blocks", "2 blocks prefetch", "3 blocks prefetch", "run lanes",
                            "run i64 rows"};
    int vi = 0;
    for (const auto* v : {&vs[0], &vs[1], &vs[2], &vs[3], &vs[4]}) {
      CK(cudaMemset(yq2, 0xff, qn * 2));
      CK(cudaMemset(yk2, 0xff, kn * 2));
      CK(cudaMemset(rq2, 0xff, max_t * kHq * 4));
      CK(cudaMemset(rk2, 0xff, max_t * kHk * 4));
      (*v)();
      CK(cudaDeviceSynchronize());
      const auto eq = to_host16(yq2, nq), ek = to_host16(yk2, nk);
      const auto erq = to_host32(rq2, t * kHq), erk = to_host32(rk2, t * kHk);
      size_t differ = 0, r_differ = 0;
      for (size_t i = 0; i < nq; ++i) differ += eq[i] != ref_q[i];
      for (size_t i = 0; i < nk; ++i) differ += ek[i] != ref_k[i];
      for (size_t i = 0; i < erq.size(); ++i) r_differ += erq[i] != ref_rq[i];
      for (size_t i = 0; i < erk.size(); ++i) r_differ += erk[i] != ref_rk[i];
      std::printf("  T=%5lld check %-18s: %zu q/k elements differ, %zu rstd values differ\n",
                  static_cast<long long>(t), names[vi++], differ, r_differ);
    }
    const double bytes =
        2.0 * static_cast<double>(nq + nk) * 2 + static_cast<double>(t) * (kHeads * 4 + 8 + kD * 4);
    const float t_lib = time_med(lib, true);
    std::printf(
        "T=%5lld cold: library %8.2f us (%6.0f GB/s) | 2 blocks %8.2f | 2 blocks prefetch %8.2f | "
        "3 blocks prefetch %8.2f | library run lanes %8.2f | library run i64 rows %8.2f us\n",
        static_cast<long long>(t), t_lib, bytes / t_lib / 1e3, time_med(v2, true),
        time_med(v2p, true), time_med(v3p, true), time_med(r_lanes, true), time_med(r_i64, true));
  }
  return 0;
}
