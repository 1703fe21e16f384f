// Tests of the host RoPE parameter builders: every rope_type against values computed here
// independently (long double, straight from the formulas) and against literals derived by hand,
// yarn's attention scaling, dynamic NTK below and above the trained length, llama3's band edges,
// the cache's layout, dtypes and large-position fidelity, and every validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "reference/host_float.h"
#include "ropenorm/rope_cache.h"

namespace ropenorm {
namespace {

using LD = long double;
const LD kPiL = 3.141592653589793238462643383279502884L;

// ---- independent formulas (long double, written from the definitions) ----

LD ld_inv(LD theta, int64_t r, int64_t i) {
  return expl(-logl(theta) * static_cast<LD>(2 * i) / static_cast<LD>(r));
}

std::vector<LD> ld_default(LD theta, int64_t r) {
  std::vector<LD> v;
  for (int64_t i = 0; i < r / 2; ++i) v.push_back(ld_inv(theta, r, i));
  return v;
}

// Dynamic NTK: theta' = theta * (factor * S / L - factor + 1)^(R / (R - 2)), S = max(seq, L).
LD ld_dynamic_theta(LD theta, int64_t r, LD factor, int64_t len, int64_t seq) {
  const LD s = static_cast<LD>(seq > len ? seq : len);
  const LD bracket = factor * s / static_cast<LD>(len) - factor + 1;
  return theta * expl(logl(bracket) * static_cast<LD>(r) / static_cast<LD>(r - 2));
}

// Llama 3.1: keep high frequencies, divide low ones by factor, blend the band in between.
LD ld_llama3(LD inv, LD factor, LD lo, LD hi, LD len0) {
  const LD wavelen = 2 * kPiL / inv;
  if (wavelen < len0 / hi) return inv;
  if (wavelen > len0 / lo) return inv / factor;
  const LD s = (len0 / wavelen - lo) / (hi - lo);
  return s * inv + (1 - s) * (inv / factor);
}

// Yarn with explicit ramp bounds: blend of inv (extrapolation) and inv / factor (interpolation).
LD ld_yarn(LD inv, LD factor, LD low, LD high, int64_t j) {
  LD ramp = (static_cast<LD>(j) - low) / (high - low);
  ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
  return inv * (1 - ramp) + (inv / factor) * ramp;
}

LD ld_corr_dim(LD beta, int64_t r, LD theta, LD len0) {
  return static_cast<LD>(r) * logl(len0 / (2 * kPiL * beta)) / (2 * logl(theta));
}

double rel(double a, LD b) { return static_cast<double>(fabsl((static_cast<LD>(a) - b) / b)); }

double f32_ulps(float a, LD b) {
  const double u = ref::ulp_of(static_cast<double>(b), DType::kFloat32);
  return static_cast<double>(fabsl(static_cast<LD>(a) - b)) / u;
}

RopeConfig base_config(RopeType type, double theta, int64_t r) {
  RopeConfig c;
  c.type = type;
  c.theta = theta;
  c.rotary_dim = r;
  return c;
}

std::vector<double> inv64(const RopeConfig& c, double* scaling = nullptr) {
  std::vector<double> v;
  double s = -1;
  Status st = rope_inv_freq(c, &v, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  if (scaling != nullptr) *scaling = s;
  return v;
}

std::vector<float> inv32(const RopeConfig& c, double* scaling = nullptr) {
  std::vector<float> v;
  double s = -1;
  Status st = rope_inv_freq_f32(c, &v, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  if (scaling != nullptr) *scaling = s;
  return v;
}

// Tolerance of a float32 yarn frequency: the ramp (j - fl(low)) / fl(high - low) carries a few
// float32 roundings of absolute size ~2^-24, and the blend moves by about inv * (1 - 1/factor)
// per unit of ramp, which near the ends of the ramp is many ulps of the (smaller) result.
double yarn_f32_tol(LD inv, LD ref) {
  const double u = ref::ulp_of(static_cast<double>(ref), DType::kFloat32);
  return 4.0 + static_cast<double>(inv) * 4.0 * std::ldexp(1.0, -24) / u;
}

// ---- default ----

TEST(CpuRopeCache, DefaultHandValues) {
  // theta 10000, R = 128: inv_freq[i] = 10000^(-2i/128) = 10^(-i/16).
  const RopeConfig c = base_config(RopeType::kDefault, 10000.0, 128);
  double scaling = 0;
  const auto v = inv64(c, &scaling);
  ASSERT_EQ(v.size(), 64u);
  EXPECT_EQ(scaling, 1.0);
  EXPECT_EQ(v[0], 1.0);
  EXPECT_NEAR(v[1], 0.86596432336006535235, 2e-16);     // 10^(-1/16)
  EXPECT_NEAR(v[16], 0.1, 1e-16);                       // 10^(-1)
  EXPECT_NEAR(v[63], 1.1547819846894581797e-4, 1e-19);  // 10^(-63/16)
  const auto f = inv32(c);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_LE(f32_ulps(f[1], 0.86596432336006535235L), 1.0);
  EXPECT_LE(f32_ulps(f[63], 1.1547819846894581797e-4L), 1.0);
}

TEST(CpuRopeCache, DefaultMatchesIndependentFormula) {
  for (double theta : {10000.0, 500000.0, 1000000.0, 5000000.0}) {
    for (int64_t r : {2, 4, 32, 64, 80, 96, 128, 160, 256}) {
      const RopeConfig c = base_config(RopeType::kDefault, theta, r);
      const auto v = inv64(c);
      const auto f = inv32(c);
      const auto ref = ld_default(theta, r);
      ASSERT_EQ(v.size(), static_cast<std::size_t>(r / 2));
      for (std::size_t i = 0; i < ref.size(); ++i) {
        EXPECT_LT(rel(v[i], ref[i]), 4e-15) << theta << " " << r << " " << i;
        // float32 evaluation: e_i = fl(2i/R) is off by up to half an ulp of e_i when R is not a
        // power of two, which moves theta^-e_i by ln(theta) * e_i * 2^-24 relative; the power
        // and the reciprocal add one rounding each.
        const double e = 2.0 * static_cast<double>(i) / static_cast<double>(r);
        const double tol_ulps = std::log(theta) * e + 2.0;
        EXPECT_LE(f32_ulps(f[i], ref[i]), tol_ulps) << theta << " " << r << " " << i;
      }
    }
  }
}

TEST(CpuRopeCache, DefaultPowerOfTwoDimF32IsNearlyCorrectlyRounded) {
  // With R a power of two e_i is exact, so only the power and the reciprocal round (half an ulp
  // each, the first relative to the power's own binade).
  const RopeConfig c = base_config(RopeType::kDefault, 500000.0, 128);
  const auto f = inv32(c);
  const auto ref = ld_default(500000.0L, 128);
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_LE(f32_ulps(f[i], ref[i]), 1.5) << i;
}

// ---- linear ----

TEST(CpuRopeCache, LinearDividesByFactor) {
  RopeConfig c = base_config(RopeType::kLinear, 10000.0, 128);
  c.factor = 4.0;
  double scaling = 0;
  const auto v = inv64(c, &scaling);
  EXPECT_EQ(scaling, 1.0);
  EXPECT_EQ(v[0], 0.25);
  EXPECT_NEAR(v[1], 0.86596432336006535235 / 4, 1e-16);
  const auto ref = ld_default(10000.0L, 128);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_LT(rel(v[i], ref[i] / 4), 4e-15) << i;
  // A power-of-two factor divides exactly, so the float32 path is default / 4 bit for bit.
  const auto d = inv32(base_config(RopeType::kDefault, 10000.0, 128));
  const auto f = inv32(c);
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], d[i] / 4) << i;
  // factor 3: one more rounding.
  c.factor = 3.0;
  const auto f3 = inv32(c);
  for (std::size_t i = 0; i < f3.size(); ++i) EXPECT_LE(f32_ulps(f3[i], ref[i] / 3), 1.5) << i;
}

// ---- dynamic NTK ----

TEST(CpuRopeCache, DynamicBelowOrAtMaxPositionsIsDefault) {
  const RopeConfig d = base_config(RopeType::kDefault, 10000.0, 128);
  for (int64_t seq : {0, 1, 100, 2047, 2048}) {
    RopeConfig c = base_config(RopeType::kDynamic, 10000.0, 128);
    c.factor = 2.0;
    c.max_position_embeddings = 2048;
    c.seq_len = seq;
    EXPECT_EQ(inv64(c), inv64(d)) << seq;
    EXPECT_EQ(inv32(c), inv32(d)) << seq;
  }
}

TEST(CpuRopeCache, DynamicAboveMaxPositionsHandValues) {
  // factor 2, L 2048, S 4096: bracket = 2 * 4096 / 2048 - 1 = 3, theta' = 10000 * 3^(128/126).
  RopeConfig c = base_config(RopeType::kDynamic, 10000.0, 128);
  c.factor = 2.0;
  c.max_position_embeddings = 2048;
  c.seq_len = 4096;
  double scaling = 0;
  const auto v = inv64(c, &scaling);
  EXPECT_EQ(scaling, 1.0);
  EXPECT_EQ(v[0], 1.0);
  EXPECT_NEAR(v[1], 0.85099429134121622994, 2e-16);
  EXPECT_NEAR(v[63], 3.8492732822981939322e-5, 1e-19);
  // theta' = 30527.736748806698...: the last frequency is theta'^(-126/128).
  EXPECT_LT(rel(v[63], powl(30527.73674880669831481L, -126.0L / 128)), 1e-14);
}

TEST(CpuRopeCache, DynamicMatchesIndependentFormula) {
  for (double factor : {1.0, 2.0, 4.0, 8.5}) {
    for (int64_t seq : {4097, 8192, 100000}) {
      RopeConfig c = base_config(RopeType::kDynamic, 500000.0, 96);
      c.factor = factor;
      c.max_position_embeddings = 4096;
      c.seq_len = seq;
      const auto v = inv64(c);
      const auto f = inv32(c);
      const LD tp = ld_dynamic_theta(500000.0L, 96, factor, 4096, seq);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const LD ref = ld_inv(tp, 96, static_cast<int64_t>(i));
        EXPECT_LT(rel(v[i], ref), 1e-14) << factor << " " << seq << " " << i;
        const double e = 2.0 * static_cast<double>(i) / 96.0;
        // theta' itself is rounded to float32 before the power: + e ulps.
        EXPECT_LE(f32_ulps(f[i], ref), std::log(static_cast<double>(tp)) * e + e + 2.0)
            << factor << " " << seq << " " << i;
      }
    }
  }
}

TEST(CpuRopeCache, DynamicGrowsWithSequenceLength) {
  RopeConfig c = base_config(RopeType::kDynamic, 10000.0, 64);
  c.factor = 4.0;
  c.max_position_embeddings = 1024;
  std::vector<double> prev = inv64(c);
  for (int64_t seq : {1025, 2048, 4096, 65536}) {
    c.seq_len = seq;
    const auto v = inv64(c);
    EXPECT_EQ(v[0], 1.0);
    for (std::size_t i = 1; i < v.size(); ++i) EXPECT_LT(v[i], prev[i]) << seq << " " << i;
    prev = v;
  }
}

// ---- llama3 ----

RopeConfig llama31() {
  RopeConfig c = base_config(RopeType::kLlama3, 500000.0, 128);
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_position_embeddings = 8192;
  return c;
}

TEST(CpuRopeCache, Llama3HandValues) {
  // Llama 3.1: theta 5e5, R 128, factor 8, low 1, high 4, L0 8192. high_freq_wavelen 2048,
  // low_freq_wavelen 8192. Pair 28: wavelen 1956.5 < 2048, kept; 29..31: wavelen 2401.7, 2948.3,
  // 3619.2 in the band with s = 0.80362, 0.59285, 0.42115; 63: wavelen 2.56e6, divided by 8.
  double scaling = 0;
  const auto v = inv64(llama31(), &scaling);
  EXPECT_EQ(scaling, 1.0);
  EXPECT_EQ(v[0], 1.0);
  EXPECT_NEAR(v[1], 0.81461723385654470410, 2e-16);
  EXPECT_NEAR(v[28], 0.0032114459947525910185, 1e-18);
  EXPECT_NEAR(v[29], 0.0021665707635033586093, 1e-18);
  EXPECT_NEAR(v[30], 0.0013718935677611381604, 1e-18);
  EXPECT_NEAR(v[31], 0.00085675141291963208107, 1e-18);
  EXPECT_NEAR(v[63], 3.0689259889145110891e-7, 1e-21);
}

TEST(CpuRopeCache, Llama3BandsMatchIndependentFormula) {
  const RopeConfig c = llama31();
  const auto v = inv64(c);
  const auto f = inv32(c);
  const auto d64 = inv64(base_config(RopeType::kDefault, 500000.0, 128));
  const auto d32 = inv32(base_config(RopeType::kDefault, 500000.0, 128));
  int kept = 0, scaled = 0, band = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const LD inv = ld_inv(500000.0L, 128, static_cast<int64_t>(i));
    const LD ref = ld_llama3(inv, 8, 1, 4, 8192);
    const LD wavelen = 2 * kPiL / inv;
    EXPECT_LT(rel(v[i], ref), 1e-14) << i;
    if (wavelen < 2048) {
      ++kept;
      EXPECT_EQ(v[i], d64[i]) << i;
      EXPECT_EQ(f[i], d32[i]) << i;
    } else if (wavelen > 8192) {
      ++scaled;
      EXPECT_EQ(v[i], d64[i] / 8) << i;
      EXPECT_EQ(f[i], d32[i] / 8) << i;
    } else {
      ++band;
      EXPECT_LT(v[i], d64[i]) << i;
      EXPECT_GT(v[i], d64[i] / 8) << i;
      EXPECT_LE(f32_ulps(f[i], ref), 4.0) << i;
    }
  }
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(band, 6);
  EXPECT_EQ(scaled, 29);
}

