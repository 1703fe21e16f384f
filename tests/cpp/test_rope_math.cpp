// Host checks of the RoPE kernel formula (rope_math.cuh, compiled for the host here) and of the
// verification case builder: Kahan's difference of products stays within 2 fp32 ulps even when
// the products cancel; the case inputs (positions, tables, gathered rows) are what the oracle
// assumes; the error measure subtracts exactly the allowance it is given.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "cuda/rope/rope_math.cuh"
#include "reference/host_float.h"
#include "ropenorm/rope_cache.h"
#include "verify/rope_case.h"

namespace ropenorm {
namespace {

double ulps_f32(float got, double exact) {
  const double rounded = ref::round_to_dtype(exact, DType::kFloat32);
  return std::fabs(static_cast<double>(got) - exact) / ref::ulp_of(rounded, DType::kFloat32);
}

TEST(CpuRopeMath, DifferenceOfProductsWithinTwoUlps) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ang(-3.2f, 3.2f);
  double worst = 0.0;
  for (int n = 0; n < 200000; ++n) {
    const float a = nd(rng), b = nd(rng);
    const float t = ang(rng);
    const float c = std::cos(t), s = std::sin(t);
    float ya, yb;
    cuda::rope_rotate_pair(a, b, c, s, &ya, &yb);
    const double ea = static_cast<double>(a) * c - static_cast<double>(b) * s;  // exact in double
    const double eb = static_cast<double>(a) * s + static_cast<double>(b) * c;
    if (ea != 0.0) worst = std::max(worst, ulps_f32(ya, ea));
    if (eb != 0.0) worst = std::max(worst, ulps_f32(yb, eb));
  }
  EXPECT_LE(worst, 2.0);
}

TEST(CpuRopeMath, DifferenceOfProductsUnderCancellation) {
  // a * c and b * s nearly equal: a plain fp32 evaluation loses most digits, Kahan's does not.
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  double worst = 0.0;
  int cancelling = 0;
  for (int n = 0; n < 200000; ++n) {
    const float a = u(rng), c = u(rng), s = u(rng);
    const float b = static_cast<float>(static_cast<double>(a) * c / s);  // b * s ~ a * c
    const double exact = static_cast<double>(a) * c - static_cast<double>(b) * s;
    if (exact == 0.0) continue;
    const float y = cuda::rope_diff_of_products(a, c, b, s);
    worst = std::max(worst, ulps_f32(y, exact));
    if (std::fabs(exact) < 1e-6 * std::fabs(static_cast<double>(a) * c)) ++cancelling;
  }
  EXPECT_GT(cancelling, 1000);
  EXPECT_LE(worst, 2.0);
}

TEST(CpuRopeMath, RotationMatchesTheFormula) {
  float ya, yb;
  cuda::rope_rotate_pair(1.0f, 0.0f, 0.0f, 1.0f, &ya, &yb);  // 90 degrees
  EXPECT_EQ(ya, 0.0f);
  EXPECT_EQ(yb, 1.0f);
  cuda::rope_rotate_pair(3.0f, 4.0f, 0.6f, 0.8f, &ya, &yb);
  EXPECT_NEAR(ya, 3.0 * 0.6 - 4.0 * 0.8, 1e-6);
  EXPECT_NEAR(yb, 3.0 * 0.8 + 4.0 * 0.6, 1e-6);
  cuda::rope_rotate_pair(3.0f, 4.0f, 0.6f, -0.8f, &ya, &yb);  // inverse: s negated
  EXPECT_NEAR(ya, 3.0 * 0.6 + 4.0 * 0.8, 1e-6);
  EXPECT_NEAR(yb, -3.0 * 0.8 + 4.0 * 0.6, 1e-6);
}

TEST(CpuRopeCase, ErrorStatsSubtractTheAllowance) {
  verify::RopeErrorStats e;
  e.add_allowing(1.0, 1.0, DType::kBFloat16, 0, DType::kBFloat16, 0.0);
  EXPECT_EQ(e.max_ulp, 0.0);
  EXPECT_EQ(e.exact, 1);
  const double ulp = ref::ulp_of(1.0, DType::kBFloat16);
  e.add_allowing(1.0 + 2 * ulp, 1.0, DType::kBFloat16, 1, DType::kBFloat16, 0.0);
  EXPECT_DOUBLE_EQ(e.max_ulp, 2.0);
  verify::RopeErrorStats f;
  f.add_allowing(1.0 + 2 * ulp, 1.0, DType::kBFloat16, 0, DType::kBFloat16, 1.5 * ulp);
  EXPECT_DOUBLE_EQ(f.max_ulp, 0.5);
  f.add_allowing(std::nan(""), 1.0, DType::kBFloat16, 1, DType::kBFloat16, 1.0);
  EXPECT_TRUE(std::isinf(f.max_ulp));
  EXPECT_EQ(f.worst_index, 1);
}

TEST(CpuRopeCase, ExplicitPositionsInRangeAndNonMonotone) {
  verify::RopeCase c;
  c.batch = 3;
  c.seq = 50;
  c.table_rows = 777;
  c.head_dim = 16;
  const auto in = verify::make_inputs(c);
  ASSERT_EQ(static_cast<int64_t>(in.positions.size()), 150);
  EXPECT_EQ(in.positions.front(), 776);  // the table's last row is used
  EXPECT_EQ(in.positions.back(), 0);
  int descents = 0;
  for (size_t i = 0; i < in.positions.size(); ++i) {
    EXPECT_GE(in.positions[i], 0);
    EXPECT_LT(in.positions[i], 777);
    if (i > 0 && in.positions[i] < in.positions[i - 1]) ++descents;
  }
  EXPECT_GT(descents, 10);
  EXPECT_EQ(in.q.numel(), 150 * 8 * 16);
  EXPECT_EQ(in.k.numel(), 150 * 1 * 16);
  EXPECT_EQ(in.cache.numel(), 777 * 16);
}

TEST(CpuRopeCase, ArangeWithSequenceOffsetsStaysInTheTable) {
  for (uint64_t seed = 1; seed < 20; ++seed) {
    verify::RopeCase c;
    c.batch = 4;
    c.seq = 30;
    c.table_rows = 100;
    c.head_dim = 8;
    c.pos_kind = verify::RopePosKind::kArangeSeqOffs;
    c.seed = seed;
    const auto in = verify::make_inputs(c);
    ASSERT_EQ(in.seq_offsets.size(), 4u);
    int64_t hi = 0;
    for (int64_t t = 0; t < 120; ++t) {
      EXPECT_EQ(in.positions[t], t % 30 + in.offset + in.seq_offsets[t / 30]);
      EXPECT_GE(in.positions[t], 0);
      EXPECT_LT(in.positions[t], 100);
      hi = std::max(hi, in.positions[t]);
    }
    EXPECT_EQ(hi, 99);
  }
}

TEST(CpuRopeCase, HfTablesDuplicateTheCacheHalves) {
  verify::RopeCase c;
  c.seq = 20;
  c.head_dim = 12;
  c.rotary_dim = 8;
  c.table_rows = 64;
  c.cs_dtype = DType::kBFloat16;
  c.source = CosSinKind::kHfCosSin;
  const auto in = verify::make_inputs(c);
  std::vector<uint16_t> cache(64 * 8);
  RopeConfig cfg;
  cfg.rotary_dim = 8;
  ASSERT_TRUE(build_rope_cache(cfg, 64, DType::kBFloat16, cache.data()).ok());
  ASSERT_EQ(in.cos.numel(), 64 * 8);
  for (int64_t p = 0; p < 64; ++p) {
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(in.cos.bits(p * 8 + i), cache[p * 8 + i]);
      EXPECT_EQ(in.cos.bits(p * 8 + 4 + i), cache[p * 8 + i]);
      EXPECT_EQ(in.sin.bits(p * 8 + i), cache[p * 8 + 4 + i]);
      EXPECT_EQ(in.sin.bits(p * 8 + 4 + i), cache[p * 8 + 4 + i]);
    }
  }
  // Gathered: row t is the table row of token t's position.
  c.source = CosSinKind::kHfCosSinGathered;
  const auto g = verify::make_inputs(c);
  ASSERT_EQ(g.cos.numel(), 20 * 8);
  for (int64_t t = 0; t < 20; ++t) {
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(g.cos.bits(t * 8 + j), in.cos.bits(g.positions[t] * 8 + j));
      EXPECT_EQ(g.sin.bits(t * 8 + j), in.sin.bits(g.positions[t] * 8 + j));
    }
  }
  // Broadcast over B = 4 sequences of 5: one row per sequence index, from the first sequence's
  // positions, and token b * 5 + s reads row s.
  c.batch = 4;
  c.seq = 5;
  c.gathered_broadcast = true;
  const auto bc = verify::make_inputs(c);
  ASSERT_EQ(c.gathered_rows(), 5);
  ASSERT_EQ(bc.cos.numel(), 5 * 8);
  for (int64_t s = 0; s < 5; ++s) {
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(bc.cos.bits(s * 8 + j), in.cos.bits(bc.positions[s] * 8 + j));
      EXPECT_EQ(bc.sin.bits(s * 8 + j), in.sin.bits(bc.positions[s] * 8 + j));
    }
  }
  EXPECT_EQ(c.gathered_row(3 * 5 + 2), 2);
  c.batch = 0;  // one sequence: the flag changes nothing
  EXPECT_EQ(c.gathered_rows(), 5);
  EXPECT_EQ(c.gathered_row(4), 4);
}

