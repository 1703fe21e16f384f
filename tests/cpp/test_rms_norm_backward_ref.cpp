// The float64 RMSNorm backward oracle against a hand-computed row and against central finite
// differences of the float64 forward oracle (rms_norm_row_ref), for dx, dw and the fused add's
// gradient of s.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "reference/rms_norm_grad_ref.h"
#include "reference/rms_norm_ref.h"

namespace ropenorm::ref {
namespace {

using Vec = std::vector<double>;

// L = sum_n dy[n] * y[n], y = rms_norm(x) in float64 (exact mode).
double loss(const Vec& dy, const Vec& x, const Vec* w, double eps, double offset) {
  const int64_t n = static_cast<int64_t>(x.size());
  Vec y(x.size());
  rms_norm_row_ref(x.data(), w != nullptr ? w->data() : nullptr, n, eps, offset, Rounding::kExact,
                   DType::kFloat32, y.data(), nullptr);
  double l = 0.0;
  for (int64_t i = 0; i < n; ++i) l += dy[i] * y[i];
  return l;
}

// Central difference of f at v[i].
template <typename F>
double central(Vec& v, size_t i, F&& f) {
  const double h = 1e-6 * std::fmax(1.0, std::fabs(v[i]));
  const double keep = v[i];
  v[i] = keep + h;
  const double up = f();
  v[i] = keep - h;
  const double down = f();
  v[i] = keep;
  return (up - down) / (2.0 * h);
}

Vec normal(std::mt19937_64& rng, size_t n, double scale = 1.0) {
  std::normal_distribution<double> nd(0.0, scale);
  Vec v(n);
  for (double& e : v) e = nd(rng);
  return v;
}

void expect_close(double got, double want, const char* what, int64_t i) {
  EXPECT_NEAR(got, want, 2e-7 * (1.0 + std::fabs(want))) << what << "[" << i << "]";
}

// x = [3, 4], no weight, eps = 0: r = 1/sqrt(12.5); with dy = [1, 0]: g = [1, 0],
// c = 3r/2, dx = r * ([1, 0] - [3r, 4r] * 3r/2) = r * [0.64, -0.48], dw = [3r, 0].
TEST(CpuRmsNormBackwardRef, HandComputedRow) {
  const double x[2] = {3.0, 4.0}, dy[2] = {1.0, 0.0};
  const double w[2] = {1.0, 1.0};
  double dx[2], dw[2] = {0.0, 0.0}, r = 0.0;
  rms_norm_backward_row_ref(dy, x, w, nullptr, 2, 0.0, 0.0, nullptr, dx, dw, nullptr, &r);
  const double want_r = 1.0 / std::sqrt(12.5);
  EXPECT_NEAR(r, want_r, 1e-15);
  EXPECT_NEAR(dx[0], 0.64 * want_r, 1e-15);
  EXPECT_NEAR(dx[1], -0.48 * want_r, 1e-15);
  EXPECT_NEAR(dw[0], 3.0 * want_r, 1e-15);
  EXPECT_EQ(dw[1], 0.0);
  // The output is scale invariant at eps = 0, so dx is orthogonal to x.
  EXPECT_NEAR(dx[0] * x[0] + dx[1] * x[1], 0.0, 1e-15);
}

// With eps = 0 the gradient of any weighted loss is orthogonal to x (scale invariance).
TEST(CpuRmsNormBackwardRef, OrthogonalToInputAtZeroEps) {
  std::mt19937_64 rng(5);
  for (int64_t n : {3, 17, 256}) {
    const Vec x = normal(rng, n), dy = normal(rng, n), w = normal(rng, n);
    Vec dx(n);
    rms_norm_backward_row_ref(dy.data(), x.data(), w.data(), nullptr, n, 0.0, 1.0, nullptr,
                              dx.data(), nullptr, nullptr, nullptr);
    double dot = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      dot += dx[i] * x[i];
      mag += std::fabs(dx[i] * x[i]);
    }
    EXPECT_NEAR(dot, 0.0, 1e-13 * mag) << "n=" << n;
  }
}

TEST(CpuRmsNormBackwardRef, DxMatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  for (int64_t n : {1, 2, 3, 7, 16, 33}) {
    for (bool has_w : {false, true}) {
      for (double offset : {0.0, 1.0}) {
        if (!has_w && offset != 0.0) continue;
        for (double eps : {1e-6, 1e-2}) {
          Vec x = normal(rng, n), dy = normal(rng, n), w = normal(rng, n);
          const Vec* wp = has_w ? &w : nullptr;
          Vec dx(n);
          rms_norm_backward_row_ref(dy.data(), x.data(), has_w ? w.data() : nullptr, nullptr, n,
                                    eps, offset, nullptr, dx.data(), nullptr, nullptr, nullptr);
          for (int64_t i = 0; i < n; ++i) {
            const double fd = central(x, i, [&] { return loss(dy, x, wp, eps, offset); });
            expect_close(dx[i], fd, "dx", i);
          }
        }
      }
    }
  }
}

TEST(CpuRmsNormBackwardRef, DwMatchesFiniteDifferencesOverRows) {
  std::mt19937_64 rng(12);
  const int64_t m = 5;
  for (int64_t n : {1, 4, 19}) {
    for (double offset : {0.0, 1.0}) {
      std::vector<Vec> xs, dys;
      for (int64_t r = 0; r < m; ++r) {
        xs.push_back(normal(rng, n, 2.0));
        dys.push_back(normal(rng, n));
      }
      Vec w = normal(rng, n), dw(n, 0.0), dx(n);
      for (int64_t r = 0; r < m; ++r) {
        rms_norm_backward_row_ref(dys[r].data(), xs[r].data(), w.data(), nullptr, n, 1e-6, offset,
                                  nullptr, dx.data(), dw.data(), nullptr, nullptr);
      }
      auto total = [&] {
        double l = 0.0;
        for (int64_t r = 0; r < m; ++r) l += loss(dys[r], xs[r], &w, 1e-6, offset);
        return l;
      };
      for (int64_t i = 0; i < n; ++i) expect_close(dw[i], central(w, i, total), "dw", i);
    }
  }
}

// Fused add: s = x + residual, y = rms_norm(s), loss L = sum(dy * y) + sum(ds * s). The
// gradient of both x and residual is gs = dx(s) + ds.
TEST(CpuRmsNormBackwardRef, FusedAddGradientOfBothInputs) {
  std::mt19937_64 rng(13);
  for (int64_t n : {1, 5, 24}) {
    Vec x = normal(rng, n), res = normal(rng, n), dy = normal(rng, n), ds = normal(rng, n);
    Vec w = normal(rng, n);
    Vec s(n), gs(n);
    for (int64_t i = 0; i < n; ++i) s[i] = x[i] + res[i];
    rms_norm_backward_row_ref(dy.data(), s.data(), w.data(), ds.data(), n, 1e-6, 0.0, nullptr,
                              gs.data(), nullptr, nullptr, nullptr);
    auto fused_loss = [&] {
      Vec sum(n);
      double l = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        sum[i] = x[i] + res[i];
        l += ds[i] * sum[i];
      }
      return l + loss(dy, sum, &w, 1e-6, 0.0);
    };
    for (int64_t i = 0; i < n; ++i) {
      expect_close(gs[i], central(x, i, fused_loss), "dx", i);
      expect_close(gs[i], central(res, i, fused_loss), "dresidual", i);
    }
  }
}