TEST(CpuRopeCache, Llama3BandEdges) {
  // Pair 28 has wavelen 1956.497 (theta 5e5, R 128). high_freq_wavelen = L0 / 4: with L0 = 7826
  // it is 1956.5 > wavelen, so pair 28 is kept exactly; with L0 = 7825 it is 1956.25 < wavelen,
  // so pair 28 enters the band with s = (7825 / 1956.497 - 1) / 3 = 0.99983, just below 1.
  const auto d64 = inv64(base_config(RopeType::kDefault, 500000.0, 128));
  const auto d32 = inv32(base_config(RopeType::kDefault, 500000.0, 128));
  RopeConfig c = llama31();
  c.original_max_position_embeddings = 7826;
  EXPECT_EQ(inv64(c)[28], d64[28]);
  EXPECT_EQ(inv32(c)[28], d32[28]);
  c.original_max_position_embeddings = 7825;
  const double in_band = inv64(c)[28];
  EXPECT_LT(in_band, d64[28]);
  EXPECT_GT(in_band, d64[28] * (1 - 2e-4));  // continuous across the edge
  EXPECT_LT(rel(in_band, ld_llama3(ld_inv(500000.0L, 128, 28), 8, 1, 4, 7825)), 1e-14);
  EXPECT_LT(inv32(c)[28], d32[28]);

  // Pair 29 has wavelen 2401.738. low_freq_wavelen = L0 / 1: with L0 = 2401 it is below the
  // wavelength, so pair 29 is divided by factor exactly; with L0 = 2402 the pair is in the band
  // with s = (2402 / 2401.738 - 1) / 3 = 3.6e-5, just above 0.
  c.original_max_position_embeddings = 2401;
  EXPECT_EQ(inv64(c)[29], d64[29] / 8);
  EXPECT_EQ(inv32(c)[29], d32[29] / 8);
  c.original_max_position_embeddings = 2402;
  const double low_band = inv64(c)[29];
  EXPECT_GT(low_band, d64[29] / 8);
  EXPECT_LT(low_band, d64[29] / 8 * (1 + 1e-3));
  EXPECT_LT(rel(low_band, ld_llama3(ld_inv(500000.0L, 128, 29), 8, 1, 4, 2402)), 1e-14);
  EXPECT_GT(inv32(c)[29], d32[29] / 8);
}

