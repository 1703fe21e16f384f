// GPU tests of rms_norm and add_rms_norm against the float64 oracle: the failure matrix of
// widths, row counts, dtypes, special rows, eps bounds, strided and misaligned views, in-place
// forms; plus row isolation and batch invariance (bitwise).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rms_norm_plan.h"
#include "cuda/common/launch.h"
#include "gpu_util.h"
#include "verify/rms_norm_case.h"

namespace ropenorm {
namespace {

using verify::Fill;
using verify::RmsNormCase;

void expect_pass(const RmsNormCase& c) {
  const auto in = verify::make_inputs(c);
  const auto out = verify::run_case(c, in);
  EXPECT_TRUE(out.status.ok()) << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
}

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const int64_t kWidths[] = {1,    2,    3,    31,   70,    127,   255,   256,   769,
                           3584, 4095, 5120, 8199, 16384, 65536, 65537, 262144};

int64_t rows_for(int64_t n) {
  if (n <= 256) return 989;
  if (n <= 8199) return 19;
  return 3;
}

TEST(GpuRmsNorm, WidthMatrixEveryDtype) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (int64_t n : kWidths) {
      RmsNormCase c;
      c.m = rows_for(n);
      c.n = n;
      c.x_dtype = c.w_dtype = c.y_dtype = dt;
      c.seed = seed++;
      expect_pass(c);
    }
  }
}

TEST(GpuRmsNorm, RowCounts) {
  ROPENORM_REQUIRE_GPU();
  for (int64_t m : {1, 7, 19, 989, 65537}) {
    for (int64_t n : {64, 4096}) {
      if (m == 65537 && n == 4096) continue;  // the large tier covers big M at big N
      RmsNormCase c;
      c.m = m;
      c.n = n;
      c.seed = static_cast<uint64_t>(m * 31 + n);
      expect_pass(c);
    }
  }
}

TEST(GpuRmsNorm, MixedDtypesNoWeightOffsetRounding) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType x : kFloatTypes) {
    for (DType w : kFloatTypes) {
      for (DType y : kFloatTypes) {
        for (int64_t n : {70, 4096, 4095}) {
          RmsNormCase c;
          c.m = 9;  // 4095 columns: every 16-byte phase of 16-bit rows
          c.n = n;
          c.x_dtype = x;
          c.w_dtype = w;
          c.y_dtype = y;
          c.seed = seed++;
          expect_pass(c);
          c.params.rounding = Rounding::kHfLlama;
          expect_pass(c);
          c.params.rounding = Rounding::kExact;
          c.params.weight_offset = 1.0f;  // Gemma
          expect_pass(c);
        }
      }
    }
    RmsNormCase c;
    c.m = 19;
    c.n = 3584;
    c.x_dtype = c.y_dtype = x;
    c.has_weight = false;
    expect_pass(c);
    c.save_rstd = false;
    expect_pass(c);
  }
}

TEST(GpuRmsNorm, SpecialRows) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (Fill f : {Fill::kZero, Fill::kConstant, Fill::kAlternating, Fill::kExtreme, Fill::kNearMax,
                   Fill::kSubnormal}) {
      for (int64_t n : {31, 4096, 5120}) {
        RmsNormCase c;
        c.m = 7;
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = dt;
        c.fill = f;
        c.seed = static_cast<uint64_t>(n) * 7 + static_cast<uint64_t>(f);
        expect_pass(c);
        c.params.eps = 1e-12f;
        expect_pass(c);
        c.params.eps = 1e-2f;
        expect_pass(c);
      }
    }
  }
}

