/// @file
/// ropenorm RMSNorm backward, plain and after a fused residual add.
///
/// Rows are the last dimension, as in the forward (include/ropenorm/rms_norm.h): every leading
/// dimension is a row index, with any strides on the leading dims and stride 1 on the last.
///
/// The weight gradient is reduced deterministically: each block of a persistent grid keeps fp32
/// partials of its (fixed) rows, writes them to a caller-provided workspace, and a second kernel
/// sums the partial rows in a fixed order. No float atomics: dw and dx are bitwise the same from
/// run to run for the same inputs, and a row's dx does not depend on the number of rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ropenorm/status.h"
#include "ropenorm/stream.h"
#include "ropenorm/tensor.h"

namespace ropenorm {

/// The scalar parameters of rms_norm_backward and add_rms_norm_backward (the forward's).
struct RmsNormBackwardParams {
  /// Used only when rstd is absent (r is then recomputed from the input, exactly as the forward
  /// computes it). Must be finite and in [1e-12, 1e-2].
  float eps = 1e-6f;
  /// o in (w + o): 0 for Llama, 1 for Gemma. Must be 0 when there is no weight.
  float weight_offset = 0.0f;
};

/// Bytes of device workspace rms_norm_backward / add_rms_norm_backward need for rows x n
/// (the same for both ops); 0 when rows or n is 0. Depends on n and on the device (its SM count),
/// never on rows beyond rows == 0. A call without a weight needs none (pass an absent workspace).
/// The calls never allocate.
/// @param rows    M, the number of rows (the product of all dims but the last).
/// @param n       N, the row width.
/// @param device  CUDA device ordinal, or -1 for the calling thread's current device.
/// @return        the byte count; 0 also when the device cannot be queried (the call then
///                reports the error).
size_t rms_norm_backward_workspace_size(int64_t rows, int64_t n, int device = -1);

/// RMSNorm backward (the forward y = x * r * (w + o), r = 1 / sqrt(mean(x^2) + eps)).
///
///     xh[m, n] = x[m, n] * r[m]                                        (fp32)
///     g[m, n]  = dy[m, n] * (w[n] + o)                                 (fp32; factor 1 without w)
///     dx[m, n] = r[m] * (g[m, n] - xh[m, n] * mean_n(g[m, :] * xh[m, :]))   (one rounding)
///     dw[n]    = sum_m dy[m, n] * xh[m, n]     (fp32, fixed order; one rounding to w's dtype)
///
/// The exact fp32 formula serves both forward rounding modes: Hugging Face's hf_llama rounding
/// is a forward-only choice and its backward is taken as the exact one.
///
/// @param dy         [..., N] f32/f16/bf16, last dim contiguous, any row strides.
/// @param x          same shape as dy, f32/f16/bf16 (may differ from dy's), the forward's input.
/// @param weight     [N] f32/f16/bf16 contiguous (any dtype, independent of x's), or absent.
/// @param rstd       f32, one per row, contiguous: the forward's saved r (rms_norm's rstd). Or
///                   absent: r is recomputed from x with params.eps.
/// @param dx         same shape as dy, f32/f16/bf16 (any); may be exactly dy (in place: same
///                   pointer, dtype, sizes and strides), else must not overlap any input.
/// @param dw         [N] contiguous, weight's dtype; or absent (dw not wanted). Must be absent
///                   when weight is absent.
/// @param workspace  f32 on the device, contiguous, at least
///                   rms_norm_backward_workspace_size(rows, N) / 4 elements (the library has no
///                   byte dtype); absent allowed when dw is absent. Clobbered; must not overlap
///                   any argument.
/// @param params     eps (used only without rstd) and the weight offset o, as in the forward.
/// @param stream     CUDA stream to launch on (the caller's; nothing is synchronised).
/// @return           ok, or an error naming the argument; on error nothing was written.
///
/// Widths: any N from 1 to 2^31 - 1 (rows wider than 16384 columns, or views whose alignment
/// allows only scalar access, take a path that reads each row twice). The workspace holds fp32
/// partial rows of N values: up to 4 per SM for N <= 16384, 1 per SM above, never more than one
/// per row. Zero rows: dw is set to 0 (the empty sum), nothing else is written; N = 0: nothing is
/// written.
Status rms_norm_backward(const TensorRef& dy, const TensorRef& x, const TensorRef& weight,
                         const TensorRef& rstd, const TensorRef& dx, const TensorRef& dw,
                         const TensorRef& workspace, const RmsNormBackwardParams& params,
                         Stream stream = nullptr);

/// Backward of the fused residual add + RMSNorm (forward: s = round(x + residual),
/// y = rms_norm(s), returning y and s).
///
///     gs[m, n] = rms_norm_backward_dx(dy, s)[m, n] + ds[m, n]          (fp32, with the formula
///                above on s; ds = 0 when absent)
///     dx = round_to(dx's dtype, gs), dresidual = round_to(dresidual's dtype, gs)  (each one
///                rounding of the same fp32 gs)
///     dw as above, with xh = s * r.
///
/// @param dy         [..., N] f32/f16/bf16: gradient of y.
/// @param ds         same shape and dtype as s: gradient arriving through the returned s; or
///                   absent (0).
/// @param s          same shape, f32/f16/bf16: the saved sum (the forward's residual_out).
/// @param weight     as for rms_norm_backward.
/// @param rstd       as for rms_norm_backward (r of s); absent: recomputed from s.
/// @param dx         same shape, f32/f16/bf16 (x's dtype); may be exactly dy or exactly ds.
/// @param dresidual  same shape, f32/f16/bf16 (residual's dtype); may be exactly ds or exactly
///                   dy (not the same one as dx); must not overlap dx. Or absent: only dx is
///                   written, and it is the gradient of both x and residual where they share a
///                   dtype (the same values dresidual would hold; one write of the rows less).
/// @param dw, workspace, params, stream  as for rms_norm_backward.
Status add_rms_norm_backward(const TensorRef& dy, const TensorRef& ds, const TensorRef& s,
                             const TensorRef& weight, const TensorRef& rstd, const TensorRef& dx,
                             const TensorRef& dresidual, const TensorRef& dw,
                             const TensorRef& workspace, const RmsNormBackwardParams& params,
                             Stream stream = nullptr);

}  // namespace ropenorm