// ---- yarn ----

RopeConfig yarn40() {
  RopeConfig c = base_config(RopeType::kYarn, 10000.0, 64);
  c.factor = 40.0;
  c.original_max_position_embeddings = 4096;
  return c;
}

TEST(CpuRopeCache, YarnAttentionScaling) {
  double s = 0;
  inv64(yarn40(), &s);
  EXPECT_NEAR(s, 1.3688879454113936508, 1e-15);  // 0.1 * ln(40) + 1
  RopeConfig c = yarn40();
  c.mscale = 1.0;  // mscale alone: both must be set for the ratio
  inv64(c, &s);
  EXPECT_NEAR(s, 1.3688879454113936508, 1e-15);
  c.mscale_all_dim = 0.5;  // (0.1 ln 40 + 1) / (0.05 ln 40 + 1)
  inv64(c, &s);
  EXPECT_NEAR(s, 1.1557219901962608927, 1e-15);
  c.mscale = 0.707;  // DeepSeek-style equal mscales cancel
  c.mscale_all_dim = 0.707;
  inv64(c, &s);
  EXPECT_EQ(s, 1.0);
  c.attention_factor = 0.5;  // explicit attention_factor wins
  inv64(c, &s);
  EXPECT_EQ(s, 0.5);
  RopeConfig one = yarn40();
  one.factor = 1.0;  // get_mscale(scale <= 1) = 1
  inv64(one, &s);
  EXPECT_EQ(s, 1.0);
  double s32 = 0;
  inv32(yarn40(), &s32);
  inv64(yarn40(), &s);
  EXPECT_EQ(s32, s);
  for (RopeType t : {RopeType::kDefault, RopeType::kLinear, RopeType::kLlama3}) {
    RopeConfig o = llama31();
    o.type = t;
    inv64(o, &s);
    EXPECT_EQ(s, 1.0);
  }
}

TEST(CpuRopeCache, YarnRampRegions) {
  // theta 1e4, R 64, L0 4096: corr_dim(32) = 10.472, corr_dim(1) = 22.513 -> truncated [10, 23].
  const LD low = ld_corr_dim(32, 64, 10000, 4096);
  const LD high = ld_corr_dim(1, 64, 10000, 4096);
  EXPECT_NEAR(static_cast<double>(low), 10.472240810318026535, 1e-12);
  EXPECT_NEAR(static_cast<double>(high), 22.513440636877274344, 1e-12);
  const RopeConfig c = yarn40();
  const auto v = inv64(c);
  const auto f = inv32(c);
  const auto d64 = inv64(base_config(RopeType::kDefault, 10000.0, 64));
  const auto d32 = inv32(base_config(RopeType::kDefault, 10000.0, 64));
  for (std::size_t j = 0; j < v.size(); ++j) {
    const LD inv = ld_inv(10000.0L, 64, static_cast<int64_t>(j));
    const LD ref = ld_yarn(inv, 40, 10, 23, static_cast<int64_t>(j));
    EXPECT_LT(rel(v[j], ref), 4e-15) << j;
    EXPECT_LE(f32_ulps(f[j], ref), yarn_f32_tol(inv, ref)) << j;
    if (j <= 10) {  // ramp 0: pure extrapolation, the default frequency exactly
      EXPECT_EQ(v[j], d64[j]) << j;
      EXPECT_EQ(f[j], d32[j]) << j;
    }
    if (j >= 23) {  // ramp 1: pure interpolation
      EXPECT_LT(rel(v[j], inv / 40), 4e-15) << j;
    }
  }
  // Hand value in the ramp: j = 16, ramp 6/13: inv_16 * (7/13 + (6/13)/40), inv_16 = 10^(-2).
  EXPECT_NEAR(v[16], 0.01 * (7.0 / 13 + 6.0 / 13 / 40), 1e-17);
}

