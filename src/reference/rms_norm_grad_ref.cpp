// float64 RMSNorm backward oracle (see rms_norm_grad_ref.h): direct loops over the row.
#include "reference/rms_norm_grad_ref.h"

#include <cmath>

namespace ropenorm::ref {

void rms_norm_backward_row_ref(const double* dy, const double* x, const double* w, const double* ds,
                               int64_t n, double eps, double offset, const double* rstd, double* dx,
                               double* dw_acc, double* scale, double* r_out) {
  double r = 0.0;
  if (rstd != nullptr) {
    r = *rstd;
  } else {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
    r = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  }
  if (r_out != nullptr) *r_out = r;
  auto g_of = [&](int64_t i) { return dy[i] * ((w != nullptr ? w[i] : 1.0) + offset); };
  double sum_gxh = 0.0, sum_abs_gx = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = g_of(i);
    sum_gxh += g * (x[i] * r);
    sum_abs_gx += std::fabs(g * x[i]);
  }
  const double c = sum_gxh / static_cast<double>(n);
  const double mean_abs_gx = sum_abs_gx / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = g_of(i);
    const double xh = x[i] * r;
    dx[i] = r * (g - xh * c) + (ds != nullptr ? ds[i] : 0.0);
    if (dw_acc != nullptr) dw_acc[i] += dy[i] * xh;
    if (scale != nullptr) {
      scale[i] = r * (std::fabs(g) + std::fabs(xh) * (std::fabs(c) + r * mean_abs_gx)) +
                 (ds != nullptr ? std::fabs(ds[i]) : 0.0);
    }
  }
}

}  // namespace ropenorm::ref
