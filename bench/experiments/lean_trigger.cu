// Early launch trigger on the QK-norm + RoPE lean kernel (H200): does letting the next kernel
// on the stream launch right after griddep_wait (griddep_launch_dependents; the kernel's
// kTrigger) shorten what the main job times? bf16 q [T, 32, 128], k [T, 8, 128], neox, f32 cache
// of T rows, random int64 positions, rstd saved, as the main job's rows; T = 1, 8, 64: the
// public call, the decode instance (LeanDecode<kInt64>) without and with the trigger, and a
// kernel running the lean kernel's per-thread work (qk_norm_rope_lean_thread) with the trigger
// before the wait. Graph replay with 20 launches per graph (the main job's) and 50
// (decode.cu's). Every variant's outputs and saved rstd are compared bit for bit with the public
// call's. Logs: bench/results/lean-trigger-*-nvidia-h200.log. Until 1435871 the program also
// timed the persistent lean runs (RoPE and QK-norm + RoPE at T = 32768 and 65536, alone and
// followed by the inverse RoPE launch) with the trigger, through a template parameter of those
// kernels: the same time (lean-trigger-ea00257-*), so the parameter went; and the first run's
// decode rows timed a copy with the full warp mask on the butterfly: slower, 1.71 against 1.69
// us at T = 1. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/lean_trigger.cu build/libropenorm.a -o lean_trigger
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/qk_norm_rope_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kHq = 32, kHk = 8;
using Dec = LeanDecode<LeanPositions::kInt64>;

/// The lean kernel's body in the decode instance with the trigger issued before griddep_wait
/// (the next kernel may launch as soon as this one runs; it still waits for its completion).
__global__ void __launch_bounds__(Dec::kMaxThreads)
    qk_decode_trigger_first(const QkNormRopeArgs args) {
  constexpr int g = Dec::kLanes;
  const int lane = (threadIdx.y * g + threadIdx.x) & 31;
  const unsigned mask = ((1u << g) - 1u) << (lane & ~(g - 1));
  griddep_launch_dependents();
  griddep_wait();
  qk_norm_rope_lean_thread<bf16, float, false, Dec>(args, g, mask);
}

}  // namespace

int main() {
  const int64_t max_t = 64;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261203);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *yq = device_bf16({}, qn), *yk = device_bf16({}, kn);
  float *rq, *rk;
  CK(cudaMalloc(&rq, max_t * kHq * 4));
  CK(cudaMalloc(&rk, max_t * kHk * 4));
  const Device dev = Device::cuda(0);
  std::printf("registers: decode instance %d, trigger first %d\n",
              regs_of(reinterpret_cast<const void*>(
                  qk_norm_rope_lean_kernel<bf16, float, false, Dec, false>)),
              regs_of(reinterpret_cast<const void*>(qk_decode_trigger_first)));
  for (int64_t t : {int64_t{1}, int64_t{8}, int64_t{64}}) {
    const DeviceCosSin csd = device_cos_sin(rng, t, kD, t);
    auto view = [&](void* p, int64_t heads) {
      return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, kD}, dev);
    };
    RopePositions rp;
    rp.positions = TensorRef::contiguous(csd.pos, DType::kInt64, {t}, dev);
    RopeCosSin cs;
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(csd.cache, DType::kFloat32, {t, kD}, dev);
    const RopeParams fwd;
    QkNormParams np;
    np.eps = 1e-6f;
    const TensorRef wq = TensorRef::contiguous(w, DType::kBFloat16, {kD}, dev);
    const TensorRef wk = TensorRef::contiguous(w + kD, DType::kBFloat16, {kD}, dev);
    const TensorRef rqv = TensorRef::contiguous(rq, DType::kFloat32, {t, kHq}, dev);
    const TensorRef rkv = TensorRef::contiguous(rk, DType::kFloat32, {t, kHk}, dev);
    const size_t nq = t * kHq * kD, nk = t * kHk * kD;

    // Library arguments and plan of the call (q, k -> yq, yk, rstd saved).
    const core::QkNormRopeCall qc =
        core::qk_norm_rope_call(view(q, kHq), view(k, kHk), wq, wk, view(yq, kHq), view(yk, kHk),
                                rqv, rkv, rp, cs, fwd, np);
    core::RopeGeometry qg;
    check(core::validate_qk_norm_rope(qc, -1, &qg), "validate qk");
    QkNormRopeArgs qa{};
    core::QkNormRopeFacts qf;
    fill_qk_norm_rope_args(qc, qg, &qa, &qf);
    const core::QkNormRopePlan qplan = core::plan_qk_norm_rope(qf);

    // Poisons the outputs, runs f, returns the outputs and rstd as bits.
    auto outputs = [&](const std::function<void()>& f) {
      CK(cudaMemset(yq, 0xff, nq * 2));
      CK(cudaMemset(yk, 0xff, nk * 2));
      CK(cudaMemset(rq, 0xff, t * kHq * 4));
      CK(cudaMemset(rk, 0xff, t * kHk * 4));
      f();
      CK(cudaDeviceSynchronize());
      std::vector<uint32_t> bits;
      for (uint16_t v : to_host16(yq, nq)) bits.push_back(v);
      for (uint16_t v : to_host16(yk, nk)) bits.push_back(v);
      for (uint32_t v : to_host32(rq, t * kHq)) bits.push_back(v);
      for (uint32_t v : to_host32(rk, t * kHk)) bits.push_back(v);
      return bits;
    };
    auto qk_public = [&](cudaStream_t st) {
      check(qk_norm_rope(qc.rope.q, qc.rope.k, wq, wk, qc.rope.q_out, qc.rope.k_out, rqv, rkv, rp,
                         cs, fwd, np, st),
            "qk_norm_rope");
    };
    const auto lean = core::plan_rope_lean(qf.rope, cuda::device_sm_count());
    auto launch = [&](auto kernel) {
      return [&, kernel](cudaStream_t st) { CK(launch_lean_layout(kernel, lean, st, qa)); };
    };
    std::vector<std::string> names = {"public", "instance", "instance+trigger",
                                      "trigger before wait"};
    std::vector<std::function<void(cudaStream_t)>> fs = {
        qk_public, launch(qk_norm_rope_lean_kernel<bf16, float, false, Dec, false>),
        launch(qk_norm_rope_lean_kernel<bf16, float, false, Dec, true>),
        launch(qk_decode_trigger_first)};
    const auto ref = outputs([&] { qk_public(nullptr); });
    size_t diff = 0;
    for (auto& f : fs) {
      const auto got = outputs([&] { f(nullptr); });
      for (size_t i = 0; i < ref.size(); ++i) diff += ref[i] != got[i];
    }
    std::printf("qk decode T=%lld (plan %s, %zu values differ in %zu runs):\n",
                static_cast<long long>(t), qplan.kernel == core::QkKernel::kLean ? "lean" : "other",
                diff, fs.size());
    for (int n : {20, 50}) {
      std::printf("  graph of %d:", n);
      for (size_t i = 0; i < fs.size(); ++i) {
        std::printf(" %s %.3f |", names[i].c_str(), time_graph(fs[i], n));
      }
      std::printf(" us\n");
    }
    CK(cudaFree(csd.cache));
    CK(cudaFree(csd.pos));
  }
  return 0;
}