TEST(CpuRopeCache, YarnWithoutTruncation) {
  RopeConfig c = yarn40();
  c.truncate = false;
  const LD low = ld_corr_dim(32, 64, 10000, 4096);
  const LD high = ld_corr_dim(1, 64, 10000, 4096);
  const auto v = inv64(c);
  const auto f = inv32(c);
  for (std::size_t j = 0; j < v.size(); ++j) {
    const LD inv = ld_inv(10000.0L, 64, static_cast<int64_t>(j));
    const LD ref = ld_yarn(inv, 40, low, high, static_cast<int64_t>(j));
    EXPECT_LT(rel(v[j], ref), 1e-14) << j;
    EXPECT_LE(f32_ulps(f[j], ref), yarn_f32_tol(inv, ref)) << j;
  }
  EXPECT_NE(v[11], inv64(yarn40())[11]);  // the fractional bounds move the ramp
}

TEST(CpuRopeCache, YarnBetaZeroMeansDefaultsAndDegenerateRange) {
  RopeConfig c = yarn40();
  c.beta_fast = 0.0;
  c.beta_slow = 0.0;
  EXPECT_EQ(inv64(c), inv64(yarn40()));
  EXPECT_EQ(inv32(c), inv32(yarn40()));
  // L0 = 6 < 2*pi: corr_dim(1) = 64 ln(6 / 2pi) / (2 ln 1e4) = -0.16 -> ceil 0 and corr_dim(32)
  // clamps to 0 too: low == high == 0, so high becomes 0.001 and the ramp is a step at j = 1.
  RopeConfig d = yarn40();
  d.original_max_position_embeddings = 6;
  const auto v = inv64(d);
  EXPECT_EQ(v[0], 1.0);
  for (std::size_t j = 1; j < v.size(); ++j) {
    EXPECT_LT(rel(v[j], ld_inv(10000.0L, 64, static_cast<int64_t>(j)) / 40), 4e-15) << j;
  }
}

TEST(CpuRopeCache, YarnMatchesIndependentFormulaAcrossConfigs) {
  for (double factor : {2.0, 4.0, 16.0, 32.0}) {
    for (double theta : {10000.0, 1000000.0}) {
      for (int64_t r : {64, 128}) {
        for (bool truncate : {true, false}) {
          RopeConfig c = base_config(RopeType::kYarn, theta, r);
          c.factor = factor;
          c.original_max_position_embeddings = 32768;
          c.beta_fast = 32;
          c.beta_slow = 1;
          c.truncate = truncate;
          LD low = ld_corr_dim(32, r, theta, 32768);
          LD high = ld_corr_dim(1, r, theta, 32768);
          if (truncate) {
            low = floorl(low);
            high = ceill(high);
          }
          low = low < 0 ? 0 : low;
          high = high > r - 1 ? r - 1 : high;
          const auto v = inv64(c);
          const auto f = inv32(c);
          for (std::size_t j = 0; j < v.size(); ++j) {
            const LD inv = ld_inv(theta, r, static_cast<int64_t>(j));
            const LD ref = ld_yarn(inv, factor, low, high, static_cast<int64_t>(j));
            EXPECT_LT(rel(v[j], ref), 1e-14) << factor << " " << theta << " " << r << " " << j;
            EXPECT_LE(f32_ulps(f[j], ref), yarn_f32_tol(inv, ref))
                << factor << " " << theta << " " << r << " " << j;
          }
        }
      }
    }
  }
}

// ---- Hugging Face's own float32 values ----

