// Tests of the host test tensors' random fill: deterministic for a seed, prefix-stable (a longer
// tensor filled from the same generator state starts with the same values, which the batch
// invariance tests rely on), distinct chunks drawing distinct values, N(0, scale^2) moments,
// values rounded to the dtype, and the generator advanced so the next fill differs; slices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>

#include "reference/host_float.h"
#include "reference/host_tensor.h"

namespace ropenorm::ref {
namespace {

HostTensor filled(DType dt, int64_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  HostTensor t(dt, n);
  fill_normal(t, rng, scale);
  return t;
}

TEST(CpuHostTensor, FillIsDeterministicAndPrefixStable) {
  const int64_t n_short = kFillChunk + 123, n_long = 5 * kFillChunk + 7;
  const HostTensor a = filled(DType::kFloat32, n_long, 42);
  const HostTensor b = filled(DType::kFloat32, n_long, 42);
  const HostTensor s = filled(DType::kFloat32, n_short, 42);
  for (int64_t i = 0; i < n_long; ++i) ASSERT_EQ(a.bits(i), b.bits(i)) << i;
  for (int64_t i = 0; i < n_short; ++i) ASSERT_EQ(a.bits(i), s.bits(i)) << i;
  const HostTensor other = filled(DType::kFloat32, n_short, 43);
  int64_t same = 0;
  for (int64_t i = 0; i < n_short; ++i) same += a.bits(i) == other.bits(i);
  EXPECT_LT(same, 16);
}

TEST(CpuHostTensor, ChunksDrawDistinctValues) {
  // fp32 values of N(0, 1): a repeat of a whole chunk's start would show as many equal values.
  const HostTensor t = filled(DType::kFloat32, 4 * kFillChunk, 7);
  std::set<uint64_t> firsts;
  for (int64_t c = 0; c < 4; ++c) {
    for (int64_t i = 0; i < 64; ++i) firsts.insert(t.bits(c * kFillChunk + i));
  }
  EXPECT_GT(firsts.size(), 250u);
}

TEST(CpuHostTensor, FillMomentsAndRounding) {
  const int64_t n = 3 * kFillChunk + 11;
  const double scale = 0.5;
  const HostTensor t = filled(DType::kBFloat16, n, 9, scale);
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = t.get(i);
    ASSERT_EQ(round_to_dtype(v, DType::kBFloat16), v) << i;
    sum += v;
    sum_sq += v * v;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 * scale / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(var, scale * scale, 0.02 * scale * scale);
}

TEST(CpuHostTensor, GeneratorAdvancesBetweenFills) {
  std::mt19937_64 rng(5);
  HostTensor a(DType::kFloat32, 1000), b(DType::kFloat32, 1000);
  fill_normal(a, rng);
  fill_normal(b, rng);
  int64_t same = 0;
  for (int64_t i = 0; i < 1000; ++i) same += a.bits(i) == b.bits(i);
  EXPECT_LT(same, 4);
}

TEST(CpuHostTensor, SliceCopiesTheNamedElements) {
  const HostTensor t = filled(DType::kBFloat16, 100, 3);
  const HostTensor s = slice(t, 40, 25);
  EXPECT_EQ(s.dtype, DType::kBFloat16);
  ASSERT_EQ(s.numel(), 25);
  for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(s.bits(i), t.bits(40 + i)) << i;
}

}  // namespace
}  // namespace ropenorm::ref
