/// @file
/// ropenorm fused QK-norm + RoPE forward (Qwen3, OLMo-2, Gemma-3 attention prologue).
#pragma once

#include "ropenorm/rope.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"
#include "ropenorm/tensor.h"

namespace ropenorm {

/// Normalisation parameters of qk_norm_rope.
struct QkNormParams {
  /// Finite, in [1e-12, 1e-2].
  float eps = 1e-6f;
  /// o: the weight factor is (w + o); 0 for Qwen3 / OLMo-2, 1 for Gemma's (1 + w). Finite.
  float weight_offset = 0.0f;
};

/// Fused per-head RMSNorm and rotary embedding of q and k, in one kernel launch:
///
///     for every head vector x (D channels) of q (weight wq) and of k (weight wk):
///       r    = 1 / sqrt(sum_{d < D} x[d]^2 / D + eps)                  (fp32)
///       n[d] = x[d] * r * (w[d] + o)                                   (fp32, not rounded)
///       out  = rope(n)   exactly as ropenorm::rope rotates (pairs, styles, rotary_dim R,
///                        inverse, cos/sin sources, positions); channels R .. D-1 are n[d]
///
/// Each output element is rounded once to the output dtype; r is stored (fp32) to q_rstd /
/// k_rstd when present, for the backward pass.
///
/// @param q, k        [T, H, D] or [B, S, H, D] (Hq, Hk heads), f32/f16/bf16 (the same), last
///                    dim contiguous, any other strides (views of a packed QKV buffer), D even in
///                    [2, 512]. k is required.
/// @param wq, wk      [D] each, f32/f16/bf16 (any, independent of q's dtype), contiguous.
/// @param q_out, k_out  q's / k's shape and dtype; the same view as the input for in place, else
///                    sharing memory with no input.
/// @param q_rstd, k_rstd  f32 [T, Hq] / [T, Hk] (or [B, S, H]) contiguous, or absent.
/// @param positions, cos_sin, rope_params  as for ropenorm::rope.
/// @param norm_params eps and weight offset.
/// @param stream      the caller's CUDA stream; nothing is allocated, and nothing is synchronised
///                    except in checked-positions mode (rope_params.check_positions).
/// @return ok, or an error naming the argument, what was expected and what was received; on
///         error nothing was written. Zero tokens or zero heads is a valid no-op.
Status qk_norm_rope(const TensorRef& q, const TensorRef& k, const TensorRef& wq,
                    const TensorRef& wk, const TensorRef& q_out, const TensorRef& k_out,
                    const TensorRef& q_rstd, const TensorRef& k_rstd,
                    const RopePositions& positions, const RopeCosSin& cos_sin,
                    const RopeParams& rope_params, const QkNormParams& norm_params,
                    Stream stream = nullptr);

}  // namespace ropenorm
