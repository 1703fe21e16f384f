// Per-dtype launch of the fused QK-norm + RoPE kernel: picks the instantiation for the plan's
// kernel (and slots per lane) and launches it on the caller's stream. Included by exactly one .cu
// per q/k dtype. The weight dtype, the cos/sin source and the direction are run-time switches
// inside the kernels (uniform branches), and so is the cos/sin table dtype except in the lean
// kernel, where it is a template argument: each dtype has four scalar kernels (slots per lane
// 1, 2, 4, 8) and, for 16-bit types, the vector kernel, the pair kernel per style (single-round
// or looping), the lean kernel per style and cos/sin table dtype in the instances
// core::qk_lean_instance picks (LeanDecode for int64 and int32 positions, LeanLanesWeights for
// 8 and 16 lanes, LeanAny) and the lean-run kernel per style and table dtype for 8 and 16 lanes
// in the instances core::qk_lean_run_instance picks (LeanFlatI64, LeanRowsI64, LeanFlatTokens,
// LeanLanes).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "core/checks.h"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_typed.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

template <typename T>
Status launch_qk_norm_rope_typed(const QkNormRopeArgs& a, const core::QkNormRopePlan& plan,
                                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.grid));
  const dim3 block(static_cast<unsigned>(plan.threads));
  cudaError_t err = cudaSuccess;
  if (plan.kernel == core::QkKernel::kLeanRun) {
    if constexpr (sizeof(T) == 2) {
      const core::QkLeanRunInstance inst = core::qk_lean_run_instance(
          rope_rows_by_position(a.rope), rope_explicit_position_bits(a.rope),
          rope_flat_tokens(a.rope, sizeof(T)),
          core::lean_run_full_warps(plan.rope, int64_t{a.rope.hq} + a.rope.hk));
      ROPENORM_TRY(launch_rope_lean(
          "qk_norm_rope", a.rope.cs_dtype, a.rope.gptj, plan.rope, stream, a, &err,
          [&](auto c, auto gptj) {
            using C = typename decltype(c)::type;
            constexpr bool G = decltype(gptj)::value;
            const bool l8 = plan.rope.bx == 8;
            switch (inst) {
              case core::QkLeanRunInstance::kFlatI64:
                return l8 ? qk_norm_rope_lean_run_kernel<T, C, G, LeanFlatI64<8>>
                          : qk_norm_rope_lean_run_kernel<T, C, G, LeanFlatI64<16>>;
              case core::QkLeanRunInstance::kLanesRowsI64:
                return l8 ? qk_norm_rope_lean_run_kernel<T, C, G, LeanRowsI64<8>>
                          : qk_norm_rope_lean_run_kernel<T, C, G, LeanRowsI64<16>>;
              case core::QkLeanRunInstance::kFlatTokens:
                return l8 ? qk_norm_rope_lean_run_kernel<T, C, G, LeanFlatTokens<8>>
                          : qk_norm_rope_lean_run_kernel<T, C, G, LeanFlatTokens<16>>;
              case core::QkLeanRunInstance::kLanes:
                break;
            }
            return l8 ? qk_norm_rope_lean_run_kernel<T, C, G, LeanLanes<8>>
                      : qk_norm_rope_lean_run_kernel<T, C, G, LeanLanes<16>>;
          }));
    } else {
      return Status(StatusCode::kUnsupported, "qk_norm_rope: no lean-run kernel for 32-bit q/k");
    }
  } else if (plan.kernel == core::QkKernel::kLean) {
    if constexpr (sizeof(T) == 2) {
      core::QkLeanInstanceFacts f;
      f.tokens = a.rope.tokens;
      f.lanes = plan.rope.bx;
      f.threads = int64_t{plan.rope.bx} * plan.rope.by;
      f.weights_as_data = a.wq_dtype == DTypeOf<T>::value && a.wk_dtype == DTypeOf<T>::value;
      f.cos_sin_rows = rope_rows_by_position(a.rope);
      f.explicit_position_bits = rope_explicit_position_bits(a.rope);
      const core::QkLeanInstance inst = core::qk_lean_instance(f);
      ROPENORM_TRY(launch_rope_lean(
          "qk_norm_rope", a.rope.cs_dtype, a.rope.gptj, plan.rope, stream, a, &err,
          [&](auto c, auto gptj) {
            using C = typename decltype(c)::type;
            constexpr bool G = decltype(gptj)::value;
            switch (inst) {
              case core::QkLeanInstance::kDecodeI64:
                return qk_norm_rope_lean_kernel<T, C, G, LeanDecode<LeanPositions::kInt64>>;
              case core::QkLeanInstance::kDecodeI32:
                return qk_norm_rope_lean_kernel<T, C, G, LeanDecode<LeanPositions::kInt32>>;
              case core::QkLeanInstance::kLanesWeights:
                return f.lanes == 8 ? qk_norm_rope_lean_kernel<T, C, G, LeanLanesWeights<8>>
                                    : qk_norm_rope_lean_kernel<T, C, G, LeanLanesWeights<16>>;
              case core::QkLeanInstance::kAny:
                break;
            }
            return qk_norm_rope_lean_kernel<T, C, G, LeanAny>;
          }));
    } else {
      return Status(StatusCode::kUnsupported, "qk_norm_rope: no lean kernel for 32-bit q/k");
    }
  } else if (plan.kernel == core::QkKernel::kPair) {
    if constexpr (sizeof(T) == 2) {
      constexpr int V = kQkVecChannels;
      constexpr int KH = core::kRopeHeadsPerThread;
      constexpr int MB = kQkPairMinBlocks;
      const bool single = plan.rope.single;
      const auto kernel = a.rope.gptj
                              ? (single ? qk_norm_rope_pair_kernel<T, V, KH, MB, true, true>
                                        : qk_norm_rope_pair_kernel<T, V, KH, MB, true, false>)
                              : (single ? qk_norm_rope_pair_kernel<T, V, KH, MB, false, true>
                                        : qk_norm_rope_pair_kernel<T, V, KH, MB, false, false>);
      err = launch_with_pdl(kernel, rope_launch_grid(plan.rope), rope_launch_block(plan.rope), 0,
                            stream, a);
    } else {
      return Status(StatusCode::kUnsupported, "qk_norm_rope: no pair kernel for 32-bit q/k");
    }
  } else if (plan.kernel == core::QkKernel::kVector) {
    if constexpr (sizeof(T) == 2) {
      err = launch_with_pdl(qk_norm_rope_vec_kernel<T, kQkVecHeadsPerGroup, kQkVecMinBlocks>, grid,
                            block, 0, stream, a);
    } else {
      return Status(StatusCode::kUnsupported, "qk_norm_rope: no vector kernel for 32-bit q/k");
    }
  } else {
    switch (plan.slots_per_lane) {
      case 1:
        err = launch_with_pdl(qk_norm_rope_kernel<T, 1>, grid, block, 0, stream, a);
        break;
      case 2:
        err = launch_with_pdl(qk_norm_rope_kernel<T, 2>, grid, block, 0, stream, a);
        break;
      case 4:
        err = launch_with_pdl(qk_norm_rope_kernel<T, 4>, grid, block, 0, stream, a);
        break;
      case 8:
        err = launch_with_pdl(qk_norm_rope_kernel<T, 8>, grid, block, 0, stream, a);
        break;
      default:
        return Status(StatusCode::kUnsupported, "qk_norm_rope: no kernel for " +
                                                    std::to_string(plan.slots_per_lane) +
                                                    " slots per lane");
    }
  }
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceError,
                  std::string("qk_norm_rope: kernel launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

#define ROPENORM_INSTANTIATE_QK_NORM_ROPE(T)                                                       \
  template Status launch_qk_norm_rope_typed<T>(const QkNormRopeArgs&, const core::QkNormRopePlan&, \
                                               cudaStream_t);

}  // namespace ropenorm::cuda
