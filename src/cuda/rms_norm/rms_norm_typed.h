// Declaration of the per-dtype RMSNorm launch; its instantiations live in rms_norm_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include "core/rms_norm_plan.h"
#include "cuda/rms_norm/rms_norm_args.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// Launches the kernel that `plan` names for input dtype Tx and residual dtype Tr (NoResidual
/// for the plain op) on `stream`. Returns the launch error, if any, naming the op.
template <typename Tx, typename Tr>
Status launch_rms_norm_typed(const RmsNormKernelArgs& a, const core::RmsNormPlan& plan,
                             cudaStream_t stream);

}  // namespace ropenorm::cuda
