// Declaration of the per-dtype RMSNorm backward launch; its instantiations live in
// rms_norm_backward_<dtype>.cu (one per input dtype Tin, each for every dy dtype).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/rms_norm_backward_plan.h"
#include "cuda/rms_norm_backward/rms_norm_backward_args.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// Launches the kernel that `plan` names for input (x or s, and ds) dtype Tin and dy dtype Tdy on
/// `stream`; *grid receives the number of blocks, which is the number of partial rows written
/// (when a.partials is set). `op` names the calling op in errors.
template <typename Tin, typename Tdy>
Status launch_rms_norm_backward_typed(const char* op, const RmsNormBwdKernelArgs& a,
                                      const core::RmsNormBwdPlan& plan, cudaStream_t stream,
                                      int64_t* grid);

}  // namespace ropenorm::cuda
