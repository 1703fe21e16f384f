// Decode and short-run experiment (H200): what sets the time of RoPE and QK-norm + RoPE at few
// tokens, and up to which T should the library's lean kernels serve?
// bf16 q [T, 32, 128] and k [T, 8, 128], neox, f32 cos/sin cache of P rows, random int64
// positions, out of place, no rstd saved. Per T, five runs of the same inputs:
//  - library: the public rope / qk_norm_rope call (the lean kernels at every T here, in the
//    instance the launcher picks);
//  - lean: the library's lean kernel forced at this T (core::plan_rope_lean, launched through
//    the library's own typed launcher), general: its general kernel forced (plan_rope; the QK
//    pair kernel);
//  - fixed, fixed+trigger: kernels for exactly this shape: one block per token, thread (x, y)
//    owns pair vector x (8 pairs: channels 8x .. 8x + 7 and 64 + 8x ..) of head y (q heads,
//    then k heads); the same rotation (rope_rotate_pair), per-lane sum order and butterfly (QK:
//    16 squares, then xor 4, 2, 1 over the head's 8 lanes) and rounding. "+trigger" adds
//    griddep_launch_dependents() right after griddep_wait() (the library's RMSNorm kernels do
//    this; its RoPE and QK-norm + RoPE kernels do not: at b444e66 this program measured the
//    trigger 0.06-0.25 us slower for the fixed kernels up to T = 256, and the main job no faster
//    for the general ones).
// Every run's output is compared bit for bit with the library call's. Then the library's lean
// kernels in instances that fix facts at compile time (LeanSpec, cuda/rope/rope_lean_spec.h:
// LeanAny, lanes per head, int64 positions, cos/sin rows, weights in the data dtype, and
// combinations, two under a 512-thread launch bound) on the lean plan's launch. (The split of
// the library's addressing in the fixed kernel, libargs_kernel, is in this file's history at
// 0463f69, with its log.) Last, the QK fixed kernel with the library lean kernel's run-time
// generalities one at a time (Dyn), at T = 1 and 64.
// Graph-replay medians for T <= 256, cold-L2 event medians above. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/decode.cu build/libropenorm.a -o decode
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <type_traits>
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
#include "cuda/qk_norm_rope/qk_norm_rope_typed.h"
#include "cuda/rms_norm/rms_norm_math.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "cuda/rope/rope_lean_spec.h"
#include "cuda/rope/rope_math.cuh"
#include "cuda/rope/rope_typed.h"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "reference/host_float.h"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"
#include "ropenorm/rope_cache.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kHalf = kD / 2, kV = 8, kLanes = kHalf / kV, kHq = 32, kHk = 8;
constexpr float kEps = 1e-6f;

struct LeanArgs {
  const bf16* q;
  const bf16* k;
  bf16* q_out;
  bf16* k_out;
  const float* cache;
  const int64_t* pos;
  const bf16* wq;  // QK only
  const bf16* wk;
  DType w_dtype;  // kDynW: the weights' dtype, read at run time (kBFloat16 here)
  int head_dim;   // kDynN: D, read at run time (kD here)
};

// Block (kLanes, kHq + kHk), one token per block (grid x = T). kNorm: QK-norm + RoPE. The QK
// kernel's run-time generalities, one switch each (the library's lean QK kernel has all three):
// kDynG the butterfly's width from blockDim.x, kDynW the weights loaded through load_pack_dyn,
// kDynN the mean's divisor D from the arguments (a true division; a constant 128 is a multiply).
template <bool kNorm, bool kTrigger, bool kDynG = false, bool kDynW = false, bool kDynN = false>
__global__ void __launch_bounds__(kLanes*(kHq + kHk)) lean_kernel(const LeanArgs a) {
  const int64_t t = blockIdx.x;
  const int j = threadIdx.x, h = threadIdx.y;
  const bool is_q = h < kHq;
  const int64_t head_off = (is_q ? t * kHq + h : t * kHk + (h - kHq)) * kD;
  const bf16* src = (is_q ? a.q : a.k) + head_off;
  bf16* dst = (is_q ? a.q_out : a.k_out) + head_off;
  griddep_wait();
  if constexpr (kTrigger) griddep_launch_dependents();
  float x0[kV], x1[kV], c[kV], s[kV];
  load_pack<bf16, kV>(src + j * kV, x0);
  load_pack<bf16, kV>(src + kHalf + j * kV, x1);
  const int64_t p = a.pos[t];
  load_pack<float, kV>(a.cache + p * kD + j * kV, c);
  load_pack<float, kV>(a.cache + p * kD + kHalf + j * kV, s);
  if constexpr (kNorm) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kV; ++i) ss = __fmaf_rn(x0[i], x0[i], ss);
