// float64 RMSNorm oracle (see rms_norm_ref.h): a direct loop over the row, twice.
#include "reference/rms_norm_ref.h"

#include <cmath>

#include "reference/host_float.h"

namespace ropenorm::ref {

void rms_norm_row_ref(const double* x, const double* w, int64_t n, double eps, double offset,
                      Rounding rounding, DType norm_dtype, double* y, double* rstd) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  if (rstd != nullptr) *rstd = r;
  for (int64_t i = 0; i < n; ++i) {
    const double factor = (w != nullptr ? w[i] : 1.0) + offset;
    if (rounding == Rounding::kHfLlama) {
      y[i] = factor * round_to_dtype(x[i] * r, norm_dtype);
    } else {
      y[i] = x[i] * r * factor;
    }
  }
}

void add_row_ref(const double* x, const double* residual, int64_t n, DType res_dtype, double* s) {
  for (int64_t i = 0; i < n; ++i) {
    const double sum32 = round_to_dtype(x[i] + residual[i], DType::kFloat32);
    s[i] = round_to_dtype(sum32, res_dtype);
  }
}

}  // namespace ropenorm::ref
