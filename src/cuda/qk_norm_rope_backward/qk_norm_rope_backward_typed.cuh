// Per-dtype launch of the fused QK-norm + RoPE backward kernel: picks the instantiation for the
// plan's vector width V and slots per lane KS (or, for a lean plan, the lean kernel for the
// cos/sin table dtype and style in the instance core::qk_bwd_lean_instance picks) and launches it
// on the caller's stream. Included by exactly one .cu per q/k dtype. The weight dtype, the
// cos/sin source and dtype, the style, the saved-or-recomputed rstd and whether dw is wanted
// are run-time switches inside the kernel (uniform branches). The pairs (V, KS) instantiated are
// those a head_dim <= 512 can need: V * KS <= 8 (a lane holds at most 16 channels of a head
// vector).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "core/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_kernels.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_lean_kernel.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_typed.h"
#include "cuda/rope/rope_lean_spec.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

namespace detail {

using QkBwdKernel = void (*)(QkNormRopeBackwardArgs);

// The instance for vector width vec and ks slots per lane, or nullptr.
template <typename T>
QkBwdKernel qk_bwd_kernel_for(int vec, int ks) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  switch (vec * 16 + ks) {
    case 16 + 1:
      return qk_norm_rope_backward_kernel<T, 1, 1>;
    case 16 + 2:
      return qk_norm_rope_backward_kernel<T, 1, 2>;
    case 16 + 4:
      return qk_norm_rope_backward_kernel<T, 1, 4>;
    case 16 + 8:
      return qk_norm_rope_backward_kernel<T, 1, 8>;
    case 32 + 1:
      return qk_norm_rope_backward_kernel<T, 2, 1>;
    case 32 + 2:
      return qk_norm_rope_backward_kernel<T, 2, 2>;
    case 32 + 4:
      return qk_norm_rope_backward_kernel<T, 2, 4>;
    case 64 + 1:
      return qk_norm_rope_backward_kernel<T, 4, 1>;
    case 64 + 2:
      return qk_norm_rope_backward_kernel<T, 4, 2>;
    case 128 + 1:
      if constexpr (kVec >= 8) return qk_norm_rope_backward_kernel<T, kVec, 1>;
      return nullptr;
    default:
      return nullptr;
  }
}

// The lean instance for the call's cos/sin table dtype, style and core::qk_bwd_lean_instance
// (16-bit T, `lanes` lanes per head), or nullptr.
template <typename T>
QkBwdKernel qk_bwd_lean_kernel_for(const QkNormRopeBackwardArgs& a, int lanes) {
  QkBwdKernel k = nullptr;
  if constexpr (sizeof(T) == 2) {
    const bool fixed = core::qk_bwd_lean_instance(lanes) == core::QkBwdLeanInstance::kLanes;
    core::dispatch_float_dtype<f16, bf16>(
        a.rope.cs_dtype, "qk_norm_rope_backward", "cos/sin", [&](auto tag) -> Status {
          using C = typename decltype(tag)::type;
          auto pick = [&](auto gptj) -> QkBwdKernel {
            constexpr bool G = decltype(gptj)::value;
            if (!fixed) return qk_norm_rope_backward_lean_kernel<T, C, G, LeanAny>;
            return lanes == 8 ? qk_norm_rope_backward_lean_kernel<T, C, G, LeanLanes<8>>
                              : qk_norm_rope_backward_lean_kernel<T, C, G, LeanLanes<16>>;
          };
          k = a.rope.gptj ? pick(std::true_type{}) : pick(std::false_type{});
          return Status::Ok();
        });
  }
  return k;
}

// The instance the plan selects for the call, or nullptr.
template <typename T>
QkBwdKernel qk_bwd_planned_kernel(const QkNormRopeBackwardArgs& a,
                                  const core::QkNormRopeBackwardPlan& plan) {
  return plan.lean ? qk_bwd_lean_kernel_for<T>(a, plan.group)
                   : qk_bwd_kernel_for<T>(plan.vec, plan.slots_per_lane);
}

}  // namespace detail

template <typename T>
int qk_norm_rope_backward_occupancy(const QkNormRopeBackwardArgs& a,
                                    const core::QkNormRopeBackwardPlan& plan) {
  const detail::QkBwdKernel k = detail::qk_bwd_planned_kernel<T>(a, plan);
  if (k == nullptr) return 0;
  return blocks_per_sm(reinterpret_cast<const void*>(k), plan.threads, plan.smem_bytes);
}

template <typename T>
Status launch_qk_norm_rope_backward_typed(const QkNormRopeBackwardArgs& a,
                                          const core::QkNormRopeBackwardPlan& plan,
                                          cudaStream_t stream) {
  const detail::QkBwdKernel k = detail::qk_bwd_planned_kernel<T>(a, plan);
  if (k == nullptr) {
    return Status(StatusCode::kUnsupported,
                  std::string("qk_norm_rope_backward: no ") + (plan.lean ? "lean " : "") +
                      "kernel for vector width " + std::to_string(plan.vec) + " with " +
                      std::to_string(plan.slots_per_lane) + " slots per lane");
  }
  const dim3 grid(static_cast<unsigned>(plan.grid), static_cast<unsigned>(plan.head_groups));
  const dim3 block = plan.lean
                         ? dim3(static_cast<unsigned>(plan.group), static_cast<unsigned>(plan.rows))
                         : dim3(static_cast<unsigned>(plan.threads));
  cudaError_t err = launch_with_pdl(k, grid, block, plan.smem_bytes, stream, a);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(
        StatusCode::kDeviceError,
        std::string("qk_norm_rope_backward: kernel launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

#define ROPENORM_INSTANTIATE_QK_NORM_ROPE_BACKWARD(T)                                   \
  template int qk_norm_rope_backward_occupancy<T>(const QkNormRopeBackwardArgs&,        \
                                                  const core::QkNormRopeBackwardPlan&); \
  template Status launch_qk_norm_rope_backward_typed<T>(                                \
      const QkNormRopeBackwardArgs&, const core::QkNormRopeBackwardPlan&, cudaStream_t);

}  // namespace ropenorm::cuda