#pragma unroll
    for (int i = 0; i < kV; ++i) ss = __fmaf_rn(x1[i], x1[i], ss);
    const int g = kDynG ? static_cast<int>(blockDim.x) : kLanes;
    const int lane = (threadIdx.y * g + threadIdx.x) & 31;
    const unsigned mask = ((1u << g) - 1u) << (lane & ~(g - 1));
    for (int off = g >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(mask, ss, off);
    const float r = rms_rstd(ss, kDynN ? a.head_dim : kD, kEps);
    float w0[kV], w1[kV];
    const bf16* w = is_q ? a.wq : a.wk;
    if constexpr (kDynW) {
      load_pack_dyn<kV>(w, a.w_dtype, j * kV, w0);
      load_pack_dyn<kV>(w, a.w_dtype, kHalf + j * kV, w1);
    } else {
      load_pack<bf16, kV>(w + j * kV, w0);
      load_pack<bf16, kV>(w + kHalf + j * kV, w1);
    }
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      x0[i] = rms_apply_exact(x0[i], r, w0[i]);
      x1[i] = rms_apply_exact(x1[i], r, w1[i]);
    }
  }
  float y0[kV], y1[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) rope_rotate_pair(x0[i], x1[i], c[i], s[i], &y0[i], &y1[i]);
  store_pack<bf16, kV>(dst + j * kV, y0);
  store_pack<bf16, kV>(dst + kHalf + j * kV, y1);
}

template <typename F>
float time_at(int64_t t, F f) {
  if (t <= 256) return time_graph(f);
  return time_med([&] { f(nullptr); }, true);
}

}  // namespace

