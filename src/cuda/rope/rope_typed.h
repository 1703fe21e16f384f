// Declaration of the per-dtype RoPE launch; its instantiations live in rope_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include "core/rope_plan.h"
#include "cuda/rope/rope_args.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// Launches the RoPE kernel for q/k dtype T at the plan's vector width and block shape on
/// `stream`. Returns the launch error, if any, naming the op.
template <typename T>
Status launch_rope_typed(const RopeKernelArgs& a, const core::RopePlan& plan, cudaStream_t stream);

}  // namespace ropenorm::cuda
