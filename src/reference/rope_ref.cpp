// The float64 RoPE oracle (see rope_ref.h): pairwise rotation and per-position cos/sin.
#include "reference/rope_ref.h"

#include <cmath>

namespace ropenorm::ref {

void rope_rotate_ref(const double* x, double* out, int64_t D, int64_t R, RopeStyle style,
                     const double* cos_half, const double* sin_half, bool inverse) {
  const int64_t half = R / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t ia = style == RopeStyle::kNeox ? i : 2 * i;
    const int64_t ib = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
    const double a = x[ia];
    const double b = x[ib];
    const double c = cos_half[i];
    const double s = inverse ? -sin_half[i] : sin_half[i];
    out[ia] = a * c - b * s;
    out[ib] = a * s + b * c;
  }
  for (int64_t j = R; j < D; ++j) out[j] = x[j];
}

void rope_cos_sin_ref(int64_t position, const double* inv_freq, int64_t half,
                      double attention_scaling, double* cos_half, double* sin_half) {
  const double p = static_cast<double>(position);
  for (int64_t i = 0; i < half; ++i) {
    const double angle = p * inv_freq[i];
    const double err = std::fma(p, inv_freq[i], -angle);
    double c = std::cos(angle);
    double s = std::sin(angle);
    if (err != 0.0) {  // cos / sin of angle + err by the angle-addition formulas
      const double ce = std::cos(err);
      const double se = std::sin(err);
      const double c0 = c;
      c = c0 * ce - s * se;
      s = s * ce + c0 * se;
    }
    cos_half[i] = c * attention_scaling;
    sin_half[i] = s * attention_scaling;
  }
}

}  // namespace ropenorm::ref