int main() {
  const int64_t max_t = 65536, table = 4096;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261202);
  bf16* q = device_bf16(random_bf16(rng, qn));
  bf16* k = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *qo = device_bf16({}, qn), *ko = device_bf16({}, kn);
  bf16 *qo2 = device_bf16({}, qn), *ko2 = device_bf16({}, kn);
  const DeviceCosSin csd = device_cos_sin(rng, table, kD, max_t);
  float* cache = csd.cache;
  int64_t* pos = csd.pos;
  const LeanArgs la{q, k, qo2, ko2, cache, pos, w, w + kD, DType::kBFloat16, kD};

  std::printf("fixed kernel registers: rope %d, qk %d\n",
              regs_of(reinterpret_cast<const void*>(lean_kernel<false, true>)),
              regs_of(reinterpret_cast<const void*>(lean_kernel<true, true>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  std::vector<uint16_t> a(qn + kn), b(qn + kn);
  for (bool norm : {false, true}) {
    for (int64_t t : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{256}, int64_t{1024},
                      int64_t{4096}, int64_t{16384}, int64_t{65536}}) {
      core::QkNormRopeCall c = standard_qk_call(q, k, qo, ko, w, csd, t, table, kEps);
      core::RopeCall& r = c.rope;
      auto lib = [&](cudaStream_t st) {
        if (norm) {
          check(qk_norm_rope(r.q, r.k, c.wq, c.wk, r.q_out, r.k_out, TensorRef(), TensorRef(),
                             r.positions, r.cos_sin, r.params, c.norm, st),
                "qk_norm_rope");
        } else {
          check(rope(r.q, r.k, r.q_out, r.k_out, r.positions, r.cos_sin, r.params, st), "rope");
        }
      };

      // The library's own kernels under a chosen plan, writing to qo2 / ko2.
      core::RopeGeometry g;
      check(norm ? core::validate_qk_norm_rope(c, -1, &g) : core::validate_rope(r, -1, &g),
            "validate");
      core::QkNormRopeCall c2 = c;
      c2.rope.q_out.data = qo2;
      c2.rope.k_out.data = ko2;
      cuda::QkNormRopeArgs qa{};
      core::QkNormRopeFacts facts;
      cuda::fill_qk_norm_rope_args(c2, g, &qa, &facts);
      const core::RopeLeanFacts& lf = facts.rope;
      const core::RopePlan lean_plan = core::plan_rope_lean(lf, device_sm_count());
      const core::RopePlan general_plan = core::plan_rope(lf.tokens, lf.heads, lf.half, lf.vec);
      auto forced = [&](bool lean) {
        return [&, lean](cudaStream_t st) {
          if (norm) {
            core::QkNormRopePlan p;
            p.kernel = lean ? core::QkKernel::kLean : core::QkKernel::kPair;
            p.rope = lean ? lean_plan : general_plan;
            check(cuda::launch_qk_norm_rope_typed<bf16>(qa, p, st), "qk launch");
          } else {
            check(cuda::launch_rope_typed<bf16>(qa.rope, lean ? lean_plan : general_plan, st),
                  "rope launch");
          }
        };
      };
      auto fixed = [&](bool trigger) {
        return [&, trigger](cudaStream_t st) {
          const auto kern = norm ? (trigger ? lean_kernel<true, true> : lean_kernel<true, false>)
                                 : (trigger ? lean_kernel<false, true> : lean_kernel<false, false>);
          CK(launch_with_pdl(kern, dim3(static_cast<unsigned>(t)), dim3(kLanes, kHq + kHk), 0, st,
                             la));
        };
      };
      const size_t nq = t * kHq * kD, nk = t * kHk * kD;
      // Poisons (yq, yk), runs run(nullptr) and copies the outputs to host (q then k at qn).
      auto run_to_host = [&](auto run, bf16* yq, bf16* yk, std::vector<uint16_t>& host) {
        CK(cudaMemset(yq, 0xff, qn * 2));
        CK(cudaMemset(yk, 0xff, kn * 2));
        run(nullptr);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(host.data(), yq, nq * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(host.data() + qn, yk, nk * 2, cudaMemcpyDeviceToHost));
      };
      // Elements of qo2 / ko2 that differ from the library call's after run(nullptr).
      auto differ_after = [&](auto run) {
        run_to_host(run, qo2, ko2, b);
        size_t n = 0;
        for (size_t i = 0; i < nq; ++i) n += a[i] != b[i];
        for (size_t i = 0; i < nk; ++i) n += a[qn + i] != b[qn + i];
        return n;
      };
      run_to_host(lib, qo, ko, a);
      const size_t differ = differ_after(forced(true)) + differ_after(forced(false)) +
                            differ_after(fixed(false)) + differ_after(fixed(true));
      std::printf(
          "%-12s T=%5lld %s: library %8.2f | lean %8.2f | general %8.2f | fixed %8.2f | "
          "fixed+trigger %8.2f us | %zu elements differ (4 runs of %zu)\n",
          norm ? "qk_norm_rope" : "rope", static_cast<long long>(t), t <= 256 ? "graph" : "cold ",
          time_at(t, lib), time_at(t, forced(true)), time_at(t, forced(false)),
          time_at(t, fixed(false)), time_at(t, fixed(true)), differ, nq + nk);
      // The library's lean kernels with facts fixed at compile time (cuda/rope/rope_lean_spec.h),
      // on the lean plan's launch.
      auto spec = [&](auto kern) {
        return [&, kern](cudaStream_t st) {
          if constexpr (std::is_same_v<decltype(kern), void (*)(QkNormRopeArgs)>) {
            CK(launch_with_pdl(kern, rope_launch_grid(lean_plan), rope_launch_block(lean_plan), 0,
                               st, qa));
          } else {
            CK(launch_with_pdl(kern, rope_launch_grid(lean_plan), rope_launch_block(lean_plan), 0,
                               st, qa.rope));
          }
        };
      };
      using P = LeanPositions;
      if (norm) {
        const auto s0 = spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanAny>);
        const auto sg =
            spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<8, P::kAny, false, false>>);
        const auto sp = spec(
            qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kInt64, false, false>>);
        const auto sr =
            spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kAny, true, false>>);
        const auto sw =
            spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kAny, false, true>>);
        const auto sa =
            spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kInt64, true, false>>);
        const auto sgw =
            spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<8, P::kAny, false, true>>);
        const auto s7 =
            spec(qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<8, P::kInt64, true, true>>);
        const auto b0 = spec(
            qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kAny, false, false, 512>>);
        const auto b7 = spec(
            qk_norm_rope_lean_kernel<bf16, float, false, LeanSpec<8, P::kInt64, true, true, 512>>);
        const size_t d2 = differ_after(s0) + differ_after(sg) + differ_after(sp) +
                          differ_after(sr) + differ_after(sw) + differ_after(sa) +
                          differ_after(sgw) + differ_after(s7) + differ_after(b0) +
                          differ_after(b7);
        std::printf(
            "qk spec      T=%5lld %s: any %8.2f | lanes 8 %8.2f | int64 pos %8.2f | rows %8.2f | "
            "w as data %8.2f | pos+rows %8.2f | lanes+w %8.2f | all %8.2f | bound 512: any %8.2f, "
            "all %8.2f us | %zu elements differ (10 runs)\n",
            static_cast<long long>(t), t <= 256 ? "graph" : "cold ", time_at(t, s0), time_at(t, sg),
            time_at(t, sp), time_at(t, sr), time_at(t, sw), time_at(t, sa), time_at(t, sgw),
            time_at(t, s7), time_at(t, b0), time_at(t, b7), d2);
      } else {
        const auto s0 = spec(rope_lean_kernel<bf16, float, false, LeanAny>);
        const auto sp =
            spec(rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kInt64, false, false>>);
        const auto sr =
            spec(rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kAny, true, false>>);
        const auto sa =
            spec(rope_lean_kernel<bf16, float, false, LeanSpec<0, P::kInt64, true, false>>);
        const size_t d2 = differ_after(s0) + differ_after(sp) + differ_after(sr) + differ_after(sa);
        std::printf(
            "rope spec    T=%5lld %s: any %8.2f | int64 pos %8.2f | rows %8.2f | pos+rows %8.2f us "
            "| %zu elements differ (4 runs)\n",
            static_cast<long long>(t), t <= 256 ? "graph" : "cold ", time_at(t, s0), time_at(t, sp),
            time_at(t, sr), time_at(t, sa), d2);
      }
    }
  }
  // The QK fixed kernel with the library lean kernel's run-time generalities one at a time.
  for (int64_t t : {int64_t{1}, int64_t{64}}) {
    auto run = [&](auto kern) {
      return [&, kern](cudaStream_t st) {
        CK(launch_with_pdl(kern, dim3(static_cast<unsigned>(t)), dim3(kLanes, kHq + kHk), 0, st,
                           la));
      };
    };
    std::printf(
        "qk fixed T=%lld graph: %.2f | run-time butterfly width %.2f | run-time weight dtype "
        "%.2f | run-time divisor D %.2f | all three %.2f us\n",
        static_cast<long long>(t), time_graph(run(lean_kernel<true, false>)),
        time_graph(run(lean_kernel<true, false, true, false, false>)),
        time_graph(run(lean_kernel<true, false, false, true, false>)),
        time_graph(run(lean_kernel<true, false, false, false, true>)),
        time_graph(run(lean_kernel<true, false, true, true, true>)));
  }
  return 0;
}