// inv_freq bits returned by transformers 5.17.0's rope init functions on torch 2.11's CPU
// (LlamaConfig with head_dim = R, rope_parameters as in each test below).
const uint32_t kHf_l3_std[] = {
    0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d, 0x3e959ee3, 0x3e73c461,
    0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c, 0x3daee4ad, 0x3d8e7898, 0x3d681e67, 0x3d3d1684,
    0x3d1a08c8, 0x3cfaf53f, 0x3ccc6f49, 0x3ca68939, 0x3c87a9c3, 0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f,
    0x3beef74f, 0x3bc2aa76, 0x3b9e9402, 0x3b812e35, 0x3b527720, 0x3b0dfd06, 0x3ab3d11d, 0x3a60979e,
    0x3a0995d2, 0x39a3f108, 0x393b2dd2, 0x38c86886, 0x38a3418d, 0x3884fdbf, 0x3858ac81, 0x38308199,
    0x380fc8f8, 0x37ea426f, 0x37bed4f4, 0x379b7475, 0x377d45c3, 0x374e51f5, 0x3728126b, 0x3708ea0f,
    0x36df10c4, 0x36b5b687, 0x369406cb, 0x36712b80, 0x36447610, 0x36200a69, 0x36025f34, 0x35d46808,
    0x35ad07a7, 0x358cf400, 0x3565a54d, 0x353b12c7, 0x351864a7, 0x34f848c2, 0x34ca41b0, 0x34a4c2ff,
};
const uint32_t kHf_l3_odd[] = {
    0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d, 0x3e959ee3, 0x3e73c461,
    0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c, 0x3daee4ad, 0x3d8e7898, 0x3d681e67, 0x3d3d1684,
    0x3d1a08c8, 0x3cfaf53f, 0x3ccc6f49, 0x3ca68939, 0x3c87a9c3, 0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f,
    0x3beef74f, 0x3bc2aa76, 0x3b8408c5, 0x3b0def07, 0x3a861e06, 0x39b3347f, 0x388baa41, 0x38638c10,
    0x38395d21, 0x38170023, 0x37f603ea, 0x37c86886, 0x37a3418d, 0x3784fdbf, 0x3758ac81, 0x37308199,
    0x370fc8f8, 0x36ea426f, 0x36bed4f4, 0x369b7475, 0x367d45c3, 0x364e51f5, 0x3628126b, 0x3608ea0f,
    0x35df10c4, 0x35b5b687, 0x359406cb, 0x35712b80, 0x35447610, 0x35200a69, 0x35025f34, 0x34d46808,
    0x34ad07a7, 0x348cf400, 0x3465a54d, 0x343b12c7, 0x341864a7, 0x33f848c2, 0x33ca41b0, 0x33a4c2ff,
};
const uint32_t kHf_yarn_ds[] = {
    0x3f800000, 0x3f3ff911, 0x3f0ff59a, 0x3ed7e89b, 0x3ea1e89b, 0x3e72d423, 0x3e361887, 0x3e088d77,
    0x3dcccccd, 0x3d99940d, 0x3d6655c2, 0x3d1fc5ba, 0x3cdc321b, 0x3c968dc3, 0x3c4bf283, 0x3c088d77,
    0x3bb43959, 0x3b697066, 0x3b136a16, 0x3ab3a2cd, 0x3a4f3e37, 0x39d99312, 0x393a7753, 0x380bd471,
    0x37d1b717, 0x379d43a3, 0x376bdcf0, 0x3730df51, 0x3704a2b3, 0x36c6ecdd, 0x36952c42, 0x365fba4f,
};
const uint32_t kHf_yarn_notrunc_odd[] = {
    0x3f800000, 0x3f4b5918, 0x3f21866b, 0x3f004dce, 0x3ecbd4b4, 0x3ea1e89b, 0x3e809bcc, 0x3e4c509b,
    0x3e224b06, 0x3e00e9fa, 0x3dcccccd, 0x3da2adad, 0x3d813855, 0x3d4d494b, 0x3d231091, 0x3cf5f3b4,
    0x3cb57cdd, 0x3c8522f2, 0x3c41fe8f, 0x3c0c2ef5, 0x3bc89a2e, 0x3b8dc9e3, 0x3b455d20, 0x3b069e3e,
    0x3ab2aae9, 0x3a63ee0f, 0x3a08a395, 0x39be32d4, 0x39971481, 0x397003aa, 0x393ea672, 0x39177059,
    0x38f09591, 0x38bf1a57, 0x3897cc63, 0x387127d0, 0x383f8e83, 0x381828a9, 0x37f1ba6a, 0x37c002ee,
};
const uint32_t kHf_dyn_big[] = {
    0x3f800000, 0x3f2e0053, 0x3eec88e4, 0x3ea0c558, 0x3e5a8cad, 0x3e148be5, 0x3dc9ee8d, 0x3d894066,
    0x3d3a93e2, 0x3cfda184, 0x3cac641b, 0x3c6a5882, 0x3c1f4876, 0x3bd886e7, 0x3b932bfb, 0x3b481027,
    0x3b07fb3b, 0x3ab8d9e1, 0x3a7b48a3, 0x3a2acbaf, 0x39e82d57, 0x399dcf1b, 0x395685ee, 0x3911cf52,
    0x38c63630, 0x3886b918, 0x383723ec, 0x37f8f553, 0x37a93714, 0x37660743, 0x371c593e, 0x36d489bd,
    0x369075dc, 0x3644609b, 0x360579ed, 0x35b5720c, 0x3576a784, 0x3527a631, 0x34e3e64d, 0x349ae6d7,
    0x34529236, 0x340f1f9f, 0x33c28f5f, 0x33843db5, 0x3333c430, 0x32f45f2c, 0x32a61904, 0x3261ca64,
};
const uint32_t kHf_def_1e6_128[] = {
    0x3f800000, 0x3f4e4bad, 0x3f263de0, 0x3f05f6ef, 0x3ed7e89b, 0x3eadfcff, 0x3e8c3504, 0x3e61f835,
    0x3e361887, 0x3e12bd91, 0x3dec7fd6, 0x3dbe94c6, 0x3d99940d, 0x3d778513, 0x3d47763f, 0x3d20bc1d,
    0x3d0186e3, 0x3cd0c1a8, 0x3ca8398b, 0x3c879008, 0x3c5a7bf2, 0x3c301052, 0x3c0de12d, 0x3be4aa46,
    0x3bb8449c, 0x3b947dae, 0x3b6f520e, 0x3b40dac5, 0x3b1b690d, 0x3afa78f0, 0x3ac9d75c, 0x3aa2a6f7,
    0x3a83126f, 0x3a533f28, 0x3a2a3b44, 0x3a092e02, 0x39dd1725, 0x39b229fb, 0x398f9272, 0x39676492,
    0x393a7753, 0x39164324, 0x38f22ce2, 0x38c327b5, 0x389d43a4, 0x387d75d4, 0x384c3fbe, 0x382497ab,
    0x3804a2b2, 0x37d5c441, 0x37ac431d, 0x378ad0ed, 0x375fba4f, 0x37344a0e, 0x371148e3, 0x36ea2732,
    0x36bcb0c1, 0x36980e02, 0x36751070, 0x36457bab, 0x361f23e4, 0x36003dec, 0x35ceaf79, 0x35a68e4c,
};

std::vector<float> floats_of(const uint32_t* b, std::size_t n) {
  std::vector<float> v(n);
  std::memcpy(v.data(), b, n * sizeof(float));
  return v;
}

