// The RoPE launcher behind rope, with the planner's lean kernel as a choice: the public entry
// point allows it; tests disallow it to run the general kernel on the same call and compare the
// two kernels' bits (every kernel gives the same bits for a token).
#pragma once

#include "core/rope_validate.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"

namespace ropenorm::cuda {

/// Validates `call` (nothing written on failure), plans it (the lean kernel, core::rope_lean
/// under core::rope_lean_max_tokens, only when allow_lean; else core::plan_rope) and launches it
/// on `stream`.
Status run_rope(const core::RopeCall& call, bool allow_lean, Stream stream);

}  // namespace ropenorm::cuda
