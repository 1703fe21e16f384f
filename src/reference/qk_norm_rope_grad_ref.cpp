// float64 oracle of the QK-norm + RoPE backward (see qk_norm_rope_grad_ref.h): the inverse
// rotation of the incoming gradient, then the RMSNorm backward, as direct loops.
#include "reference/qk_norm_rope_grad_ref.h"

#include <cmath>
#include <vector>

#include "reference/rope_ref.h"

namespace ropenorm::ref {

void qk_norm_rope_grad_row_ref(const double* x, const double* dout, const double* w, int64_t D,
                               int64_t R, RopeStyle style, const double* cos_half,
                               const double* sin_half, double eps, double offset,
                               const double* rstd, double* dx, double* dw, double* gn,
                               double* r_out) {
  std::vector<double> g_n(static_cast<size_t>(D));
  rope_rotate_ref(dout, g_n.data(), D, R, style, cos_half, sin_half, /*inverse=*/true);
  double r = 0.0;
  if (rstd != nullptr) {
    r = *rstd;
  } else {
    double sum_sq = 0.0;
    for (int64_t d = 0; d < D; ++d) sum_sq += x[d] * x[d];
    r = 1.0 / std::sqrt(sum_sq / static_cast<double>(D) + eps);
  }
  double dot = 0.0;
  for (int64_t d = 0; d < D; ++d) dot += g_n[d] * (w[d] + offset) * (x[d] * r);
  const double mean = dot / static_cast<double>(D);
  for (int64_t d = 0; d < D; ++d) {
    const double xh = x[d] * r;
    dx[d] = r * (g_n[d] * (w[d] + offset) - xh * mean);
    if (dw != nullptr) dw[d] += g_n[d] * xh;
    if (gn != nullptr) gn[d] = g_n[d];
  }
  if (r_out != nullptr) *r_out = r;
}

}  // namespace ropenorm::ref
