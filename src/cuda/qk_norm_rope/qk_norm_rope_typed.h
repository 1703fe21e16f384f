// Declaration of the per-dtype fused QK-norm + RoPE launch; its instantiations live in
// qk_norm_rope_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include "core/rope_plan.h"
#include "cuda/qk_norm_rope/qk_norm_rope_args.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// Launch shape of the fused kernel, decided by the launcher.
struct QkNormRopePlan {
  bool pair = false;       ///< the pair kernel, block shape `rope` (see qk_norm_rope_kernels.cuh)
  core::RopePlan rope;     ///< pair kernel: block (bx, by, bz) and grid
  bool vector = false;     ///< the 16-byte vector kernel (see qk_norm_rope_kernels.cuh)
  int slots_per_lane = 1;  ///< KS: 1, 2, 4 or 8 (scalar kernel)
  int threads = 32;        ///< at most kQkNormRopeMaxThreads (scalar kernel: a multiple of 32)
  int64_t grid = 1;        ///< blocks (each loops over its tokens)
};

/// Launches the fused kernel for q/k dtype T on `stream` (with programmatic dependent launch
/// where the device has it). Returns the launch error, if any, naming the op.
template <typename T>
Status launch_qk_norm_rope_typed(const QkNormRopeArgs& a, const QkNormRopePlan& plan,
                                 cudaStream_t stream);

}  // namespace ropenorm::cuda
