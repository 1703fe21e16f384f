// The fused QK-norm + RoPE backward launcher behind qk_norm_rope_backward, with the planner's
// lean kernel as a choice: the public entry point allows it; tests disallow it to run the general
// kernel on the same call and compare the two kernels' dq and dk bits.
#pragma once

#include "core/qk_norm_rope_validate.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"

namespace ropenorm::cuda {

/// Validates `call` (nothing written on failure), plans it (the lean kernel only when allow_lean
/// and core::qk_norm_rope_backward_lean accepts it), launches the fused kernel and the dw column
/// sums on `stream`.
Status run_qk_norm_rope_backward(const core::QkNormRopeBackwardCall& call, bool allow_lean,
                                 Stream stream);

}  // namespace ropenorm::cuda