TEST(GpuRmsNorm, ConstantRowGivesWeight) {
  ROPENORM_REQUIRE_GPU();
  RmsNormCase c;
  c.m = 5;
  c.n = 4096;
  c.x_dtype = c.w_dtype = c.y_dtype = DType::kFloat32;
  c.fill = Fill::kConstant;
  c.params.eps = 1e-12f;
  const auto in = verify::make_inputs(c);
  const auto out = verify::run_case(c, in);
  ASSERT_TRUE(out.passed) << out.summary;
  for (int64_t r = 0; r < c.m; ++r) {
    const double sign = in.x.get(r * c.n) < 0 ? -1.0 : 1.0;
    for (int64_t j = 0; j < c.n; ++j) {
      EXPECT_NEAR(out.y_out.get(r * c.n + j), sign * in.weight.get(j), 1e-5) << r << "," << j;
    }
  }
}

TEST(GpuRmsNorm, StridedMisalignedAnd3dViews) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 500;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {8, 70, 4096, 4095, 8192, 65536}) {
      for (int pad : {0, 3, 8}) {
        for (int off : {0, 1}) {
          RmsNormCase c;
          c.m = n > 8192 ? 3 : 19;
          c.n = n;
          c.x_dtype = c.w_dtype = c.y_dtype = dt;
          c.pitch_pad = pad;
          c.storage_offset = off;
          c.seed = seed++;
          expect_pass(c);
        }
      }
      RmsNormCase c;
      c.m = 12;
      c.n = n;
      c.x_dtype = c.w_dtype = c.y_dtype = dt;
      c.batch = 3;  // [3, 4, n] stored sequence-major: leading dims do not collapse
      c.pitch_pad = 8;
      c.seed = seed++;
      expect_pass(c);
    }
  }
}

TEST(GpuRmsNorm, InPlace) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t n : {31, 4096, 4095, 65536}) {
      RmsNormCase c;
      c.m = 7;
      c.n = n;
      c.x_dtype = c.w_dtype = c.y_dtype = dt;
      c.in_place = true;
      c.seed = static_cast<uint64_t>(n) + 9;
      expect_pass(c);
    }
  }
}

TEST(GpuAddRmsNorm, Matrix) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 900;
  for (DType dt : kFloatTypes) {
    for (DType res : {dt, DType::kFloat32}) {
      for (int64_t n : {1, 3, 70, 256, 4095, 4096, 8199, 65536}) {
        for (bool in_place : {false, true}) {
          RmsNormCase c;
          c.fused = true;
          c.m = rows_for(n);
          c.n = n;
          c.x_dtype = c.w_dtype = c.y_dtype = dt;
          c.res_dtype = res;
          c.in_place = in_place;
          c.seed = seed++;
          expect_pass(c);
          c.params.rounding = Rounding::kHfLlama;
          expect_pass(c);
        }
      }
      RmsNormCase c;
      c.fused = true;
      c.m = 19;
      c.n = 4096;
      c.x_dtype = c.y_dtype = dt;
      c.res_dtype = res;
      c.w_dtype = DType::kFloat32;
      c.pitch_pad = 3;
      c.storage_offset = 1;
      c.seed = seed++;
      expect_pass(c);
      c.fill = Fill::kZero;
      expect_pass(c);
    }
  }
}

// Changing row j must not change any other row, bit for bit.
TEST(GpuRmsNorm, RowIsolation) {
  ROPENORM_REQUIRE_GPU();
  for (bool fused : {false, true}) {
    for (int64_t n : {64, 4096, 4095, 65536}) {
      RmsNormCase c;
      c.fused = fused;
      c.m = 9;
      c.n = n;
      c.seed = static_cast<uint64_t>(n) + (fused ? 1 : 0);
      auto in = verify::make_inputs(c);
      const auto a = verify::run_case(c, in);
      ASSERT_TRUE(a.passed) << a.summary;
      const int64_t j = 4;
      for (int64_t k = 0; k < n; ++k) in.x.set(j * n + k, in.x.get(j * n + k) * -3.0 + 0.5);
      const auto b = verify::run_case(c, in);
      ASSERT_TRUE(b.passed) << b.summary;
      for (int64_t r = 0; r < c.m; ++r) {
        if (r == j) continue;
        for (int64_t k = 0; k < n; ++k) {
          ASSERT_EQ(a.y_out.bits(r * n + k), b.y_out.bits(r * n + k))
              << "row " << r << " col " << k;
        }
        ASSERT_EQ(a.rstd_out.bits(r), b.rstd_out.bits(r)) << "rstd row " << r;
      }
    }
  }
}