TEST(CpuRopeCache, F32MatchesRecordedHuggingFaceBits) {
  RopeConfig c = llama31();  // llama3: 5e5, 128, factor 8, 1, 4, 8192
  EXPECT_EQ(inv32(c), floats_of(kHf_l3_std, 64));
  c.factor = 32.0;  // band thresholds 8191 / 3 and 8191 / 7, not float32-representable
  c.low_freq_factor = 3.0;
  c.high_freq_factor = 7.0;
  c.original_max_position_embeddings = 8191;
  EXPECT_EQ(inv32(c), floats_of(kHf_l3_odd, 64));
  EXPECT_EQ(inv32(yarn40()), floats_of(kHf_yarn_ds, 32));  // yarn: 1e4, 64, factor 40, L0 4096
  RopeConfig y = base_config(RopeType::kYarn, 10000.0, 80);
  y.factor = 5.5;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 24.5;
  y.beta_slow = 1.5;
  y.truncate = false;
  EXPECT_EQ(inv32(y), floats_of(kHf_yarn_notrunc_odd, 40));
  RopeConfig d = base_config(RopeType::kDynamic, 500000.0, 96);
  d.factor = 8.5;
  d.max_position_embeddings = 4096;
  d.seq_len = 100000;
  EXPECT_EQ(inv32(d), floats_of(kHf_dyn_big, 48));
  // The documented difference: theta 1e6, R 128, pair 37. theta^(74/128) = 2942.72717620928 lies
  // within 0.02 ulp of a float32 rounding midpoint; the correctly rounded power gives 0x39B229FA,
  // torch's float32 pow lands on the other side and Hugging Face gets 0x39B229FB. Every other
  // pair agrees.
  const auto ours = inv32(base_config(RopeType::kDefault, 1000000.0, 128));
  const auto theirs = floats_of(kHf_def_1e6_128, 64);
  for (std::size_t i = 0; i < 64; ++i) {
    if (i == 37) {
      EXPECT_EQ(kHf_def_1e6_128[37], 0x39B229FBu);
      uint32_t b;
      std::memcpy(&b, &ours[37], sizeof b);
      EXPECT_EQ(b, 0x39B229FAu);
    } else {
      EXPECT_EQ(ours[i], theirs[i]) << i;
    }
  }
}

// ---- the cache ----

TEST(CpuRopeCache, CacheLayoutAndDtypes) {
  RopeConfig c = yarn40();  // scaling != 1 so it is seen to apply
  c.rotary_dim = 8;
  c.original_max_position_embeddings = 64;
  double scaling = 0;
  const auto inv = inv32(c, &scaling);
  ASSERT_GT(scaling, 1.0);
  const int64_t P = 7, R = 8, h = 4;
  std::vector<float> f32(P * R, -7.0f);
  std::vector<uint16_t> f16(P * R, 0xFFFF), bf16(P * R, 0xFFFF);
  ASSERT_TRUE(build_rope_cache(c, P, DType::kFloat32, f32.data()).ok());
  ASSERT_TRUE(build_rope_cache(c, P, DType::kFloat16, f16.data()).ok());
  ASSERT_TRUE(build_rope_cache(c, P, DType::kBFloat16, bf16.data()).ok());
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t i = 0; i < h; ++i) {
      const LD angle = static_cast<LD>(p) * static_cast<LD>(inv[i]);
      const double cv = static_cast<double>(cosl(angle) * static_cast<LD>(scaling));
      const double sv = static_cast<double>(sinl(angle) * static_cast<LD>(scaling));
      EXPECT_EQ(f32[p * R + i], static_cast<float>(cv)) << p << " " << i;
      EXPECT_EQ(f32[p * R + h + i], static_cast<float>(sv)) << p << " " << i;
      EXPECT_EQ(f16[p * R + i], ref::double_to_f16_bits(cv)) << p << " " << i;
      EXPECT_EQ(f16[p * R + h + i], ref::double_to_f16_bits(sv)) << p << " " << i;
      EXPECT_EQ(bf16[p * R + i], ref::double_to_bf16_bits(cv)) << p << " " << i;
      EXPECT_EQ(bf16[p * R + h + i], ref::double_to_bf16_bits(sv)) << p << " " << i;
    }
  }
  // Position 0: cos = scaling, sin = 0.
  for (int64_t i = 0; i < h; ++i) {
    EXPECT_EQ(f32[i], static_cast<float>(scaling));
    EXPECT_EQ(f32[h + i], 0.0f);
  }
}

TEST(CpuRopeCache, CacheRangeMatchesFullCache) {
  const RopeConfig c = llama31();
  const int64_t R = 128;
  std::vector<uint16_t> full(40 * R), part(9 * R);
  ASSERT_TRUE(build_rope_cache(c, 40, DType::kBFloat16, full.data()).ok());
  ASSERT_TRUE(build_rope_cache_range(c, 31, 9, DType::kBFloat16, part.data()).ok());
  for (int64_t k = 0; k < 9 * R; ++k) EXPECT_EQ(part[k], full[31 * R + k]) << k;
  EXPECT_TRUE(build_rope_cache(c, 0, DType::kFloat32, nullptr).ok());  // zero rows: a no-op
}

TEST(CpuRopeCache, LargePositionFidelity) {
  // theta 5e5, R 128, positions 2^20 and 2^20 + 1, f32 cache.
  const RopeConfig c = base_config(RopeType::kDefault, 500000.0, 128);
  const auto inv = inv32(c);
  const int64_t R = 128, h = 64, p0 = int64_t{1} << 20;
  std::vector<float> cache(2 * R);
  ASSERT_TRUE(build_rope_cache_range(c, p0, 2, DType::kFloat32, cache.data()).ok());
  int naive_differs_at_p0 = 0, naive_differs_at_p1 = 0;
  float worst_naive_error = 0;
  for (int64_t row = 0; row < 2; ++row) {
    const int64_t p = p0 + row;
    for (int64_t i = 0; i < h; ++i) {
      // The exact angle (a 21-bit integer times a 24-bit significand fits a long double's 64
      // bits), its cos and sin, each rounded once to float32.
      const LD angle = static_cast<LD>(p) * static_cast<LD>(inv[i]);
      const float want_c = static_cast<float>(cosl(angle));
      const float want_s = static_cast<float>(sinl(angle));
      EXPECT_EQ(cache[row * R + i], want_c) << p << " " << i;
      EXPECT_EQ(cache[row * R + h + i], want_s) << p << " " << i;
      // What a float32 pipeline does: fl(fl(p) * f), then cos / sin in float.
      const float naive_angle = static_cast<float>(p) * inv[i];
      const float naive_c = std::cos(naive_angle);
      const float naive_s = std::sin(naive_angle);
      const bool differs = naive_c != want_c || naive_s != want_s;
      if (row == 0) {
        // 2^20 * f is a power-of-two scaling: the float32 angle is exact here.
        EXPECT_EQ(static_cast<LD>(naive_angle), angle) << i;
        naive_differs_at_p0 += differs;
      } else {
        naive_differs_at_p1 += differs;
        worst_naive_error = std::max(worst_naive_error, std::fabs(naive_c - want_c));
      }
    }
  }
  // At 2^20 + 1 the float32 product drops the angle's low bits (ulp 2^-3 at 2^20 rad): most
  // pairs come out different and the worst cos is off in the second digit.
  EXPECT_GT(naive_differs_at_p1, h / 2);
  EXPECT_GT(worst_naive_error, 1e-2f);
  EXPECT_LE(naive_differs_at_p0, naive_differs_at_p1);
}

