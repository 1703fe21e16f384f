// Per-dtype launch of the RoPE kernel: picks the instantiation for the plan's vector width and
// launches it on the caller's stream. Included by exactly one .cu per q/k dtype, which
// instantiates it; the launcher calls it through dispatch. The cos/sin dtype, the source kind and
// the direction are run-time switches inside the kernel (uniform branches); the style is a
// template argument, so each dtype has, per vector width (16 / sizeof(T), ..., 2, 1) and style,
// the looping kernel and the single-round kernel at two register budgets (plan.long_run), and
// for 16-bit types the lean kernel per style and cos/sin table dtype (plan.lean), for cos/sin
// rows indexed by position (LeanRows) and for gathered ones (LeanAny), and the lean-run kernel
// per style and table dtype (plan.lean_run; LeanRowsFlatI64, LeanRows or, for gathered tables,
// LeanTokensFlat or LeanAny as core::rope_lean_run_instance picks).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/checks.h"
#include "core/rope_plan.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "cuda/rope/rope_lean_run.cuh"
#include "cuda/rope/rope_typed.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

namespace detail {

/// The RoPE kernel of style kGptj the plan calls for: single-round (at the long-run register
/// budget on long runs) or looping.
template <typename T, int V, bool kGptj>
auto rope_kernel_for(const core::RopePlan& p) {
  constexpr int KH = core::kRopeHeadsPerThread;
  constexpr int MB = core::kRopeMinBlocks;
  constexpr int LMB = core::kRopeLongRunMinBlocks;
  return p.long_run ? rope_kernel<T, V, KH, LMB, kGptj, true>
                    : (p.single ? rope_kernel<T, V, KH, MB, kGptj, true>
                                : rope_kernel<T, V, KH, MB, kGptj, false>);
}

template <typename T, int V>
cudaError_t launch_rope_vec(const RopeKernelArgs& a, const core::RopePlan& p, cudaStream_t s) {
  const auto kernel = a.gptj ? rope_kernel_for<T, V, true>(p) : rope_kernel_for<T, V, false>(p);
  return launch_with_pdl(kernel, rope_launch_grid(p), rope_launch_block(p), 0, s, a);
}

}  // namespace detail

template <typename T>
Status launch_rope_typed(const RopeKernelArgs& a, const core::RopePlan& plan, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kHalfVec = kVec > 4 ? 4 : 1;  // 16-bit types: 8, 4, 2, 1; f32: 4, 2, 1
  cudaError_t err = cudaSuccess;
  if (plan.lean || plan.lean_run) {
    if constexpr (sizeof(T) == 2) {
      ROPENORM_TRY(launch_rope_lean(
          "rope", a.cs_dtype, a.gptj, plan, stream, a, &err, [&](auto c, auto gptj) {
            using C = typename decltype(c)::type;
            constexpr bool G = decltype(gptj)::value;
            if (plan.lean_run) {
              switch (core::rope_lean_run_instance(rope_rows_by_position(a),
                                                   rope_explicit_position_bits(a),
                                                   rope_flat_tokens(a, sizeof(T)))) {
                case core::RopeLeanRunInstance::kRowsFlatI64:
                  return rope_lean_run_kernel<T, C, G, LeanRowsFlatI64>;
                case core::RopeLeanRunInstance::kAny:
                  return rope_lean_run_kernel<T, C, G, LeanAny>;
                case core::RopeLeanRunInstance::kTokensFlat:
                  return rope_lean_run_kernel<T, C, G, LeanTokensFlat>;
                case core::RopeLeanRunInstance::kRows:
                  break;
              }
              return rope_lean_run_kernel<T, C, G, LeanRows>;
            }
            return rope_rows_by_position(a) ? rope_lean_kernel<T, C, G, LeanRows>
                                            : rope_lean_kernel<T, C, G, LeanAny>;
          }));
    } else {
      return Status(StatusCode::kUnsupported, "rope: no lean kernel for 32-bit q/k");
    }
  } else if (plan.vec == kVec) {
    err = detail::launch_rope_vec<T, kVec>(a, plan, stream);
  } else if (kHalfVec == 4 && plan.vec == 4) {
    err = detail::launch_rope_vec<T, kHalfVec>(a, plan, stream);
  } else if (plan.vec == 2) {
    err = detail::launch_rope_vec<T, 2>(a, plan, stream);
  } else if (plan.vec == 1) {
    err = detail::launch_rope_vec<T, 1>(a, plan, stream);
  } else {
    return Status(StatusCode::kUnsupported,
                  "rope: no kernel for vector width " + std::to_string(plan.vec));
  }
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceError,
                  std::string("rope: kernel launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

#define ROPENORM_INSTANTIATE_ROPE(T) \
  template Status launch_rope_typed<T>(const RopeKernelArgs&, const core::RopePlan&, cudaStream_t);

}  // namespace ropenorm::cuda
