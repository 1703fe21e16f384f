// Host-side argument building of the fused QK-norm + RoPE backward, shared by its launcher and the
// lean-backward experiment (which launches chosen instances of the lean kernel on the library's
// arguments and plan).
#pragma once

#include "core/qk_norm_rope_backward_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_args.h"

namespace ropenorm::cuda {

/// Fills the kernel arguments of a validated call (the RoPE part through fill_rope_args with the
/// inverse rotation, the incoming gradients, weights, eps, weight offset, saved rstd and the
/// rotary slots at the joint vector width) and the facts the lean rule and plan decide from.
/// The plan's fields (partials, tokens per block, group, slots) are qk_bwd_apply_plan's.
void fill_qk_norm_rope_backward_args(const core::QkNormRopeBackwardCall& c,
                                     const core::RopeGeometry& g, QkNormRopeBackwardArgs* qa,
                                     core::RopeLeanFacts* lean_facts);

/// Copies the plan's fields into the arguments; partials: the dw workspace, or nullptr when no
/// dw is wanted.
void qk_bwd_apply_plan(const core::QkNormRopeBackwardPlan& plan, float* partials,
                       QkNormRopeBackwardArgs* qa);

}  // namespace ropenorm::cuda
