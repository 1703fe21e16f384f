// Adversarial layouts and values for rms_norm, add_rms_norm and rope, each checked against the
// float64 oracle through the shared case runners (outputs poisoned before the call, every element
// compared, bytes outside the views checked untouched): misaligned storage offsets on every dtype
// and path, row strides that break vector alignment, f32 residuals on misaligned rows, odd head
// counts in packed QKV buffers, fp16 values whose squares overflow fp16, subnormal inputs, zero
// rows at the smallest eps and tiny rows at the largest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "gpu_util.h"
#include "verify/rms_norm_case.h"
#include "verify/rope_case.h"

namespace ropenorm {
namespace {

using verify::Fill;
using verify::RmsNormCase;
using verify::RopeCase;
using verify::RopeLayout;

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

int64_t rows_for(int64_t n) { return n >= 65536 ? 3 : (n >= 4095 ? 9 : 67); }

// Every y, residual_out and rstd element finite (a poisoned element left unwritten is NaN).
void expect_finite(const RmsNormCase& c, const verify::RmsNormOutcome& out) {
  int64_t bad_y = 0, bad_res = 0, bad_rstd = 0;
  for (int64_t i = 0; i < out.y_out.numel(); ++i) bad_y += !std::isfinite(out.y_out.get(i));
  for (int64_t i = 0; c.fused && i < out.residual_out_host.numel(); ++i) {
    bad_res += !std::isfinite(out.residual_out_host.get(i));
  }
  for (int64_t i = 0; c.save_rstd && i < out.rstd_out.numel(); ++i) {
    bad_rstd += !std::isfinite(out.rstd_out.get(i));
  }
  EXPECT_EQ(out.y_out.numel(), c.m * c.n) << verify::describe(c);
  EXPECT_EQ(bad_y, 0) << verify::describe(c) << ": y elements NaN/inf";
  EXPECT_EQ(bad_res, 0) << verify::describe(c) << ": residual_out elements NaN/inf";
  EXPECT_EQ(bad_rstd, 0) << verify::describe(c) << ": rstd elements NaN/inf";
}

verify::RmsNormOutcome expect_pass(const RmsNormCase& c, const verify::RmsNormInputs& in) {
  auto out = verify::run_case(c, in);
  EXPECT_TRUE(out.status.ok()) << verify::describe(c) << ": " << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
  if (out.status.ok()) expect_finite(c, out);
  return out;
}

verify::RmsNormOutcome expect_pass(const RmsNormCase& c) {
  return expect_pass(c, verify::make_inputs(c));
}

void expect_rope_pass(const RopeCase& c) {
  const auto in = verify::make_inputs(c);
  const auto out = verify::run_case(c, in);
  EXPECT_TRUE(out.status.ok()) << verify::describe(c) << ": " << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
  EXPECT_EQ(out.q.count, c.tokens() * c.hq * c.rot()) << verify::describe(c);
  if (c.has_k) {
    EXPECT_EQ(out.k.count, c.tokens() * c.hk * c.rot()) << verify::describe(c);
  }
}

// Storage offset of one element: every pointer (x, residual, weight, y, residual_out) is off
// the vector alignment, for every dtype, both ops, vector-friendly and odd widths.
TEST(GpuAdversarial, StorageOffsetOneEveryDtypeAndPath) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {64, 4096, 4095, 65536}) {
      for (bool fused : {false, true}) {
        RmsNormCase c;
        c.m = rows_for(n);
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = dt;
        c.fused = fused;
        c.storage_offset = 1;
        c.seed = seed++;
        expect_pass(c);
      }
    }
  }
}

// Row strides that are not a multiple of any vector width (n + 1, n + 3, n + 5).
TEST(GpuAdversarial, RowStrideNotVectorMultiple) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 2000;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {64, 4096, 4095}) {
      for (int64_t pad : {1, 3, 5}) {
        for (bool fused : {false, true}) {
          RmsNormCase c;
          c.m = rows_for(n);
          c.n = n;
          c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = dt;
          c.fused = fused;
          c.pitch_pad = pad;
          c.seed = seed++;
          expect_pass(c);
        }
      }
    }
  }
}

