// Tests of the float64 RoPE oracle: a hand-computed 4-channel case in both styles, norm
// preservation of every pair, pass-through channels, inverse undoing forward, composition of
// angles, the Meta -> Hugging Face channel permutation linking gptj and neox, and agreement of
// the per-position cos/sin with the cache builder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "reference/host_float.h"
#include "reference/rope_ref.h"
#include "ropenorm/rope_cache.h"

namespace ropenorm::ref {
namespace {

std::vector<double> random_vec(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = d(rng);
  return v;
}

void random_angles(std::mt19937_64& rng, int64_t half, std::vector<double>* c,
                   std::vector<double>* s) {
  std::uniform_real_distribution<double> a(-40.0, 40.0);
  c->resize(static_cast<std::size_t>(half));
  s->resize(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double t = a(rng);
    (*c)[i] = std::cos(t);
    (*s)[i] = std::sin(t);
  }
}

TEST(CpuRopeRef, HandComputedFourChannels) {
  // Pair 0 rotated by 90 degrees (cos 0, sin 1), pair 1 by atan2(0.8, 0.6) (cos 0.6, sin 0.8).
  const double x[4] = {1, 2, 3, 4};
  const double c[2] = {0.0, 0.6};
  const double s[2] = {1.0, 0.8};
  double out[4];
  // neox pairs (0, 2), (1, 3): (a c - b s, a s + b c).
  rope_rotate_ref(x, out, 4, 4, RopeStyle::kNeox, c, s, false);
  EXPECT_DOUBLE_EQ(out[0], -3.0);  // 1*0 - 3*1
  EXPECT_DOUBLE_EQ(out[2], 1.0);   // 1*1 + 3*0
  EXPECT_DOUBLE_EQ(out[1], -2.0);  // 2*0.6 - 4*0.8
  EXPECT_DOUBLE_EQ(out[3], 4.0);   // 2*0.8 + 4*0.6
  // gptj pairs (0, 1), (2, 3).
  rope_rotate_ref(x, out, 4, 4, RopeStyle::kGptj, c, s, false);
  EXPECT_DOUBLE_EQ(out[0], -2.0);  // 1*0 - 2*1
  EXPECT_DOUBLE_EQ(out[1], 1.0);   // 1*1 + 2*0
  EXPECT_DOUBLE_EQ(out[2], -1.4);  // 3*0.6 - 4*0.8
  EXPECT_DOUBLE_EQ(out[3], 4.8);   // 3*0.8 + 4*0.6
  // inverse (-sin), neox: (a c + b s, -a s + b c).
  rope_rotate_ref(x, out, 4, 4, RopeStyle::kNeox, c, s, true);
  EXPECT_DOUBLE_EQ(out[0], 3.0);   // 1*0 + 3*1
  EXPECT_DOUBLE_EQ(out[2], -1.0);  // -1*1 + 3*0
  EXPECT_DOUBLE_EQ(out[1], 4.4);   // 2*0.6 + 4*0.8
  EXPECT_DOUBLE_EQ(out[3], 0.8);   // -2*0.8 + 4*0.6
  // Partial rotary: R = 2 of D = 4 rotates (0, 1) in neox style and passes 2, 3 through.
  rope_rotate_ref(x, out, 4, 2, RopeStyle::kNeox, c, s, false);
  EXPECT_DOUBLE_EQ(out[0], -2.0);
  EXPECT_DOUBLE_EQ(out[1], 1.0);
  EXPECT_EQ(out[2], 3.0);
  EXPECT_EQ(out[3], 4.0);
}

struct Shape {
  int64_t d;
  int64_t r;
};
const Shape kShapes[] = {{4, 4}, {64, 64}, {80, 80}, {96, 48}, {128, 128}, {128, 32}, {256, 64}};

TEST(CpuRopeRef, PairNormsPreservedAndPassThroughUntouched) {
  std::mt19937_64 rng(7);
  for (const Shape& sh : kShapes) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      const auto x = random_vec(rng, sh.d);
      std::vector<double> c, s, out(static_cast<std::size_t>(sh.d), NAN);
      random_angles(rng, sh.r / 2, &c, &s);
      rope_rotate_ref(x.data(), out.data(), sh.d, sh.r, style, c.data(), s.data(), false);
      for (int64_t i = 0; i < sh.r / 2; ++i) {
        const int64_t a = style == RopeStyle::kNeox ? i : 2 * i;
        const int64_t b = style == RopeStyle::kNeox ? i + sh.r / 2 : 2 * i + 1;
        const double before = std::hypot(x[a], x[b]);
        const double after = std::hypot(out[a], out[b]);
        EXPECT_NEAR(after, before, 4e-16 * (1 + before)) << sh.d << " " << sh.r << " " << i;
      }
      for (int64_t j = sh.r; j < sh.d; ++j) EXPECT_EQ(out[j], x[j]) << j;  // bitwise copy
    }
  }
}

