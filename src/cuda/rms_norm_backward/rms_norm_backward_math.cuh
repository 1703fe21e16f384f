// RMSNorm backward formulas, shared by every RMSNorm backward kernel (host and device):
//   xh = x * r,  g = dy * (w + o)                                        (fp32)
//   c  = mean_n(g * xh) = r * (sum_n(g * x) / N)
//   dx = r * (g - xh * c)                                                (one rounding)
//   dw[n] += dy * xh                                                     (fp32 partials)
// r is the forward's saved rstd or, without it, rms_rstd from the forward's formulas. The vector
// form of dx (device only) applies them to a thread's V elements, in element order.
#pragma once

#include <cstdint>

#include "cuda/rms_norm/rms_norm_math.cuh"

namespace ropenorm::cuda {

/// Gradient reaching the normalised value: g = dy * (w + o).
ROPENORM_MATH_HD float rms_bwd_g(float dy, float w_factor) { return dy * w_factor; }

/// The row's mean term c = mean(g * xh) from the fp32 sum of g * x over the true width n.
ROPENORM_MATH_HD float rms_bwd_mean_term(float sum_gx, float rstd, int64_t n) {
  return rstd * (sum_gx / static_cast<float>(n));
}

/// dx before its rounding: r * (g - xh * c).
ROPENORM_MATH_HD float rms_bwd_dx(float g, float xh, float rstd, float c) {
  return rstd * (g - xh * c);
}

/// One row's contribution to dw at a column: dy * xh.
ROPENORM_MATH_HD float rms_bwd_dw_term(float dy, float xh) { return dy * xh; }

#if defined(__CUDACC__)
/// A vector's dx before its rounding from the row's r and mean term c, element by element:
/// out[i] = r * (g - xh * c) with xh = x * r and g = dy * f, then dw(i, xh) (the caller adds
/// rms_bwd_dw_term(dy[i], xh) where it keeps its partials).
template <int V, typename Dw>
__device__ __forceinline__ void rms_bwd_vector_dx(const float (&dy)[V], const float (&x)[V],
                                                  const float (&f)[V], float rstd, float c,
                                                  float (&out)[V], Dw&& dw) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const float xh = x[i] * rstd;
    out[i] = rms_bwd_dx(rms_bwd_g(dy[i], f[i]), xh, rstd, c);
    dw(i, xh);
  }
}
#endif

}  // namespace ropenorm::cuda