// A row's output is bitwise the same whatever the number of rows in the call.
TEST(GpuRmsNorm, BatchInvariance) {
  ROPENORM_REQUIRE_GPU();
  for (bool fused : {false, true}) {
    for (int64_t n : {64, 4096, 4095, 8192, 65536}) {
      std::vector<std::vector<uint64_t>> first_rows;
      // With 132 SMs: 1 row takes the block path's widest split, 255 and more the middle one
      // (rows the lean kernel serves, 4096 and 8192 columns: up to 264 rows its early-weight
      // form at the many-rows split, 4096 rows its plain form at the middle split). The fused
      // add's lean rows (4096 and 8192 columns) take one plan at every M (across kernels:
      // GpuAddRmsNorm.LeanKernelMatchesDirectKernel); its rows of 4095 columns change split.
      for (int64_t m : {1, 255, 256, 4096}) {
        if (n >= 65536 && m > 256) continue;
        RmsNormCase c;
        c.fused = fused;
        c.m = m;
        c.n = n;
        c.seed = static_cast<uint64_t>(m) * 1000 + static_cast<uint64_t>(n);
        auto in = verify::make_inputs(c);
        // Row 0 (and the weight) identical across M.
        RmsNormCase c1 = c;
        c1.m = 1;
        c1.seed = 77;
        const auto in1 = verify::make_inputs(c1);
        for (int64_t k = 0; k < n; ++k) {
          in.x.set(k, in1.x.get(k));
          if (fused) in.residual.set(k, in1.residual.get(k));
          in.weight.set(k, in1.weight.get(k));
        }
        const auto out = verify::run_case(c, in);
        ASSERT_TRUE(out.passed) << out.summary;
        std::vector<uint64_t> row(n + 1);
        for (int64_t k = 0; k < n; ++k) row[k] = out.y_out.bits(k);
        row[n] = out.rstd_out.bits(0);
        first_rows.push_back(row);
      }
      for (size_t i = 1; i < first_rows.size(); ++i) {
        ASSERT_EQ(first_rows[0], first_rows[i]) << "n=" << n << " run " << i;
      }
    }
  }
}