// A given rstd is used as is: the exact r reproduces the recomputed gradient; another r changes it.
TEST(CpuRmsNormBackwardRef, SavedRstdIsUsed) {
  std::mt19937_64 rng(14);
  const int64_t n = 9;
  const Vec x = normal(rng, n), dy = normal(rng, n), w = normal(rng, n);
  Vec a(n), b(n), c(n), scale(n);
  double r = 0.0;
  rms_norm_backward_row_ref(dy.data(), x.data(), w.data(), nullptr, n, 1e-6, 0.0, nullptr, a.data(),
                            nullptr, scale.data(), &r);
  rms_norm_backward_row_ref(dy.data(), x.data(), w.data(), nullptr, n, 1e-6, 0.0, &r, b.data(),
                            nullptr, nullptr, nullptr);
  const double other = r * 1.5;
  rms_norm_backward_row_ref(dy.data(), x.data(), w.data(), nullptr, n, 1e-6, 0.0, &other, c.data(),
                            nullptr, nullptr, nullptr);
  bool differs = false;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(a[i], b[i]) << i;
    differs = differs || c[i] != a[i];
    EXPECT_GE(scale[i], std::fabs(a[i]) * (1.0 - 1e-12)) << "the error scale bounds |dx|";
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace ropenorm::ref
