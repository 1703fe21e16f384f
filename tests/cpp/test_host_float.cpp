// Tests of the host double <-> f32 / f16 / bf16 conversions: known encodings, ties to even, no
// double rounding through float, subnormals, overflow, NaN, exhaustive round trips, ulp_of.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "reference/host_float.h"

namespace ropenorm::ref {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool bf16_is_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0; }
bool f16_is_nan(uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x03FF) != 0; }

TEST(CpuHostFloat, Bf16KnownEncodings) {
  EXPECT_EQ(double_to_bf16_bits(1.0), 0x3F80);
  EXPECT_EQ(double_to_bf16_bits(-2.0), 0xC000);
  EXPECT_EQ(double_to_bf16_bits(0.5), 0x3F00);
  EXPECT_EQ(double_to_bf16_bits(3.0), 0x4040);
  EXPECT_EQ(double_to_bf16_bits(0.0), 0x0000);
  EXPECT_EQ(double_to_bf16_bits(-0.0), 0x8000);
  // 1/3 = 1.0101010|1010...b * 2^-2: the dropped bits are above half, so the 7-bit fraction
  // rounds up to 1.0101011b (0x3EAB = 0.333984375).
  EXPECT_EQ(double_to_bf16_bits(1.0 / 3.0), 0x3EAB);
  EXPECT_EQ(bf16_bits_to_double(0x3EAB), 0.333984375);
  // Largest finite, smallest normal, smallest subnormal.
  EXPECT_EQ(bf16_bits_to_double(0x7F7F), std::ldexp(255.0, 120));
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(255.0, 120)), 0x7F7F);
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(1.0, -126)), 0x0080);
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(1.0, -133)), 0x0001);
  EXPECT_EQ(bf16_bits_to_double(0x0001), std::ldexp(1.0, -133));
}

TEST(CpuHostFloat, Bf16TiesToEvenAndNoDoubleRounding) {
  // Halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): to the even one.
  EXPECT_EQ(double_to_bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3F80);
  // Halfway between 0x3F81 (odd) and 0x3F82: up to the even one.
  EXPECT_EQ(double_to_bf16_bits(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);
  // Just above the tie: up. Via float the 2^-30 is lost first (1 + 2^-8 + 2^-30 rounds to the
  // float 1 + 2^-8) and the tie then goes down to 0x3F80: a double rounding this must not do.
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(static_cast<double>(static_cast<float>(above_tie)), 1.0 + std::ldexp(1.0, -8));
  EXPECT_EQ(double_to_bf16_bits(above_tie), 0x3F81);
  EXPECT_EQ(double_to_bf16_bits(1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40)), 0x3F80);
  // Negative ties mirror the positive ones.
  EXPECT_EQ(double_to_bf16_bits(-(1.0 + 3 * std::ldexp(1.0, -8))), 0xBF82);
}

TEST(CpuHostFloat, Bf16SubnormalsOverflowNaN) {
  const double min_sub = std::ldexp(1.0, -133);
  EXPECT_EQ(double_to_bf16_bits(min_sub / 2), 0x0000);  // tie with 0: even
  EXPECT_EQ(double_to_bf16_bits(min_sub / 2 * (1 + 1e-9)), 0x0001);
  EXPECT_EQ(double_to_bf16_bits(3 * min_sub / 2), 0x0002);  // tie 1|2: even
  EXPECT_EQ(double_to_bf16_bits(-min_sub), 0x8001);
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(127.5, -133)), 0x0080);  // 127.5 quanta: up to 128
  EXPECT_EQ(double_to_bf16_bits(std::numeric_limits<double>::denorm_min()), 0x0000);
  EXPECT_EQ(double_to_bf16_bits(-std::numeric_limits<double>::denorm_min()), 0x8000);
  // Max finite is 255 * 2^120; max + half ulp = 255.5 * 2^120 ties to even = inf.
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(255.5, 120)), 0x7F80);
  EXPECT_EQ(double_to_bf16_bits(std::ldexp(255.5, 120) * (1 - 1e-12)), 0x7F7F);
  EXPECT_EQ(double_to_bf16_bits(1e39), 0x7F80);
  EXPECT_EQ(double_to_bf16_bits(-1e300), 0xFF80);
  EXPECT_EQ(double_to_bf16_bits(kInf), 0x7F80);
  EXPECT_EQ(double_to_bf16_bits(-kInf), 0xFF80);
  EXPECT_TRUE(bf16_is_nan(double_to_bf16_bits(kNaN)));
  EXPECT_TRUE(bf16_is_nan(double_to_bf16_bits(-kNaN)));
  EXPECT_TRUE(std::isnan(bf16_bits_to_double(0x7FC0)));
  EXPECT_EQ(bf16_bits_to_double(0xFF80), -kInf);
}