// The block path's split follows the row count (few, middle, many rows per multiprocessor);
// its reduction is split-invariant, so the same rows planned for each of those row counts give
// the same bits, each passing the oracle: dtypes, both roundings, offsets, edge elements (4095,
// misaligned rows), mixed element sizes at one element phase (vectorised) and the scalar path (y
// at another element phase than x), the fused add.
// Rows of more than 32 virtual warps (16384 at 8 elements per vector, 2050 scalars) have one
// split at every row count; they check chunk_sum's two-level order against the oracle. Aligned
// fused rows that are not lean rows (hf_llama rounding, a 32-bit residual) planned for more than
// kMidRowsPerSm rows per SM take the block ring kernel, which must give the bits of the direct
// kernel at fewer rows; fused lean rows (4096 bf16 and 1032 columns, 8192 bf16 on the wide
// instance, f32 rows of two vectors per thread) take the lean kernel at every row count, which
// GpuAddRmsNorm.LeanKernelMatchesDirectKernel sets against the direct kernel and the ring.
TEST(GpuRmsNorm, SplitInvariance) {
  ROPENORM_REQUIRE_GPU();
  const int64_t sms = cuda::device_sm_count();
  // Both sets of split boundaries: rows that take the lean direct kernel (4096 columns at
  // 16-byte aligned offsets and pitches below, exact rounding) take its early-weight form up to
  // kLeanEarlyRowsPerSm rows per SM (1 and sms + 1 rows) and its plain form above.
  const int64_t plan_rows[] = {1,
                               sms + 1,
                               core::kLeanEarlyRowsPerSm * sms + 1,
                               core::kLeanFewRowsPerSm * sms + 1,
                               core::kMidRowsPerSm * sms + 1,
                               core::kLeanMidRowsPerSm * sms + 1};
  struct Variant {
    int64_t n;
    DType x, y;
    bool fused, hf;
    int64_t offset;
    int64_t y_offset = -1;       ///< -1: offset (the same element phase as x)
    float weight_offset = 0.0f;  ///< with exact rounding (hf_llama variants take 1)
    int64_t pitch_pad = 0;
    int64_t y_pitch_pad = -1;  ///< -1: pitch_pad
    bool f32_residual = false;
    bool in_place = false;
    int64_t m = 19;
  };
  const Variant variants[] = {
      {4096, DType::kBFloat16, DType::kBFloat16, false, false, 0},
      {4095, DType::kBFloat16, DType::kBFloat16, false, true, 0},
      {8192, DType::kBFloat16, DType::kBFloat16, false, false, 3},
      {16384, DType::kBFloat16, DType::kBFloat16, false, false, 0},
      {4096, DType::kFloat32, DType::kFloat32, false, false, 0},
      {4096, DType::kFloat16, DType::kFloat16, false, false, 8, -1, 1.0f},
      {4096, DType::kBFloat16, DType::kBFloat16, false, false, 0, -1, 0.0f, 8, 0},
      {5000, DType::kFloat16, DType::kFloat16, false, true, 1},
      {1000, DType::kBFloat16, DType::kFloat32, false, false, 1},
      {1000, DType::kBFloat16, DType::kFloat32, false, false, 1, 2},
      {2050, DType::kBFloat16, DType::kFloat32, false, false, 1, 2},
      {4096, DType::kBFloat16, DType::kBFloat16, true, false, 0},
      {4095, DType::kFloat16, DType::kFloat16, true, true, 0},
      // Aligned fused rows: the block ring from kMidRowsPerSm rows per SM on, with several rows
      // per block (600 rows, hf_llama: not lean rows), a 32-bit residual, a padded pitch; lean
      // rows take one plan at every row count (the wide instance in place, f32 rows of two
      // vectors per thread): here only the oracle checks them, LeanKernelMatchesDirectKernel
      // sets them against other kernels.
      {8192, DType::kBFloat16, DType::kBFloat16, true, true, 0, -1, 0.0f, 0, -1, false, false, 600},
      {8192, DType::kBFloat16, DType::kBFloat16, true, false, 0, -1, 0.0f, 0, -1, false, true},
      {8192, DType::kBFloat16, DType::kBFloat16, true, false, 0, -1, 0.0f, 0, -1, true, false},
      {5120, DType::kFloat16, DType::kFloat16, true, true, 8, -1, 0.0f, 8},
      {4096, DType::kFloat32, DType::kFloat32, true, false, 0, -1, 1.0f, 0, -1, false, false, 300},
      {1032, DType::kBFloat16, DType::kBFloat16, true, false, 0},
  };
  uint64_t seed = 500;
  for (const Variant& v : variants) {
    RmsNormCase c;
    c.m = v.m;
    c.n = v.n;
    c.x_dtype = c.w_dtype = c.res_dtype = v.x;
    if (v.f32_residual) c.res_dtype = DType::kFloat32;
    c.in_place = v.in_place;
    c.y_dtype = v.y;
    c.fused = v.fused;
    c.storage_offset = v.offset;
    c.y_offset = v.y_offset;
    c.pitch_pad = v.pitch_pad;
    c.y_pitch_pad = v.y_pitch_pad;
    c.params.rounding = v.hf ? Rounding::kHfLlama : Rounding::kExact;
    c.params.weight_offset = v.hf ? 1.0f : v.weight_offset;
    c.seed = seed++;
    const auto in = verify::make_inputs(c);
    std::vector<verify::RmsNormOutcome> outs;
    for (int64_t rows : plan_rows) {
      c.plan_rows = rows;
      outs.push_back(verify::run_case(c, in));
      ASSERT_TRUE(outs.back().passed) << outs.back().summary;
    }
    for (size_t i = 1; i < outs.size(); ++i) {
      const std::string what = verify::describe(c) + " y";
      expect_same_bits(outs[i].y_out, outs[0].y_out, 0, c.m * c.n, what.c_str());
      expect_same_bits(outs[i].rstd_out, outs[0].rstd_out, 0, c.m, "rstd");
      if (c.fused) {
        expect_same_bits(outs[i].residual_out_host, outs[0].residual_out_host, 0, c.m * c.n, "s");
      }
    }
  }
}

