// The unfused RoPE baseline the benchmark compares against: Hugging Face's apply_rotary_pos_emb
// as eager PyTorch runs it on [T, H, D] contiguous q and k, full rotary (R = D), one simple kernel
// per step:
//   1. cos, sin = the rotary embedding module's per-token tables: rows of the [P, R] cos/sin cache
//      (c_0 .. c_{h-1}, s_0 .. s_{h-1}) gathered by position into [T, D] tables with duplicated
//      halves (neox: column j holds pair j % h; gptj: pair j / 2, Hugging Face GPT-J's
//      repeat_interleave), rounded to q's dtype (Hugging Face's cos.to(x.dtype));
//   2. rot = rotate_half(x) (neox: [-x2, x1]; gptj: rotate_every_two, (-x[2i+1], x[2i]));
//   3. out = x * cos + rot * sin, cos/sin broadcast over heads, each product rounded to the dtype
//      and then the sum rounded (three eager elementwise ops, written as one kernel).
// Steps 2 and 3 run for q and then for k: 1 + 2 * 2 launches, in stream order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ropenorm/rope_cache.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::bench {

struct RopeBaselineBuffers {
  const void* q;             ///< [T, Hq, D] of dtype
  const void* k;             ///< [T, Hk, D] of dtype
  void* q_out;               ///< [T, Hq, D]
  void* k_out;               ///< [T, Hk, D]
  const void* cache;         ///< [P, D] of cache_dtype (cos half, then sin half)
  DType cache_dtype;         ///< f32, f16 or bf16
  const int64_t* positions;  ///< [T], each in [0, P)
  void* cos;                 ///< T * D elements of dtype (the gathered tables)
  void* sin;                 ///< T * D elements of dtype
  void* rot;                 ///< T * max(Hq, Hk) * D elements of dtype (rotate_half(x))
};

/// Enqueues the unfused kernels on `stream` (5 launches; allocates nothing). `inverse`: the
/// backward, dx = dy * cos + rotate_half^T(dy * sin); rotate_half (and rotate_every_two) is
/// skew-symmetric, so that is dy * cos + rotate_half(dy) * (-sin): the same kernels with the
/// gathered sin negated (exactly).
Status baseline_rope(const RopeBaselineBuffers& b, DType dtype, RopeStyle style, bool inverse,
                     int64_t t, int64_t hq, int64_t hk, int64_t d, cudaStream_t stream);

}  // namespace ropenorm::bench
