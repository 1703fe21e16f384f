// The float64 RMSNorm oracle against hand-computable cases, and the tolerance table's coverage.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/host_float.h"
#include "reference/rms_norm_ref.h"
#include "reference/tolerance.h"

namespace ropenorm::ref {
namespace {

TEST(CpuRmsNormRef, ConstantRowGivesWeight) {
  // The seed notebook's smoke test: a constant row c has RMS |c|, so y = w (c > 0).
  const int n = 8;
  std::vector<double> x(n, 3.0), w(n), y(n);
  for (int i = 0; i < n; ++i) w[i] = 0.5 + i / 7.0;
  double r = 0;
  rms_norm_row_ref(x.data(), w.data(), n, 1e-12, 0.0, Rounding::kExact, DType::kFloat32, y.data(),
                   &r);
  EXPECT_NEAR(r, 1.0 / 3.0, 1e-12);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], w[i], 1e-10);
}

TEST(CpuRmsNormRef, HandComputedRow) {
  // x = [1, 2, 3, 4]: mean(x^2) = 7.5; with eps 0.5, r = 1/sqrt(8) exactly.
  std::vector<double> x = {1, 2, 3, 4}, w = {1, -1, 0.5, 2}, y(4);
  double r = 0;
  rms_norm_row_ref(x.data(), w.data(), 4, 0.5, 0.0, Rounding::kExact, DType::kFloat32, y.data(),
                   &r);
  const double r8 = 1.0 / std::sqrt(8.0);
  EXPECT_DOUBLE_EQ(r, r8);
  EXPECT_DOUBLE_EQ(y[0], 1 * r8 * 1);
  EXPECT_DOUBLE_EQ(y[1], 2 * r8 * -1);
  EXPECT_DOUBLE_EQ(y[2], 3 * r8 * 0.5);
  EXPECT_DOUBLE_EQ(y[3], 4 * r8 * 2);
  // Gemma offset: factor (w + 1).
  rms_norm_row_ref(x.data(), w.data(), 4, 0.5, 1.0, Rounding::kExact, DType::kFloat32, y.data(),
                   nullptr);
  EXPECT_DOUBLE_EQ(y[1], 2 * r8 * 0.0);
  EXPECT_DOUBLE_EQ(y[3], 4 * r8 * 3);
  // No weight: factor 1.
  rms_norm_row_ref(x.data(), nullptr, 4, 0.5, 0.0, Rounding::kExact, DType::kFloat32, y.data(),
                   nullptr);
  EXPECT_DOUBLE_EQ(y[2], 3 * r8);
}

TEST(CpuRmsNormRef, ZeroRowIsZeroAndMeanUsesTrueWidth) {
  std::vector<double> x(70, 0.0), y(70);
  double r = 0;
  rms_norm_row_ref(x.data(), nullptr, 70, 1e-6, 0.0, Rounding::kExact, DType::kFloat32, y.data(),
                   &r);
  EXPECT_DOUBLE_EQ(r, 1.0 / std::sqrt(1e-6));
  for (double v : y) EXPECT_EQ(v, 0.0);
  // One non-zero element a in a row of 70: mean = a^2 / 70 (not / 128).
  x[5] = 2.0;
  rms_norm_row_ref(x.data(), nullptr, 70, 1e-12, 0.0, Rounding::kExact, DType::kFloat32, y.data(),
                   &r);
  EXPECT_NEAR(y[5], std::sqrt(70.0), 1e-9);
}

TEST(CpuRmsNormRef, HfLlamaRoundsTheNormalisedValueFirst) {
  // x*r rounded to bf16 before the weight multiply.
  std::vector<double> x = {1.0, 3.0}, w = {3.0, 3.0}, ye(2), yh(2);
  rms_norm_row_ref(x.data(), w.data(), 2, 1e-12, 0.0, Rounding::kExact, DType::kBFloat16, ye.data(),
                   nullptr);
  rms_norm_row_ref(x.data(), w.data(), 2, 1e-12, 0.0, Rounding::kHfLlama, DType::kBFloat16,
                   yh.data(), nullptr);
  const double r = 1.0 / std::sqrt(5.0 + 1e-12);
  EXPECT_DOUBLE_EQ(yh[0], 3.0 * round_to_dtype(1.0 * r, DType::kBFloat16));
  EXPECT_DOUBLE_EQ(yh[1], 3.0 * round_to_dtype(3.0 * r, DType::kBFloat16));
  EXPECT_NE(ye[0], yh[0]);
}

TEST(CpuRmsNormRef, AddRoundsLikeTheUnfusedAdd) {
  // 1 + 2^-9 is not a bf16 value: the sum rounds to 1 (ties to even) in bf16, stays in f32.
  std::vector<double> x = {1.0, 256.0}, r = {std::ldexp(1.0, -9), 1.0}, s(2);
  add_row_ref(x.data(), r.data(), 2, DType::kBFloat16, s.data());
  EXPECT_EQ(s[0], 1.0);
  EXPECT_EQ(s[1], 256.0);  // 257 is not bf16 (8 bits): ties to even -> 256
  add_row_ref(x.data(), r.data(), 2, DType::kFloat32, s.data());
  EXPECT_EQ(s[0], 1.0 + std::ldexp(1.0, -9));
  EXPECT_EQ(s[1], 257.0);
}

TEST(CpuTolerance, EveryRmsNormOutputHasAnEntry) {
  for (Rounding rm : {Rounding::kExact, Rounding::kHfLlama}) {
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      EXPECT_GE(tolerance_ulp("rms_norm", "y", dt, rm), 0.0);
      EXPECT_GE(tolerance_ulp("add_rms_norm", "y", dt, rm), 0.0);
      EXPECT_EQ(tolerance_ulp("add_rms_norm", "residual_out", dt, rm), 0.0);
    }
    EXPECT_GE(tolerance_ulp("rms_norm", "rstd", DType::kFloat32, rm), 0.0);
  }
  EXPECT_EQ(tolerance_ulp("rms_norm", "y", DType::kBFloat16), 1.0);
  EXPECT_LT(tolerance_ulp("no_such_op", "y", DType::kBFloat16), 0.0);
}

TEST(CpuTolerance, UlpErrorMeasure) {
  ErrorStats s;
  // bf16 spacing at 1.0 is 2^-7; got one ulp above the correctly rounded 1.0.
  s.add(1.0 + std::ldexp(1.0, -7), 1.0 + std::ldexp(1.0, -10), DType::kBFloat16, 0);
  EXPECT_DOUBLE_EQ(s.max_ulp, 1.0);
  EXPECT_EQ(s.exact, 0);
  s.add(1.0, 1.0 + std::ldexp(1.0, -10), DType::kBFloat16, 1);
  EXPECT_EQ(s.exact, 1);
  s.add(std::nan(""), 1.0, DType::kBFloat16, 2);  // an unwritten (poisoned) element
  EXPECT_TRUE(std::isinf(s.max_ulp));
  EXPECT_EQ(s.worst_index, 2);
}

}  // namespace
}  // namespace ropenorm::ref
