// The lean-rule facts of an aligned 16-bit call with cos/sin from a table, for the CPU plan tests
// of the lean RoPE, QK-norm + RoPE and backward kernels.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"

namespace ropenorm::plan_test {

/// 16-bit q/k at vector width 8, cos/sin loaded, one sequence of `tokens` tokens.
inline core::RopeLeanFacts lean_facts(int64_t tokens, int64_t heads, int64_t half,
                                      int64_t head_dim) {
  core::RopeLeanFacts f;
  f.elem_size = 2;
  f.vec = 8;
  f.cos_sin_loaded = true;
  f.tokens = tokens;
  f.heads = heads;
  f.half = half;
  f.head_dim = head_dim;
  return f;
}

}  // namespace ropenorm::plan_test