// Fused add with an f32 residual (mixed element sizes) on misaligned rows: at x's element
// phase (vectorised, rows peeled at their phase) and at another phase (the scalar path).
TEST(GpuAdversarial, FusedF32ResidualStorageOffsetOne) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 3000;
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (int64_t n : {64, 4096, 4095, 65536}) {
      for (int64_t pad : {0, 3}) {
        RmsNormCase c;
        c.m = rows_for(n);
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = dt;
        c.res_dtype = DType::kFloat32;
        c.fused = true;
        c.storage_offset = 1;
        c.pitch_pad = pad;
        c.seed = seed++;
        expect_pass(c);
        c.in_place = true;
        c.seed = seed++;
        expect_pass(c);
        // Residual rows at another element phase than x's (16-bit x, f32 residual: phases
        // 1 and 2 of 4): the scalar path.
        c.residual_offset = 2;
        c.seed = seed++;
        expect_pass(c);
        c.in_place = false;
        c.seed = seed++;
        expect_pass(c);
      }
    }
  }
}

// fp16 rows with every element near the top (60000 .. 65504): x^2 overflows fp16, so the sum of
// squares must be accumulated in fp32; y and rstd must be finite and within tolerance.
TEST(GpuAdversarial, Fp16NearMaxDoesNotOverflow) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 4000;
  for (int64_t n : {64, 4096, 4095, 65536}) {
    for (bool fused : {false, true}) {
      RmsNormCase c;
      c.m = rows_for(n);
      c.n = n;
      c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = DType::kFloat16;
      c.fused = fused;
      c.fill = Fill::kNearMax;
      c.seed = seed++;
      auto in = verify::make_inputs(c);
      int64_t low = 0;
      for (int64_t i = 0; i < in.x.numel(); ++i) low += std::fabs(in.x.get(i)) < 58000.0;
      ASSERT_EQ(low, 0) << "near-max fill produced values below 58000";
      if (fused) {
        // Residual zero, so the normalised sum is the near-max x itself.
        for (int64_t i = 0; i < in.residual.numel(); ++i) in.residual.set(i, 0.0);
      }
      expect_pass(c, in);
      c.storage_offset = 1;
      c.seed = seed++;
      expect_pass(c, in);
    }
  }
}

// Subnormal and smallest-normal inputs in every dtype, at the default, smallest and largest eps.
TEST(GpuAdversarial, SubnormalInputs) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 5000;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {64, 4096, 4095}) {
      for (float eps : {1e-6f, 1e-12f, 1e-2f}) {
        RmsNormCase c;
        c.m = rows_for(n);
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = dt;
        c.fill = Fill::kSubnormal;
        c.params.eps = eps;
        c.seed = seed++;
        const auto in = verify::make_inputs(c);
        int64_t subnormal = 0;
        const double smallest_normal =
            dt == DType::kFloat16 ? 6.103515625e-05 : 1.1754943508222875e-38;
        for (int64_t i = 0; i < in.x.numel(); ++i) {
          const double v = std::fabs(in.x.get(i));
          subnormal += v > 0 && v < smallest_normal;
        }
        EXPECT_GT(subnormal, 0) << verify::describe(c) << ": no subnormal input drawn";
        expect_pass(c, in);
      }
    }
  }
}