TEST(CpuRopeRef, InverseUndoesForwardAndInPlaceWorks) {
  std::mt19937_64 rng(11);
  for (const Shape& sh : kShapes) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      const auto x = random_vec(rng, sh.d);
      std::vector<double> c, s;
      random_angles(rng, sh.r / 2, &c, &s);
      std::vector<double> y(x.size()), back(x.size());
      rope_rotate_ref(x.data(), y.data(), sh.d, sh.r, style, c.data(), s.data(), false);
      rope_rotate_ref(y.data(), back.data(), sh.d, sh.r, style, c.data(), s.data(), true);
      for (std::size_t j = 0; j < x.size(); ++j) EXPECT_NEAR(back[j], x[j], 1e-14) << j;
      // In place gives the same as out of place.
      std::vector<double> z = x;
      rope_rotate_ref(z.data(), z.data(), sh.d, sh.r, style, c.data(), s.data(), false);
      for (std::size_t j = 0; j < x.size(); ++j) EXPECT_EQ(z[j], y[j]) << j;
    }
  }
}

TEST(CpuRopeRef, RotationsComposeByAddingPositions) {
  // rotate(p1) then rotate(p2) == rotate(p1 + p2) for the same frequencies.
  std::mt19937_64 rng(3);
  const int64_t D = 64, R = 64, h = 32;
  std::vector<double> inv;
  double scaling = 0;
  RopeConfig cfg;
  cfg.theta = 10000.0;
  cfg.rotary_dim = R;
  ASSERT_TRUE(rope_inv_freq(cfg, &inv, &scaling).ok());
  std::vector<double> c1(h), s1(h), c2(h), s2(h), c3(h), s3(h);
  rope_cos_sin_ref(37, inv.data(), h, 1.0, c1.data(), s1.data());
  rope_cos_sin_ref(1000, inv.data(), h, 1.0, c2.data(), s2.data());
  rope_cos_sin_ref(1037, inv.data(), h, 1.0, c3.data(), s3.data());
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
    const auto x = random_vec(rng, D);
    std::vector<double> a(D), b(D), direct(D);
    rope_rotate_ref(x.data(), a.data(), D, R, style, c1.data(), s1.data(), false);
    rope_rotate_ref(a.data(), b.data(), D, R, style, c2.data(), s2.data(), false);
    rope_rotate_ref(x.data(), direct.data(), D, R, style, c3.data(), s3.data(), false);
    for (int64_t j = 0; j < D; ++j) EXPECT_NEAR(b[j], direct[j], 1e-12) << j;
  }
}

// Meta -> Hugging Face: HF's checkpoint conversion permutes each q/k head so that its layout is
// Meta's interleaved layout with the even channels first, then the odd ones:
//   hf[i] = meta[2i], hf[i + R/2] = meta[2i + 1]   (0 <= i < R/2; channels >= R unchanged).
// Then neox(perm(x)) == perm(gptj(x)).
std::vector<double> meta_to_hf(const std::vector<double>& meta, int64_t r) {
  std::vector<double> hf = meta;
  for (int64_t i = 0; i < r / 2; ++i) {
    hf[i] = meta[2 * i];
    hf[i + r / 2] = meta[2 * i + 1];
  }
  return hf;
}

TEST(CpuRopeRef, GptjEqualsNeoxAfterMetaToHfPermutation) {
  std::mt19937_64 rng(5);
  for (const Shape& sh : kShapes) {
    for (bool inverse : {false, true}) {
      const auto x = random_vec(rng, sh.d);
      std::vector<double> c, s;
      random_angles(rng, sh.r / 2, &c, &s);
      std::vector<double> gptj(x.size()), neox(x.size());
      rope_rotate_ref(x.data(), gptj.data(), sh.d, sh.r, RopeStyle::kGptj, c.data(), s.data(),
                      inverse);
      const auto px = meta_to_hf(x, sh.r);
      rope_rotate_ref(px.data(), neox.data(), sh.d, sh.r, RopeStyle::kNeox, c.data(), s.data(),
                      inverse);
      const auto pg = meta_to_hf(gptj, sh.r);
      for (std::size_t j = 0; j < x.size(); ++j) EXPECT_EQ(neox[j], pg[j]) << sh.d << " " << j;
    }
  }
}

