// Declaration of the per-dtype fused QK-norm + RoPE launch; its instantiations live in
// qk_norm_rope_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include "core/qk_norm_rope_plan.h"
#include "cuda/qk_norm_rope/qk_norm_rope_args.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// Launches the planned kernel for q/k dtype T on `stream` (with programmatic dependent launch
/// where the device has it). Returns the launch error, if any, naming the op.
template <typename T>
Status launch_qk_norm_rope_typed(const QkNormRopeArgs& a, const core::QkNormRopePlan& plan,
                                 cudaStream_t stream);

}  // namespace ropenorm::cuda
