// The fused QK-norm + RoPE launcher behind qk_norm_rope, with the planner's lean kernel as a
// choice: the public entry point allows it; tests disallow it to run the pair kernel on the same
// call and compare the two kernels' bits (every kernel gives the same bits for a head).
#pragma once

#include "core/qk_norm_rope_validate.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"

namespace ropenorm::cuda {

/// Validates `call` (nothing written on failure), plans it (core::plan_qk_norm_rope, the lean
/// kernel only when allow_lean) and launches it on `stream`.
Status run_qk_norm_rope(const core::QkNormRopeCall& call, bool allow_lean, Stream stream);

}  // namespace ropenorm::cuda