// The fused add's lean kernel (rows of one leading dimension, one dtype: every row count) gives
// the bits of the direct kernel and of the block ring, which take the same rows viewed as
// [3, m / 3, n] stored sequence-major (leading dimensions that do not collapse): y, s and the rstd,
// planned for the early-weight form's row counts, above them, and above kMidRowsPerSm rows per SM
// (the ring for the batched view); one vector per thread on up to 512 threads and on the wide
// instance (16-bit rows of 5120, 8192 and 4104 columns: 513 vectors, a warp of 31 idle threads),
// two (f32), each dtype, in place and out.
TEST(GpuAddRmsNorm, LeanKernelMatchesDirectKernel) {
  ROPENORM_REQUIRE_GPU();
  const int64_t sms = cuda::device_sm_count();
  struct Variant {
    int64_t n;
    DType dt;
    bool in_place;
  };
  const Variant variants[] = {{4096, DType::kBFloat16, false}, {4096, DType::kBFloat16, true},
                              {2048, DType::kFloat16, false},  {8192, DType::kBFloat16, false},
                              {5120, DType::kFloat16, true},   {4096, DType::kFloat32, false},
                              {8192, DType::kBFloat16, true},  {4104, DType::kBFloat16, false}};
  uint64_t seed = 900;
  for (const Variant& v : variants) {
    for (int64_t rows :
         {int64_t{1}, core::kLeanEarlyRowsPerSm * sms + 1, core::kMidRowsPerSm * sms + 1}) {
      RmsNormCase c;
      c.m = 24;
      c.n = v.n;
      c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = v.dt;
      c.fused = true;
      c.in_place = v.in_place;
      c.pitch_pad = 8;
      c.plan_rows = rows;
      c.seed = seed++;
      const auto in = verify::make_inputs(c);
      const auto lean = verify::run_case(c, in);
      ASSERT_TRUE(lean.passed) << lean.summary;
      c.batch = 3;
      const auto direct = verify::run_case(c, in);
      ASSERT_TRUE(direct.passed) << direct.summary;
      const std::string what = verify::describe(c) + " plan rows " + std::to_string(rows);
      expect_same_bits(lean.y_out, direct.y_out, 0, c.m * c.n, (what + " y").c_str());
      expect_same_bits(lean.residual_out_host, direct.residual_out_host, 0, c.m * c.n,
                       (what + " s").c_str());
      expect_same_bits(lean.rstd_out, direct.rstd_out, 0, c.m, (what + " rstd").c_str());
    }
  }
}

TEST(GpuRmsNorm, ZeroSizeIsNoOp) {
  ROPENORM_REQUIRE_GPU();
  for (int64_t m : {0, 3}) {
    RmsNormCase c;
    c.m = m;
    c.n = m == 0 ? 4096 : 0;
    c.has_weight = m == 0;
    const auto out = verify::run_case(c, verify::make_inputs(c));
    EXPECT_TRUE(out.status.ok()) << out.status.message();
    EXPECT_EQ(out.pad_written, 0);
  }
}

}  // namespace
}  // namespace ropenorm
