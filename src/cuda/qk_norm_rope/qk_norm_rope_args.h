// The plain-data argument block of the fused QK-norm + RoPE kernel, built by the launcher after
// validation (the kernel trusts it). It embeds the RoPE argument block (operands, positions,
// cos/sin source, style), so positions and cos/sin are resolved by the RoPE kernel's functions.
#pragma once

#include <cstdint>

#include "cuda/rope/rope_args.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

struct QkNormRopeArgs {
  RopeKernelArgs rope;  // q, k, q_out, k_out, geometry, positions, cos/sin, style, inverse
  const void* wq;       // [D], dtype wq_dtype
  const void* wk;       // [D], dtype wk_dtype
  DType wq_dtype, wk_dtype;
  float eps;
  float weight_offset;
  float* q_rstd;         // [T * Hq] (token-major), or nullptr
  float* k_rstd;         // [T * Hk], or nullptr
  int group;             // lanes per head vector: a power of two in [1, 32]
  int slots;             // D / 2 channel pairs per head vector
  int groups_per_token;  // vector kernel: lane groups serving one token
};

}  // namespace ropenorm::cuda
