// The float64 QK-norm + RoPE backward oracle against central finite differences of the forward
// oracle (rms_norm_row_ref, then rope_rotate_ref) on small head vectors: D in {2, 6, 8}, full and
// partial rotary, both styles, Gemma's offset, saved vs recomputed r, dw summed over several head
// vectors at different positions; plus a hand case (scale invariance of the normalisation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "reference/qk_norm_rope_grad_ref.h"
#include "reference/rms_norm_ref.h"
#include "reference/rope_ref.h"

namespace ropenorm {
namespace {

struct Head {
  std::vector<double> x, dout, cs, sn;  // cs / sn: R / 2 values at the head's position
};

// L = sum_d dout[d] * forward(x, w)[d] for one head vector.
double loss(const Head& hv, const std::vector<double>& x, const std::vector<double>& w, int64_t d,
            int64_t r, RopeStyle style, double eps, double o) {
  std::vector<double> n(d), y(d);
  ref::rms_norm_row_ref(x.data(), w.data(), d, eps, o, Rounding::kExact, DType::kFloat32, n.data(),
                        nullptr);
  ref::rope_rotate_ref(n.data(), y.data(), d, r, style, hv.cs.data(), hv.sn.data(), false);
  double l = 0.0;
  for (int64_t j = 0; j < d; ++j) l += hv.dout[j] * y[j];
  return l;
}

void check_against_finite_differences(int64_t d, int64_t r, RopeStyle style, double o, double eps,
                                      bool saved_rstd, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "D=" << d << " R=" << r
                                    << " style=" << (style == RopeStyle::kNeox ? "neox" : "gptj")
                                    << " o=" << o << " eps=" << eps << " saved=" << saved_rstd);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> angle(-3.0, 3.0);
  std::vector<double> w(d);
  for (double& v : w) v = nd(rng);
  constexpr int kHeads = 3;
  std::vector<Head> heads(kHeads);
  for (Head& hv : heads) {
    hv.x.resize(d);
    hv.dout.resize(d);
    for (int64_t j = 0; j < d; ++j) {
      hv.x[j] = nd(rng);
      hv.dout[j] = nd(rng);
    }
    for (int64_t i = 0; i < r / 2; ++i) {
      const double a = angle(rng);
      hv.cs.push_back(std::cos(a));
      hv.sn.push_back(std::sin(a));
    }
  }

