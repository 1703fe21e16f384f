/// @file
/// ropenorm fused QK-norm + RoPE backward: the gradient of ropenorm::qk_norm_rope with respect to
/// q, k and the two norm weights, in one pass over q and k.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"
#include "ropenorm/tensor.h"

namespace ropenorm {

/// Bytes of device workspace qk_norm_rope_backward needs for these sizes on CUDA device `device`
/// (-1: the calling thread's current device). The workspace holds the fp32 per-block partial
/// sums of dwq and dwk; it depends on the device's multiprocessor count (the grid is persistent)
/// and is an upper bound for every call with these sizes, whatever their strides, dtypes, style
/// or cos/sin source. When the device cannot be queried, the bound for the largest grid the
/// kernel ever launches is returned. 0 when tokens, hq + hk or head_dim is 0.
size_t qk_norm_rope_backward_workspace_size(int64_t tokens, int64_t hq, int64_t hk,
                                            int64_t head_dim, int device = -1);

/// Backward pass of qk_norm_rope, fused: one kernel launch over the head vectors of q and k,
/// then the deterministic column reductions of dwq and dwk (one launch for both when they share a
/// dtype).
///
///     for every head vector x (D channels) of q (weight wq, gradient dq_out, result dq) and of k
///     (wk, dk_out, dk), with r, o, R, the style, positions and cos/sin exactly as the forward:
///       g_n  = rope_inverse(dout)       the transposed rotation (sin negated); channels R .. D-1
///                                       pass through: g_n[d] = dout[d]
///       xh   = x * r                    r = saved rstd when given, else 1/sqrt(mean(x^2) + eps)
///       g    = g_n * (w + o)
///       dx   = r * (g - xh * mean_d(g * xh))                          (rounded once to dq's dtype)
///       dw[d] = sum over all tokens and heads of g_n[d] * xh[d]        (q heads -> dwq, k -> dwk)
///
/// All in fp32. dw is reduced in a fixed order (per-block fp32 partials into `workspace`, then a
/// column sum in block order; no atomics): bitwise the same from run to run on one device.
///
/// @param dq_out, dk_out  gradients of the forward's outputs: q's / k's shape and dtype, last dim
///                    contiguous, any other strides.
/// @param q, k        the forward's INPUTS: [T, H, D] or [B, S, H, D] (Hq, Hk heads, GQA allowed),
///                    f32/f16/bf16 (the same), last dim contiguous, any other strides (views of a
///                    packed QKV buffer), D even in [2, 512]. Both required.
/// @param wq, wk      [D] each, f32/f16/bf16 (any, independent of q's dtype), contiguous.
/// @param q_rstd, k_rstd  the forward's saved r: f32 [T, Hq] / [T, Hk] (or [B, S, H]) contiguous;
///                    each may be absent, then r is recomputed from x in the kernel.
/// @param dq, dk      results: q's / k's shape and dtype, last dim contiguous, any other strides.
///                    dq may be exactly dq_out (same view: in place) and dk exactly dk_out;
///                    otherwise every output shares no memory with any input or other output
///                    (dq may not alias q: the forward's input is read).
/// @param dwq, dwk    [D] contiguous in wq's / wk's dtype, or absent (that gradient is not
///                    wanted). They are overwritten (not accumulated into).
/// @param workspace   f32 (the library has no byte dtype), contiguous, numel * 4 >=
///                    qk_norm_rope_backward_workspace_size(T, Hq, Hk, D) bytes, on q's device,
///                    sharing memory with no other argument; its contents on entry are ignored
///                    and on return are unspecified. May be absent when dwq and dwk both are, or
///                    when the size is 0.
/// @param positions, cos_sin  as for the forward (ropenorm::rope).
/// @param rope_params style, rotary_dim and check_positions as for the forward; `inverse` must be
///                    false (the parameters describe the forward; the backward applies the
///                    inverse rotation itself).
/// @param norm_params eps and weight offset of the forward.
/// @param stream      the caller's CUDA stream; nothing is allocated, nothing is synchronised
///                    except in checked-positions mode.
/// @return ok, or an error naming the argument, what was expected and what was received; on
///         error nothing was written. Zero tokens or zero heads is a valid no-op (dwq and dwk,
///         when present, are then set to 0).
Status qk_norm_rope_backward(const TensorRef& dq_out, const TensorRef& dk_out, const TensorRef& q,
                             const TensorRef& k, const TensorRef& wq, const TensorRef& wk,
                             const TensorRef& q_rstd, const TensorRef& k_rstd, const TensorRef& dq,
                             const TensorRef& dk, const TensorRef& dwq, const TensorRef& dwk,
                             const TensorRef& workspace, const RopePositions& positions,
                             const RopeCosSin& cos_sin, const RopeParams& rope_params,
                             const QkNormParams& norm_params, Stream stream = nullptr);

}  // namespace ropenorm
