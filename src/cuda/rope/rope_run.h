// The RoPE launcher behind rope, with the planner's lean kernel as a choice: the public entry
// point allows it; tests disallow it to run the general kernel on the same call and compare the
// two kernels' bits (every kernel gives the same bits for a token).
#pragma once

#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"

namespace ropenorm::cuda {

/// Validates `call` (nothing written on failure), plans it (core::plan_rope_call: the lean run
/// or the lean kernel only when allow_lean, else the general kernel) and launches it on
/// `stream`; `planned`, when given, receives the plan launched (tests check which kernel ran).
Status run_rope(const core::RopeCall& call, bool allow_lean, Stream stream,
                core::RopePlan* planned = nullptr);

}  // namespace ropenorm::cuda