TEST(CpuHostFloat, F16KnownEncodings) {
  EXPECT_EQ(double_to_f16_bits(1.0), 0x3C00);
  EXPECT_EQ(double_to_f16_bits(-2.0), 0xC000);
  EXPECT_EQ(double_to_f16_bits(65504.0), 0x7BFF);
  EXPECT_EQ(f16_bits_to_double(0x7BFF), 65504.0);
  EXPECT_EQ(double_to_f16_bits(0.1), 0x2E66);  // 0.0999755859375
  EXPECT_EQ(f16_bits_to_double(0x2E66), 0.0999755859375);
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1023.0, -24)), 0x03FF);
  EXPECT_EQ(double_to_f16_bits(-0.0), 0x8000);
}

TEST(CpuHostFloat, F16TiesOverflowSubnormalsNaN) {
  EXPECT_EQ(double_to_f16_bits(1.0 + std::ldexp(1.0, -11)), 0x3C00);      // tie: even
  EXPECT_EQ(double_to_f16_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);  // tie: even
  const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  EXPECT_EQ(static_cast<double>(static_cast<float>(above_tie)), 1.0 + std::ldexp(1.0, -11));
  EXPECT_EQ(double_to_f16_bits(above_tie), 0x3C01);  // no double rounding through float
  EXPECT_EQ(double_to_f16_bits(65519.99), 0x7BFF);
  EXPECT_EQ(double_to_f16_bits(65520.0), 0x7C00);  // 65504 + half ulp ties to even: inf
  EXPECT_EQ(double_to_f16_bits(-65520.0), 0xFC00);
  EXPECT_EQ(double_to_f16_bits(1e10), 0x7C00);
  EXPECT_EQ(double_to_f16_bits(kInf), 0x7C00);
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -25)), 0x0000);  // tie 0|1: even
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -25) * 1.0000001), 0x0001);
  EXPECT_EQ(double_to_f16_bits(std::ldexp(3.0, -25)), 0x0002);     // tie 1|2: even
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1023.5, -24)), 0x0400);  // up into the normals
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -40)), 0x0000);
  EXPECT_EQ(double_to_f16_bits(-std::ldexp(1.0, -40)), 0x8000);
  EXPECT_TRUE(f16_is_nan(double_to_f16_bits(kNaN)));
  EXPECT_TRUE(std::isnan(f16_bits_to_double(0x7E00)));
  EXPECT_EQ(f16_bits_to_double(0xFC00), -kInf);
}

// Every bit pattern decodes to a value that encodes back to itself (NaNs stay NaN), and every
// midpoint between neighbours rounds to the even neighbour while a hair off it rounds to the near
// one.
template <typename Enc, typename Dec>
void exhaustive(Enc enc, Dec dec, uint16_t inf_bits, bool (*is_nan)(uint16_t)) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const double v = dec(bits);
    if (is_nan(bits)) {
      ASSERT_TRUE(std::isnan(v)) << b;
      ASSERT_TRUE(is_nan(enc(v))) << b;
      continue;
    }
    ASSERT_EQ(enc(v), bits) << b;
  }
  for (uint32_t b = 0; b + 1 < inf_bits; ++b) {  // positive finite neighbours b, b + 1
    const double lo = dec(static_cast<uint16_t>(b));
    const double hi = dec(static_cast<uint16_t>(b + 1));
    const double mid = lo + (hi - lo) / 2;  // exact in double
    const uint16_t even = (b % 2 == 0) ? static_cast<uint16_t>(b) : static_cast<uint16_t>(b + 1);
    ASSERT_EQ(enc(mid), even) << b;
    ASSERT_EQ(enc(-mid), even | 0x8000) << b;
    const double eps = (hi - lo) / 1024;
    ASSERT_EQ(enc(mid - eps), b) << b;
    ASSERT_EQ(enc(mid + eps), b + 1) << b;
  }
}

