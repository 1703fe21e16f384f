// The plain-data argument block of the fused QK-norm + RoPE backward kernel, built by the
// launcher after validation (the kernel trusts it). It embeds the RoPE argument block, so
// positions and cos/sin are resolved by the RoPE kernel's functions: its q / k operands are the
// forward's inputs x, its q_out / k_out the results dq / dk, and `inverse` is set (sin negated).
#pragma once

#include <cstdint>

#include "cuda/rope/rope_args.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

struct QkNormRopeBackwardArgs {
  RopeKernelArgs rope;  // x (q, k), dx (q_out, k_out), geometry, positions, cos/sin, style
  RopeOperand gq, gk;   // dq_out, dk_out: the incoming gradients
  const void* wq;       // [D], dtype wq_dtype
  const void* wk;       // [D], dtype wk_dtype
  DType wq_dtype, wk_dtype;
  float eps;
  float weight_offset;
  const float* q_rstd;       // [T * Hq] (token-major), or nullptr: recomputed from x
  const float* k_rstd;       // [T * Hk], or nullptr
  float* partials;           // [2, gridDim.x * gridDim.y, D] fp32 (q rows, then k), or nullptr
  int64_t tokens_per_block;  // general kernel: block b owns tokens [b C, min(T, (b + 1) C))
  int group;                 // lanes per head vector: a power of two in [1, 32]
  int slots;                 // slots per head vector (see core/qk_norm_rope_backward_plan.h)
  int rot_slots;             // the first h / V of them are rotary
};

}  // namespace ropenorm::cuda