// All-zero rows at eps = 1e-12: y exactly 0 and rstd = 1 / sqrt(eps).
TEST(GpuAdversarial, ZeroRowsSmallestEps) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 6000;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {64, 4096, 4095, 65536}) {
      for (bool fused : {false, true}) {
        RmsNormCase c;
        c.m = rows_for(n);
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = dt;
        c.fused = fused;
        c.fill = Fill::kZero;
        c.params.eps = 1e-12f;
        c.storage_offset = fused ? 1 : 0;
        c.seed = seed++;
        const auto out = expect_pass(c);
        if (!out.status.ok()) continue;
        int64_t nonzero = 0;
        for (int64_t i = 0; i < out.y_out.numel(); ++i) nonzero += out.y_out.get(i) != 0.0;
        EXPECT_EQ(nonzero, 0) << verify::describe(c) << ": y not exactly zero";
        const double want = 1.0 / std::sqrt(static_cast<double>(c.params.eps));
        for (int64_t r = 0; r < out.rstd_out.numel(); ++r) {
          EXPECT_NEAR(out.rstd_out.get(r), want, want * 1e-6)
              << verify::describe(c) << " row " << r;
        }
      }
    }
  }
}

// Tiny rows (|x| ~ 1e-3, mean(x^2) ~ 1e-6) at eps = 1e-2: eps dominates, y ~ 10 * x * w.
TEST(GpuAdversarial, TinyValuesLargestEps) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 7000;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {64, 4096, 4095}) {
      for (bool fused : {false, true}) {
        RmsNormCase c;
        c.m = rows_for(n);
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = dt;
        c.fused = fused;
        c.params.eps = 1e-2f;
        c.seed = seed++;
        auto in = verify::make_inputs(c);
        for (int64_t i = 0; i < in.x.numel(); ++i) in.x.set(i, in.x.get(i) * 1e-3);
        for (int64_t i = 0; fused && i < in.residual.numel(); ++i) {
          in.residual.set(i, in.residual.get(i) * 1e-3);
        }
        const auto out = expect_pass(c, in);
        if (!out.status.ok()) continue;
        for (int64_t r = 0; r < out.rstd_out.numel(); ++r) {
          // rstd = 1 / sqrt(mean(s^2) + 1e-2), with mean(s^2) < 1e-4 here.
          EXPECT_GT(out.rstd_out.get(r), 9.9) << verify::describe(c) << " row " << r;
          EXPECT_LE(out.rstd_out.get(r), 10.0001) << verify::describe(c) << " row " << r;
        }
      }
    }
  }
}

// q and k as views of a packed QKV buffer with odd head counts (rows of (Hq + 2 * Hk) * D
// elements), and a q alone with k absent; aligned and misaligned, both styles, every dtype.
TEST(GpuAdversarial, RopePackedOddHeadCounts) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 8000;
  struct Heads {
    int64_t hq, hk;
    bool has_k;
  };
  for (Heads hs : {Heads{7, 3, true}, Heads{5, 0, false}, Heads{3, 1, true}}) {
    for (DType dt : kFloatTypes) {
      for (int64_t d : {64, 128}) {
        for (int64_t off : {0, 1}) {
          for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
            RopeCase c;
            c.seq = 37;
            c.hq = hs.hq;
            c.hk = hs.hk;
            c.has_k = hs.has_k;
            c.head_dim = d;
            c.dtype = dt;
            c.style = style;
            c.layout = RopeLayout::kPackedQkv;
            c.table_rows = 1024;
            c.storage_offset = off;
            c.seed = seed++;
            expect_rope_pass(c);
            c.batch = 3;
            c.seq = 11;
            c.rotary_dim = d / 2;
            c.in_place = true;
            c.seed = seed++;
            expect_rope_pass(c);
          }
        }
      }
    }
  }
}

// Odd head counts in separate buffers with a storage offset of one element.
TEST(GpuAdversarial, RopeSeparateOddHeadsMisaligned) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 9000;
  for (DType dt : kFloatTypes) {
    for (bool has_k : {true, false}) {
      RopeCase c;
      c.seq = 29;
      c.hq = 7;
      c.hk = 3;
      c.has_k = has_k;
      c.head_dim = 128;
      c.dtype = dt;
      c.storage_offset = 1;
      c.table_rows = 1024;
      c.seed = seed++;
      expect_rope_pass(c);
    }
  }
}

}  // namespace
}  // namespace ropenorm