TEST(CpuRopeCase, LargeTablesBuildTheRowsInUse) {
  verify::RopeCase c;
  c.seq = 9;
  c.head_dim = 64;
  c.table_rows = (int64_t{1} << 20) + 64;
  c.theta = 500000.0;
  c.cs_dtype = DType::kBFloat16;
  const auto in = verify::make_inputs(c);
  RopeConfig cfg;
  cfg.rotary_dim = 64;
  cfg.theta = 500000.0;
  std::vector<uint16_t> row(64);
  const std::set<int64_t> used(in.positions.begin(), in.positions.end());
  for (int64_t p : used) {
    ASSERT_TRUE(build_rope_cache_range(cfg, p, 1, DType::kBFloat16, row.data()).ok());
    EXPECT_EQ(std::memcmp(row.data(), in.cache.bytes.data() + p * 64 * 2, 64 * 2), 0) << p;
  }
  // A row nobody uses is NaN, so reading a wrong row cannot pass.
  int64_t unused = 1;
  while (used.count(unused)) ++unused;
  EXPECT_TRUE(std::isnan(in.cache.get(unused * 64)));
}

TEST(CpuRopeCase, InvFreqIsHuggingFacesFloat32) {
  verify::RopeCase c;
  c.seq = 3;
  c.head_dim = 96;
  c.rotary_dim = 48;
  c.source = CosSinKind::kInvFreq;
  const auto in = verify::make_inputs(c);
  RopeConfig cfg;
  cfg.rotary_dim = 48;
  std::vector<float> inv;
  double scaling = 0;
  ASSERT_TRUE(rope_inv_freq_f32(cfg, &inv, &scaling).ok());
  EXPECT_EQ(in.inv_freq, inv);
}

TEST(CpuRopeCase, DescribeNamesTheCase) {
  verify::RopeCase c;
  c.batch = 2;
  c.seq = 7;
  c.layout = verify::RopeLayout::kPackedQkv;
  c.storage_offset = 1;
  c.in_place = true;
  const std::string d = verify::describe(c);
  for (const char* part : {"rope bf16", "B=2 S=7", "Hq=8", "Hk=1", "D=128", "neox", "cache:f32",
                           "packed", "off=1", "in-place"}) {
    EXPECT_NE(d.find(part), std::string::npos) << d << " lacks " << part;
  }
}

}  // namespace
}  // namespace ropenorm