TEST(CpuRopeCache, ExactAngleBeyondTwoToThe29) {
  // p = 2^38 + 1: p * f needs 63 bits, so the float64 product rounds and the builder recovers the
  // lost part. A long double (64-bit significand) holds the product exactly.
  const RopeConfig c = base_config(RopeType::kDefault, 10000.0, 64);
  const auto inv = inv32(c);
  const int64_t p = (int64_t{1} << 38) + 1, R = 64, h = 32;
  std::vector<float> cache(R);
  ASSERT_TRUE(build_rope_cache_range(c, p, 1, DType::kFloat32, cache.data()).ok());
  int inexact_products = 0;
  for (int64_t i = 0; i < h; ++i) {
    const double prod = static_cast<double>(p) * static_cast<double>(inv[i]);
    inexact_products += std::fma(static_cast<double>(p), static_cast<double>(inv[i]), -prod) != 0;
    const LD angle = static_cast<LD>(p) * static_cast<LD>(inv[i]);
    EXPECT_EQ(cache[i], static_cast<float>(cosl(angle))) << i;
    EXPECT_EQ(cache[h + i], static_cast<float>(sinl(angle))) << i;
  }
  EXPECT_GT(inexact_products, h / 2);
}

TEST(CpuRopeCache, BuilderWritesNothingOnError) {
  RopeConfig c = llama31();
  c.low_freq_factor = 5.0;  // > high_freq_factor
  std::vector<float> out(4 * 128, 3.5f);
  EXPECT_FALSE(build_rope_cache(c, 4, DType::kFloat32, out.data()).ok());
  for (float v : out) EXPECT_EQ(v, 3.5f);
  std::vector<double> inv = {42.0};
  double s = 9.0;
  EXPECT_FALSE(rope_inv_freq(c, &inv, &s).ok());
  EXPECT_EQ(inv, std::vector<double>{42.0});
  EXPECT_EQ(s, 9.0);
}

TEST(CpuRopeCache, BuilderErrorsNameTheFunctionCalled) {
  RopeConfig c = llama31();
  c.low_freq_factor = 5.0;  // > high_freq_factor
  std::vector<float> out(4 * 128, 3.5f);
  const Status whole = build_rope_cache(c, 4, DType::kFloat32, out.data());
  EXPECT_EQ(whole.message().rfind("build_rope_cache: ", 0), 0u) << whole.message();
  const Status range = build_rope_cache_range(c, 2, 4, DType::kFloat32, out.data());
  EXPECT_EQ(range.message().rfind("build_rope_cache_range: ", 0), 0u) << range.message();
  const Status first = build_rope_cache_range(llama31(), -1, 4, DType::kFloat32, out.data());
  EXPECT_EQ(first.message().rfind("build_rope_cache_range: argument 'first_position'", 0), 0u)
      << first.message();
  for (float v : out) EXPECT_EQ(v, 3.5f);
}

// ---- names ----

TEST(CpuRopeCache, TypeAndStyleNames) {
  for (RopeType t : {RopeType::kDefault, RopeType::kLinear, RopeType::kDynamic, RopeType::kLlama3,
                     RopeType::kYarn}) {
    RopeType back = RopeType::kDefault;
    ASSERT_TRUE(parse_rope_type(rope_type_name(t), &back).ok());
    EXPECT_EQ(back, t);
  }
  EXPECT_STREQ(rope_type_name(RopeType::kLlama3), "llama3");
  EXPECT_STREQ(rope_style_name(RopeStyle::kNeox), "neox");
  EXPECT_STREQ(rope_style_name(RopeStyle::kGptj), "gptj");
  RopeType t = RopeType::kYarn;
  const Status st = parse_rope_type("longrope", &t);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'rope_type'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("longrope"), std::string::npos) << st.message();
  EXPECT_EQ(t, RopeType::kYarn);
}

// ---- validation: every error names the argument, what was expected and what was received ----

