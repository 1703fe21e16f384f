// RMSNorm formulas, shared by every RMSNorm kernel (host and device):
//   r = 1 / sqrt(sum(x^2) / N + eps)                         (fp32)
//   exact:    y = x * r * (w + o)                            (one rounding to y's dtype)
//   hf_llama: y = (w + o) * round_to(norm input dtype, x * r)  (then rounded to y's dtype)
//   fused add: s = round_to(residual dtype, x + residual)      (fp32 sum, one rounding)
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ROPENORM_MATH_HD __host__ __device__ __forceinline__
#else
#define ROPENORM_MATH_HD inline
#endif

namespace ropenorm::cuda {

/// Reciprocal RMS of a row from its fp32 sum of squares and its true width n.
ROPENORM_MATH_HD float rms_rstd(float sum_sq, int64_t n, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps);
}

/// Exact-mode output before the final rounding: x * r * (w + o).
ROPENORM_MATH_HD float rms_apply_exact(float x, float rstd, float w_factor) {
  return (x * rstd) * w_factor;
}

/// hf_llama-mode output before the final rounding, given the normalised value already rounded
/// to the norm input's dtype: (w + o) * t.
ROPENORM_MATH_HD float rms_apply_hf(float t_rounded, float w_factor) {
  return w_factor * t_rounded;
}

}  // namespace ropenorm::cuda