TEST(CpuHostFloat, Bf16ExhaustiveRoundTripAndMidpoints) {
  exhaustive(double_to_bf16_bits, bf16_bits_to_double, 0x7F80, bf16_is_nan);
}

TEST(CpuHostFloat, F16ExhaustiveRoundTripAndMidpoints) {
  exhaustive(double_to_f16_bits, f16_bits_to_double, 0x7C00, f16_is_nan);
}

TEST(CpuHostFloat, F32IsOneRounding) {
  EXPECT_EQ(double_to_f32(0.1), 0.1f);
  EXPECT_EQ(double_to_f32(1.0 + std::ldexp(1.0, -24)), 1.0f);  // tie: even
  EXPECT_EQ(double_to_f32(1.0 + 3 * std::ldexp(1.0, -24)), 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(double_to_f32(1e39), std::numeric_limits<float>::infinity());
  EXPECT_EQ(double_to_f32(std::ldexp(1.0, -149)), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(double_to_f32(std::ldexp(1.0, -150)), 0.0f);
  EXPECT_TRUE(std::isnan(double_to_f32(kNaN)));
}

TEST(CpuHostFloat, RoundToDtype) {
  EXPECT_EQ(round_to_dtype(0.1, DType::kFloat32), static_cast<double>(0.1f));
  EXPECT_EQ(round_to_dtype(0.1, DType::kFloat16), 0.0999755859375);
  EXPECT_EQ(round_to_dtype(0.1, DType::kBFloat16), 0.10009765625);
  EXPECT_EQ(round_to_dtype(65520.0, DType::kFloat16), kInf);
  EXPECT_TRUE(std::isnan(round_to_dtype(1.0, DType::kInt32)));
}

TEST(CpuHostFloat, UlpOfPowersOfTwoAndSubnormals) {
  EXPECT_EQ(ulp_of(1.0, DType::kFloat32), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(2.0, DType::kFloat32), std::ldexp(1.0, -22));
  EXPECT_EQ(ulp_of(0.75, DType::kFloat32), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(-1.0, DType::kFloat32), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(1.0, DType::kBFloat16), std::ldexp(1.0, -7));
  EXPECT_EQ(ulp_of(256.0, DType::kBFloat16), 2.0);
  EXPECT_EQ(ulp_of(1.0, DType::kFloat16), std::ldexp(1.0, -10));
  EXPECT_EQ(ulp_of(1024.0, DType::kFloat16), 1.0);
  EXPECT_EQ(ulp_of(65504.0, DType::kFloat16), 32.0);
  EXPECT_EQ(ulp_of(1e6, DType::kFloat16), 32.0);  // beyond max: the top binade's spacing
  EXPECT_EQ(ulp_of(0.0, DType::kFloat16), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(std::ldexp(1.0, -20), DType::kFloat16), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(std::ldexp(1.0, -14), DType::kFloat16), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(std::ldexp(1.0, -13), DType::kFloat16), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(0.0, DType::kBFloat16), std::ldexp(1.0, -133));
  EXPECT_EQ(ulp_of(0.0, DType::kFloat32), std::ldexp(1.0, -149));
  EXPECT_EQ(ulp_of(kInf, DType::kFloat32), kInf);
  EXPECT_TRUE(std::isnan(ulp_of(kNaN, DType::kFloat32)));
  EXPECT_TRUE(std::isnan(ulp_of(1.0, DType::kInt64)));
}

TEST(CpuHostFloat, RoundingErrorWithinHalfUlp) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-30, 15);
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int k = 0; k < 20000; ++k) {
      const double v = std::ldexp(mant(rng), expo(rng));
      const double r = round_to_dtype(v, dt);
      ASSERT_LE(std::fabs(r - v), ulp_of(v, dt) / 2) << v << " " << static_cast<int>(dt);
    }
  }
}

}  // namespace
}  // namespace ropenorm::ref