struct BadCase {
  const char* label;
  RopeConfig config;
  const char* arg;       // the argument the message must name
  const char* received;  // text of the received value the message must show
};

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> v;
  auto add = [&](const char* label, RopeConfig c, const char* arg, const char* received) {
    v.push_back({label, c, arg, received});
  };
  const RopeConfig dflt = base_config(RopeType::kDefault, 10000.0, 128);
  RopeConfig c;

  c = dflt;
  c.type = static_cast<RopeType>(99);
  add("type", c, "config.type", "99");
  c = dflt;
  c.rotary_dim = 0;
  add("rotary_dim 0", c, "config.rotary_dim", "0");
  c.rotary_dim = -4;
  add("rotary_dim negative", c, "config.rotary_dim", "-4");
  c.rotary_dim = 7;
  add("rotary_dim odd", c, "config.rotary_dim", "7");
  c = dflt;
  c.theta = 0.0;
  add("theta 0", c, "config.theta", "0");
  c.theta = -10.0;
  add("theta negative", c, "config.theta", "-10");
  c.theta = std::nan("");
  add("theta nan", c, "config.theta", "nan");
  c.theta = INFINITY;
  add("theta inf", c, "config.theta", "inf");

  RopeConfig lin = dflt;
  lin.type = RopeType::kLinear;
  c = lin;
  c.factor = 0.5;
  add("linear factor < 1", c, "config.factor", "0.5");
  c.factor = 0.0;
  add("linear factor 0", c, "config.factor", "0");
  c.factor = std::nan("");
  add("linear factor nan", c, "config.factor", "nan");
  c.factor = INFINITY;
  add("linear factor inf", c, "config.factor", "inf");

  RopeConfig dyn = dflt;
  dyn.type = RopeType::kDynamic;
  dyn.factor = 2.0;
  dyn.max_position_embeddings = 2048;
  c = dyn;
  c.factor = 0.9;
  add("dynamic factor", c, "config.factor", "0.9");
  c = dyn;
  c.rotary_dim = 2;
  add("dynamic rotary_dim 2", c, "config.rotary_dim", "2");
  c = dyn;
  c.max_position_embeddings = 0;
  add("dynamic max_position_embeddings", c, "config.max_position_embeddings", "0");
  c = dyn;
  c.seq_len = -1;
  add("dynamic seq_len", c, "config.seq_len", "-1");

  RopeConfig l3 = llama31();
  c = l3;
  c.factor = -8.0;
  add("llama3 factor", c, "config.factor", "-8");
  c = l3;
  c.original_max_position_embeddings = 0;
  add("llama3 original_max_position_embeddings", c, "config.original_max_position_embeddings", "0");
  c = l3;
  c.low_freq_factor = 0.0;
  add("llama3 low_freq_factor 0", c, "config.low_freq_factor", "0");
  c.low_freq_factor = std::nan("");
  add("llama3 low_freq_factor nan", c, "config.low_freq_factor", "nan");
  c = l3;
  c.high_freq_factor = 1.0;
  add("llama3 high == low", c, "config.high_freq_factor", "1");
  c.high_freq_factor = INFINITY;
  add("llama3 high inf", c, "config.high_freq_factor", "inf");

  RopeConfig y = yarn40();
  c = y;
  c.factor = 0.25;
  add("yarn factor", c, "config.factor", "0.25");
  c = y;
  c.theta = 1.0;
  add("yarn theta 1", c, "config.theta", "1");
  c = y;
  c.original_max_position_embeddings = -1;
  add("yarn original_max_position_embeddings", c, "config.original_max_position_embeddings", "-1");
  c = y;
  c.beta_fast = std::nan("");
  add("yarn beta_fast nan", c, "config.beta_fast", "nan");
  c.beta_fast = -1.0;
  add("yarn beta_fast negative", c, "config.beta_fast", "-1");
  c = y;
  c.beta_slow = INFINITY;
  add("yarn beta_slow inf", c, "config.beta_slow", "inf");
  c = y;
  c.beta_fast = 1.0;
  c.beta_slow = 2.0;
  add("yarn beta_fast < beta_slow", c, "config.beta_fast", "1");
  c = y;
  c.mscale = -1.0;
  add("yarn mscale", c, "config.mscale", "-1");
  c = y;
  c.mscale_all_dim = std::nan("");
  add("yarn mscale_all_dim", c, "config.mscale_all_dim", "nan");
  c = y;
  c.attention_factor = -0.5;
  add("yarn attention_factor", c, "config.attention_factor", "-0.5");
  c.attention_factor = INFINITY;
  add("yarn attention_factor inf", c, "config.attention_factor", "inf");
  c = y;
  c.beta_slow = -1.7976931348623157e308;  // extreme values print in full
  add("yarn beta_slow lowest", c, "config.beta_slow", "-1.7976931348623157e+308");
  c = y;
  c.mscale = -4.9406564584124654e-324;
  add("yarn mscale subnormal", c, "config.mscale", "-4.94066e-324");
  return v;
}

void expect_names(const Status& st, const std::string& op, const std::string& arg,
                  const std::string& received, const std::string& label) {
  EXPECT_FALSE(st.ok()) << label;
  const std::string& m = st.message();
  EXPECT_NE(m.find(op + ":"), std::string::npos) << label << ": " << m;
  EXPECT_NE(m.find("'" + arg + "'"), std::string::npos) << label << ": " << m;
  EXPECT_NE(m.find("expected"), std::string::npos) << label << ": " << m;
  EXPECT_NE(m.find("received " + received), std::string::npos) << label << ": " << m;
}

TEST(CpuRopeCache, EveryConfigErrorNamesTheField) {
  for (const BadCase& b : bad_cases()) {
    std::vector<double> v64;
    std::vector<float> v32;
    double s = 0;
    std::vector<float> out(128);
    const Status s64 = rope_inv_freq(b.config, &v64, &s);
    const Status s32 = rope_inv_freq_f32(b.config, &v32, &s);
    const Status sc = build_rope_cache(b.config, 1, DType::kFloat32, out.data());
    EXPECT_EQ(s64.code(), StatusCode::kInvalidArgument) << b.label;
    expect_names(s64, "rope_inv_freq", b.arg, b.received, b.label);
    expect_names(s32, "rope_inv_freq_f32", b.arg, b.received, b.label);
    expect_names(sc, "build_rope_cache", b.arg, b.received, b.label);
  }
}

TEST(CpuRopeCache, RopeTypeIsNamedInFactorErrors) {
  RopeConfig c = llama31();
  c.factor = 0.5;
  std::vector<double> v;
  const Status st = rope_inv_freq(c, &v, nullptr);
  EXPECT_NE(st.message().find("llama3"), std::string::npos) << st.message();
}

TEST(CpuRopeCache, BuilderArgumentErrors) {
  const RopeConfig c = base_config(RopeType::kDefault, 10000.0, 64);
  std::vector<float> out(64);
  Status st = build_rope_cache(c, 1, DType::kInt32, out.data());
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  expect_names(st, "build_rope_cache", "dtype", "i32", "dtype i32");
  st = build_rope_cache(c, 1, DType::kInt64, out.data());
  expect_names(st, "build_rope_cache", "dtype", "i64", "dtype i64");
  st = build_rope_cache(c, -1, DType::kFloat32, out.data());
  expect_names(st, "build_rope_cache", "max_positions", "-1", "max_positions");
  st = build_rope_cache(c, (int64_t{1} << 53) + 1, DType::kFloat32, out.data());
  expect_names(st, "build_rope_cache", "max_positions", "9007199254740993", "max_positions big");
  st = build_rope_cache_range(c, 0, -1, DType::kFloat32, out.data());
  expect_names(st, "build_rope_cache_range", "num_positions", "-1", "num_positions");
  st = build_rope_cache_range(c, -3, 1, DType::kFloat32, out.data());
  expect_names(st, "build_rope_cache_range", "first_position", "-3", "first_position");
  st = build_rope_cache_range(c, int64_t{1} << 53, 1, DType::kFloat32, out.data());
  expect_names(st, "build_rope_cache_range", "num_positions", "1", "position past 2^53");
  st = build_rope_cache_range(c, 0, 1, DType::kFloat32, nullptr);
  expect_names(st, "build_rope_cache_range", "out", "null", "range out");
  st = build_rope_cache(c, 1, DType::kFloat32, nullptr);
  expect_names(st, "build_rope_cache", "out", "null", "out");
  st = rope_inv_freq(c, nullptr, nullptr);
  expect_names(st, "rope_inv_freq", "inv_freq", "null", "inv_freq");
  st = rope_inv_freq_f32(c, nullptr, nullptr);
  expect_names(st, "rope_inv_freq_f32", "inv_freq", "null", "inv_freq f32");
}

}  // namespace
}  // namespace ropenorm