  std::vector<double> dw(d, 0.0);
  for (const Head& hv : heads) {
    std::vector<double> dx(d);
    double r_exact = 0.0;
    std::vector<double> unused(d);
    ref::rms_norm_row_ref(hv.x.data(), w.data(), d, eps, o, Rounding::kExact, DType::kFloat32,
                          unused.data(), &r_exact);
    double r_used = 0.0;
    ref::qk_norm_rope_grad_row_ref(hv.x.data(), hv.dout.data(), w.data(), d, r, style, hv.cs.data(),
                                   hv.sn.data(), eps, o, saved_rstd ? &r_exact : nullptr, dx.data(),
                                   dw.data(), nullptr, &r_used);
    EXPECT_NEAR(r_used, r_exact, 1e-15 * r_exact);
    for (int64_t j = 0; j < d; ++j) {
      std::vector<double> xp = hv.x, xm = hv.x;
      const double step = 1e-6 * std::max(1.0, std::fabs(hv.x[j]));
      xp[j] += step;
      xm[j] -= step;
      const double fd =
          (loss(hv, xp, w, d, r, style, eps, o) - loss(hv, xm, w, d, r, style, eps, o)) /
          (xp[j] - xm[j]);
      EXPECT_NEAR(dx[j], fd, 1e-6 * (1.0 + std::fabs(fd))) << "dx[" << j << "]";
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    std::vector<double> wp = w, wm = w;
    const double step = 1e-6 * std::max(1.0, std::fabs(w[j]));
    wp[j] += step;
    wm[j] -= step;
    double fd = 0.0;
    for (const Head& hv : heads) {
      fd += (loss(hv, hv.x, wp, d, r, style, eps, o) - loss(hv, hv.x, wm, d, r, style, eps, o)) /
            (wp[j] - wm[j]);
    }
    EXPECT_NEAR(dw[j], fd, 1e-6 * (1.0 + std::fabs(fd))) << "dw[" << j << "]";
  }
}

TEST(CpuQkNormRopeGradRef, MatchesFiniteDifferencesOfTheForwardOracle) {
  uint64_t seed = 1;
  for (int64_t d : {2, 6, 8}) {
    for (int64_t r : {d, d / 2, int64_t{2}}) {
      if (r < 2 || r % 2 != 0 || r > d) continue;
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        for (double o : {0.0, 1.0}) {
          for (bool saved : {false, true}) {
            check_against_finite_differences(d, r, style, o, 1e-6, saved, seed++);
          }
        }
      }
    }
  }
  check_against_finite_differences(8, 8, RopeStyle::kNeox, 0.0, 1e-2, false, 77);
  check_against_finite_differences(6, 4, RopeStyle::kGptj, 1.0, 1e-2, true, 78);
}

// With w = 1, o = 0 and dout = out, g_n = n = x r (the inverse rotation undoes the forward one),
// so dx = r (x r - x r mean(x^2 r^2)) = x r^2 (1 - r^2 mean(x^2)) = x r^4 eps exactly: only eps
// breaks the scale invariance of the normalisation.
TEST(CpuQkNormRopeGradRef, ScaleInvarianceHandCase) {
  const int64_t d = 8;
  const std::vector<double> x = {1, -2, 3, 0.5, -1, 2, 0, 4};
  const std::vector<double> w(d, 1.0);
  const std::vector<double> cs = {0.6, 0.8, -1.0, 0.0}, sn = {0.8, -0.6, 0.0, 1.0};
  const double eps = 1e-3;
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
    std::vector<double> n(d), y(d), dx(d), dw(d, 0.0);
    double r = 0.0;
    ref::rms_norm_row_ref(x.data(), w.data(), d, eps, 0.0, Rounding::kExact, DType::kFloat32,
                          n.data(), &r);
    ref::rope_rotate_ref(n.data(), y.data(), d, d, style, cs.data(), sn.data(), false);
    ref::qk_norm_rope_grad_row_ref(x.data(), y.data(), w.data(), d, d, style, cs.data(), sn.data(),
                                   eps, 0.0, nullptr, dx.data(), dw.data(), nullptr, nullptr);
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_NEAR(dx[j], x[j] * r * r * r * r * eps, 1e-15) << j;
      EXPECT_NEAR(dw[j], n[j] * n[j], 1e-14) << j;  // g_n = n, xh = n with w = 1
    }
  }
}

// Pass-through channels: their gradient is dout itself before the norm (no rotation).
TEST(CpuQkNormRopeGradRef, PassThroughChannelsAreNotRotated) {
  const int64_t d = 6, r = 2;
  const std::vector<double> x = {0.5, -1.5, 2.0, 1.0, -0.25, 3.0};
  const std::vector<double> dout = {0.0, 0.0, 1.0, -2.0, 0.5, 1.5};
  const std::vector<double> w = {1.0, 2.0, -1.0, 0.5, 3.0, -2.0};
  const std::vector<double> cs = {0.0}, sn = {1.0};  // a quarter turn
  std::vector<double> dx(d), gn(d);
  ref::qk_norm_rope_grad_row_ref(x.data(), dout.data(), w.data(), d, r, RopeStyle::kNeox, cs.data(),
                                 sn.data(), 1e-6, 0.0, nullptr, dx.data(), nullptr, gn.data(),
                                 nullptr);
  for (int64_t j = r; j < d; ++j) EXPECT_EQ(gn[j], dout[j]) << j;
  EXPECT_EQ(gn[0], 0.0);
  EXPECT_EQ(gn[1], 0.0);
}

}  // namespace
}  // namespace ropenorm
