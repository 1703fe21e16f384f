// Declaration of the per-dtype fused QK-norm + RoPE backward launch; its instantiations live in
// qk_norm_rope_backward_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include "core/qk_norm_rope_backward_plan.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_args.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// Resident blocks per multiprocessor of the instance the plan selects for the call (lean: by
/// the cos/sin table dtype and style; general: vec, slots_per_lane; threads, shared memory) on
/// the current device; 0 when the plan has no instance.
template <typename T>
int qk_norm_rope_backward_occupancy(const QkNormRopeBackwardArgs& a,
                                    const core::QkNormRopeBackwardPlan& plan);

/// Launches the planned backward kernel for q/k dtype T on `stream` (with programmatic dependent
/// launch where the device has it). Returns the launch error, if any, naming the op.
template <typename T>
Status launch_qk_norm_rope_backward_typed(const QkNormRopeBackwardArgs& a,
                                          const core::QkNormRopeBackwardPlan& plan,
                                          cudaStream_t stream);

}  // namespace ropenorm::cuda