TEST(CpuRopeRef, StylesDifferWithoutThePermutation) {
  // A guard against a style switch that does nothing.
  const double x[4] = {1, 2, 3, 4};
  const double c[2] = {0.0, 0.6};
  const double s[2] = {1.0, 0.8};
  double a[4], b[4];
  rope_rotate_ref(x, a, 4, 4, RopeStyle::kNeox, c, s, false);
  rope_rotate_ref(x, b, 4, 4, RopeStyle::kGptj, c, s, false);
  EXPECT_NE(a[0], b[0]);
}

TEST(CpuRopeRef, CosSinOfPositions) {
  const double inv[3] = {1.0, 0.5, 1e-4};
  double c[3], s[3];
  rope_cos_sin_ref(0, inv, 3, 1.25, c, s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i], 1.25);
    EXPECT_EQ(s[i], 0.0);
  }
  rope_cos_sin_ref(3, inv, 3, 1.0, c, s);
  EXPECT_DOUBLE_EQ(c[0], std::cos(3.0));
  EXPECT_DOUBLE_EQ(s[1], std::sin(1.5));
  EXPECT_DOUBLE_EQ(c[2], std::cos(3e-4));
  // A product that does not fit 53 bits: p = 2^38 + 1 times a float32 frequency (24-bit
  // significand) needs 63 bits. The angle is still taken exactly: compare with long double, whose
  // 64-bit significand holds this product.
  const int64_t p = (int64_t{1} << 38) + 1;
  const double f = static_cast<double>(0.8659643233600653f);
  ASSERT_NE(std::fma(static_cast<double>(p), f, -(static_cast<double>(p) * f)), 0.0);
  rope_cos_sin_ref(p, &f, 1, 1.0, c, s);
  const long double angle = static_cast<long double>(p) * static_cast<long double>(f);
  EXPECT_NEAR(c[0], static_cast<double>(cosl(angle)), 1e-15);
  EXPECT_NEAR(s[0], static_cast<double>(sinl(angle)), 1e-15);
}

TEST(CpuRopeRef, AgreesWithTheCacheBuilder) {
  // The cache row of position p is the oracle's cos/sin of p with the float32 frequencies,
  // rounded once to the cache dtype.
  RopeConfig cfg;
  cfg.type = RopeType::kYarn;
  cfg.theta = 1000000.0;
  cfg.rotary_dim = 64;
  cfg.factor = 4.0;
  cfg.original_max_position_embeddings = 32768;
  std::vector<float> inv32;
  double scaling = 0;
  ASSERT_TRUE(rope_inv_freq_f32(cfg, &inv32, &scaling).ok());
  const std::vector<double> inv(inv32.begin(), inv32.end());
  const int64_t R = 64, h = 32, first = 123456, n = 5;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    std::vector<unsigned char> cache(static_cast<std::size_t>(n * R) * dtype_size(dt));
    ASSERT_TRUE(build_rope_cache_range(cfg, first, n, dt, cache.data()).ok());
    std::vector<double> c(h), s(h);
    for (int64_t row = 0; row < n; ++row) {
      rope_cos_sin_ref(first + row, inv.data(), h, scaling, c.data(), s.data());
      for (int64_t i = 0; i < h; ++i) {
        for (int half = 0; half < 2; ++half) {
          const double want = round_to_dtype(half == 0 ? c[i] : s[i], dt);
          const std::size_t idx = static_cast<std::size_t>(row * R + half * h + i);
          double got;
          if (dt == DType::kFloat32) {
            float g;
            std::memcpy(&g, cache.data() + idx * 4, 4);
            got = g;
          } else {
            uint16_t g;
            std::memcpy(&g, cache.data() + idx * 2, 2);
            got = dt == DType::kFloat16 ? f16_bits_to_double(g) : bf16_bits_to_double(g);
          }
          EXPECT_EQ(got, want) << dtype_name(dt) << " " << row << " " << i << " " << half;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ropenorm::ref
