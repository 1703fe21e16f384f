// Host-side argument building of the fused QK-norm + RoPE forward, shared by its launcher and the
// decode experiment (which launches a chosen plan through launch_qk_norm_rope_typed); the weight
// alignment fact also serves the backward's launcher.
#pragma once

#include "core/qk_norm_rope_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_validate.h"
#include "cuda/qk_norm_rope/qk_norm_rope_args.h"

namespace ropenorm::cuda {

/// Fills the kernel arguments of a validated call (the RoPE part through fill_rope_args; the
/// weights, eps, weight offset, rstd outputs and slots) and the facts core::plan_qk_norm_rope
/// decides from. The plan's lane-group fields (group, groups_per_token) are the caller's to copy.
void fill_qk_norm_rope_args(const core::QkNormRopeCall& c, const core::RopeGeometry& g,
                            QkNormRopeArgs* qa, core::QkNormRopeFacts* facts);

/// wq and wk both start on a 16-byte boundary.
bool qk_weights_aligned16(const core::QkNormRopeCall& c);

}  // namespace ropenorm::cuda
