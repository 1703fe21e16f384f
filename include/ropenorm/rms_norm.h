/// @file
/// ropenorm RMSNorm forward, plain and with a fused residual add.
///
/// Rows are the last dimension of x; every leading dimension is a row index (a [B, S, H] tensor is
/// B*S rows of width H), with any strides on the leading dims and stride 1 on the last.
#pragma once

#include "ropenorm/status.h"
#include "ropenorm/stream.h"
#include "ropenorm/tensor.h"

namespace ropenorm {

/// How the normalised value is rounded to the output dtype.
enum class Rounding : int {
  /// y = round(x * r * (w + o)): one rounding of the fp32 result (default).
  kExact = 0,
  /// Hugging Face LlamaRMSNorm: t = round_to(x's dtype, x * r); y = round(w * t) (w + o if o != 0).
  kHfLlama = 1,
};

/// "exact" or "hf_llama".
const char* rounding_name(Rounding rounding);

/// The scalar parameters of rms_norm and add_rms_norm.
struct RmsNormParams {
  /// Added to mean(x^2) inside the square root. Must be finite and in [1e-12, 1e-2].
  float eps = 1e-6f;
  /// o in (w + o): 0 for Llama, 1 for Gemma. Must be 0 when there is no weight.
  float weight_offset = 0.0f;
  /// How y is rounded to its dtype (see Rounding).
  Rounding rounding = Rounding::kExact;
};

/// RMSNorm forward.
///
///     r[m] = 1 / sqrt(mean_n(x[m, n]^2) + eps)            (fp32; mean over the true width N)
///     y[m, n] = x[m, n] * r[m] * (w[n] + o)                (exact rounding mode)
///
/// @param x       [..., N] f32/f16/bf16, last dim contiguous.
/// @param weight  [N] f32/f16/bf16 (may differ from x's dtype), contiguous; or absent (factor 1).
/// @param y       same shape as x, any of f32/f16/bf16; may be exactly x (in-place), else must
///                not overlap any input.
/// @param rstd    absent, or f32 with one element per row, contiguous: receives r[m].
/// @param params  eps, the weight offset o and the rounding mode.
/// @param stream  CUDA stream to launch on (the caller's; nothing is synchronised).
/// @return        ok, or an error naming the argument; on error nothing was written.
Status rms_norm(const TensorRef& x, const TensorRef& weight, const TensorRef& y,
                const TensorRef& rstd, const RmsNormParams& params, Stream stream = nullptr);

/// RMSNorm forward with a fused residual add.
///
///     s[m, n] = round_to(residual's dtype, x[m, n] + residual[m, n])   (as the unfused add rounds:
///               fp32 sum, then one rounding to residual's dtype)
///     y = rms_norm(s)  (as above, with s as the input and s's dtype as "x's dtype" for kHfLlama)
///
/// @param x             [..., N] f32/f16/bf16.
/// @param residual      same shape; dtype x's or f32.
/// @param weight        as for rms_norm.
/// @param y             same shape as x; may be exactly x.
/// @param residual_out  receives s, residual's dtype; may be exactly residual (in-place update).
/// @param rstd          absent, or f32 with one element per row.
/// @param params        as for rms_norm.
/// @param stream        CUDA stream to launch on (the caller's; nothing is synchronised).
/// @return              ok, or an error naming the argument; on error nothing was written.
Status add_rms_norm(const TensorRef& x, const TensorRef& residual, const TensorRef& weight,
                    const TensorRef& y, const TensorRef& residual_out, const TensorRef& rstd,
                    const RmsNormParams& params, Stream stream = nullptr);

}  // namespace ropenorm
