// GPU tests of rms_norm_backward and add_rms_norm_backward against the float64 oracle: widths,
// row counts, every dtype combination (weight and dy dtypes independent of x's, f32 dw), no
// weight, Gemma offset, saved vs recomputed rstd, strided and misaligned views, in place, the
// fused add with and without ds; bitwise run-to-run determinism of dx and dw, batch invariance
// of dx rows, the lean kernel against the ring kernel, zero rows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rms_norm_backward_plan.h"
#include "cuda/common/launch.h"
#include "gpu_util.h"
#include "verify/rms_norm_backward_case.h"

namespace ropenorm {
namespace {

using verify::Fill;
using verify::RmsNormBackwardCase;
using verify::RmsNormBackwardOutcome;

RmsNormBackwardOutcome expect_pass(const RmsNormBackwardCase& c) {
  const auto in = verify::make_backward_inputs(c);
  auto out = verify::run_backward_case(c, in);
  EXPECT_TRUE(out.status.ok()) << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
  return out;
}

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const int64_t kWidths[] = {1,   2,    3,    31,   70,   127,  255,   256,
                           769, 3584, 4095, 4096, 5120, 8199, 16384, 65536};

int64_t rows_for(int64_t n) {
  if (n <= 256) return 989;
  if (n <= 8199) return 19;
  return 7;
}

RmsNormBackwardCase same_dtype(int64_t m, int64_t n, DType dt, uint64_t seed) {
  RmsNormBackwardCase c;
  c.m = m;
  c.n = n;
  c.x_dtype = c.dy_dtype = c.w_dtype = c.dx_dtype = c.dres_dtype = dt;
  c.seed = seed;
  return c;
}

TEST(GpuRmsNormBackward, WidthMatrixEveryDtype) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (int64_t n : kWidths) {
      RmsNormBackwardCase c = same_dtype(rows_for(n), n, dt, seed++);
      expect_pass(c);
      c.give_rstd = false;
      expect_pass(c);
    }
  }
}

TEST(GpuRmsNormBackward, RowCounts) {
  ROPENORM_REQUIRE_GPU();
  for (int64_t m : {1, 7, 19, 989}) {
    for (int64_t n : {64, 4096, 4095}) {
      expect_pass(same_dtype(m, n, DType::kBFloat16, static_cast<uint64_t>(m * 31 + n)));
    }
  }
  RmsNormBackwardCase c = same_dtype(65537, 1024, DType::kBFloat16, 65537);
  expect_pass(c);
  c = same_dtype(65537, 256, DType::kFloat32, 65538);  // f32 dw over 65537 rows
  expect_pass(c);
}

TEST(GpuRmsNormBackward, EveryDtypeCombination) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType x : kFloatTypes) {
    for (DType dy : kFloatTypes) {
      for (DType w : kFloatTypes) {
        for (int64_t n : {70, 4096, 4095}) {
          RmsNormBackwardCase c = same_dtype(7, n, x, seed++);
          c.dy_dtype = dy;
          c.w_dtype = w;
          c.dx_dtype = dy;  // dx in another dtype than x too
          expect_pass(c);
        }
      }
    }
  }
}

TEST(GpuRmsNormBackward, NoWeightOffsetAndRecomputedRstd) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {31, 3584, 4095, 16384, 65536}) {
      RmsNormBackwardCase c = same_dtype(19, n, dt, seed++);
      c.has_weight = false;
      expect_pass(c);
      c.give_rstd = false;
      expect_pass(c);
      c = same_dtype(19, n, dt, seed++);
      c.params.weight_offset = 1.0f;  // Gemma
      expect_pass(c);
      c.give_rstd = false;
      c.params.eps = 1e-2f;
      expect_pass(c);
      c.params.eps = 1e-12f;
      expect_pass(c);
      c.want_dw = false;  // dw not wanted: no workspace
      expect_pass(c);
    }
  }
}

TEST(GpuRmsNormBackward, SpecialRows) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (Fill f : {Fill::kZero, Fill::kConstant}) {
      for (int64_t n : {31, 4096, 5120}) {
        RmsNormBackwardCase c = same_dtype(7, n, dt, static_cast<uint64_t>(n) * 7 + 1);
        c.fill = f;
        expect_pass(c);
        c.give_rstd = false;
        expect_pass(c);
      }
    }
  }
}

TEST(GpuRmsNormBackward, StridedMisalignedAnd3dViews) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 500;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {8, 70, 4096, 4095, 8192, 65536}) {
      for (int pad : {0, 3, 8}) {
        for (int off : {0, 1}) {
          RmsNormBackwardCase c = same_dtype(n > 8192 ? 3 : 19, n, dt, seed++);
          c.pitch_pad = pad;
          c.storage_offset = off;
          expect_pass(c);
        }
      }
      RmsNormBackwardCase c = same_dtype(12, n, dt, seed++);
      c.batch = 3;  // [3, 4, n] stored sequence-major: leading dims do not collapse
      c.pitch_pad = 8;
      expect_pass(c);
    }
  }
  // Mixed element sizes on misaligned rows at one element phase (vectorised, rows peeled), then
  // dx at another phase: the scalar two-pass kernel, for mixed and for equal element sizes.
  RmsNormBackwardCase c = same_dtype(19, 4096, DType::kBFloat16, seed++);
  c.dy_dtype = DType::kFloat32;
  c.storage_offset = 1;
  expect_pass(c);
  c.dx_offset = 2;
  c.seed = seed++;
  expect_pass(c);
  for (DType dt : kFloatTypes) {
    for (bool fused : {false, true}) {
      RmsNormBackwardCase s = same_dtype(23, 4095, dt, seed++);
      s.fused = fused;
      s.has_ds = fused;
      s.storage_offset = 1;
      s.dx_offset = 2;
      expect_pass(s);
    }
  }
  // Aligned rows with a misaligned weight (and dw): the staged weight factors' scalar loads on
  // the warp and block paths.
  for (DType dt : kFloatTypes) {
    for (int64_t n : {64, 4096, 8192}) {
      RmsNormBackwardCase w = same_dtype(37, n, dt, seed++);
      w.weight_offset = 1;
      expect_pass(w);
    }
  }
}

TEST(GpuRmsNormBackward, InPlace) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t n : {31, 4096, 4095, 65536}) {
      RmsNormBackwardCase c = same_dtype(7, n, dt, static_cast<uint64_t>(n) + 9);
      c.in_place = true;
      expect_pass(c);
    }
  }
}

TEST(GpuAddRmsNormBackward, Matrix) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 900;
  for (DType dt : kFloatTypes) {
    for (DType res : {dt, DType::kFloat32}) {
      for (int64_t n : {1, 3, 70, 256, 4095, 4096, 8192, 8199, 65536}) {
        for (bool has_ds : {false, true}) {
          for (bool in_place : {false, true}) {
            RmsNormBackwardCase c = same_dtype(rows_for(n), n, dt, seed++);
            c.fused = true;
            c.x_dtype = res;  // s has the residual's dtype; dy, dx x's
            c.dres_dtype = res;
            c.has_ds = has_ds;
            c.in_place = in_place;
            expect_pass(c);
          }
        }
      }
      RmsNormBackwardCase c = same_dtype(19, 4096, dt, seed++);
      c.fused = true;
      c.x_dtype = c.dres_dtype = res;
      c.has_ds = true;
      c.w_dtype = DType::kFloat32;
      c.pitch_pad = 3;
      c.storage_offset = 1;
      c.give_rstd = false;
      expect_pass(c);
      c.has_weight = false;
      expect_pass(c);
    }
  }
}

// dresidual absent: dx alone is written (the gradient of both x and residual of one dtype), with
// the bits it has beside dresidual, against the oracle, in and out of place, with and without
// ds, a saved or a recomputed r, and on the plain kernels where ds is absent too (N = 7168 and
// 8192 with ds: dx alone reads ds directly, the call with both through the ring).
TEST(GpuAddRmsNormBackward, WithoutDresidual) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1700;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {3, 70, 4095, 4096, 7168, 8192, 65536}) {
      for (bool has_ds : {false, true}) {
        for (bool in_place : {false, true}) {
          RmsNormBackwardCase c = same_dtype(rows_for(n), n, dt, seed++);
          c.fused = true;
          c.has_ds = has_ds;
          c.in_place = in_place;
          c.give_rstd = n != 4095;
          const auto in = verify::make_backward_inputs(c);
          const auto both = verify::run_backward_case(c, in);
          c.want_dres = false;
          const auto alone = verify::run_backward_case(c, in);
          ASSERT_TRUE(both.passed) << both.summary;
          ASSERT_TRUE(alone.passed) << alone.summary;
          EXPECT_TRUE(alone.dres_out.bytes.empty()) << verify::describe(c);
          EXPECT_EQ(alone.dx_out.bytes, both.dx_out.bytes) << verify::describe(c);
          EXPECT_EQ(alone.dx_out.bytes, both.dres_out.bytes) << verify::describe(c);
        }
      }
    }
  }
}

// Same inputs, two runs: dx, dresidual and dw bitwise identical (no float atomics).
TEST(GpuRmsNormBackward, RunToRunDeterminism) {
  ROPENORM_REQUIRE_GPU();
  struct Shape {
    int64_t m, n;
    DType dt;
    bool fused;
  };
  for (const Shape& s :
       {Shape{4096, 4096, DType::kBFloat16, false}, Shape{989, 4095, DType::kBFloat16, false},
        Shape{989, 64, DType::kFloat16, false}, Shape{989, 127, DType::kFloat32, true},
        Shape{19, 65536, DType::kBFloat16, false}, Shape{4096, 8192, DType::kBFloat16, true}}) {
    RmsNormBackwardCase c = same_dtype(s.m, s.n, s.dt, static_cast<uint64_t>(s.m + s.n));
    c.fused = s.fused;
    c.has_ds = s.fused;
    const auto in = verify::make_backward_inputs(c);
    const auto a = verify::run_backward_case(c, in);
    const auto b = verify::run_backward_case(c, in);
    ASSERT_TRUE(a.passed) << a.summary;
    ASSERT_TRUE(b.passed) << b.summary;
    EXPECT_EQ(a.dx_out.bytes, b.dx_out.bytes) << verify::describe(c);
    EXPECT_EQ(a.dres_out.bytes, b.dres_out.bytes) << verify::describe(c);
    EXPECT_EQ(a.dw_out.bytes, b.dw_out.bytes) << verify::describe(c);
  }
}

// The plain ring kernels (core::bwd_plain_call: the rstd saved, a weight, dw wanted, no ds, dx
// and dy in x's dtype, uniform phase) give the general ones' bits: dx against the same call
// without dw, dw against the same call with dx in another dtype (both general); on the block
// and warp paths, at 1, 2 and 4 vectors per thread, with edge elements, and on the deeper ring
// core::bwd_plain_plan gives 16-bit rows of N = 4096. That ring fits fewer blocks per SM, so its
// grid, and with it the grouping of dw's partial rows, matches the general form's only while
// the rows are at most those blocks (one block per row): dw is compared bit for bit there, and
// within the oracle's tolerance above it.
TEST(GpuRmsNormBackward, PlainKernelMatchesGeneral) {
  ROPENORM_REQUIRE_GPU();
  struct Shape {
    int64_t m, n;
    DType dt;
  };
  const int64_t deep_rows = core::kBwdPlainDeepMinBlocks * cuda::device_sm_count();
  for (const Shape& s :
       {Shape{4096, 4096, DType::kBFloat16}, Shape{deep_rows, 4096, DType::kBFloat16},
        Shape{deep_rows - 7, 4096, DType::kFloat16}, Shape{989, 4095, DType::kBFloat16},
        Shape{989, 64, DType::kFloat16}, Shape{989, 1024, DType::kBFloat16},
        Shape{19, 8199, DType::kFloat16}, Shape{777, 2048, DType::kFloat32}}) {
    RmsNormBackwardCase c = same_dtype(s.m, s.n, s.dt, static_cast<uint64_t>(s.m * 5 + s.n));
    const auto in = verify::make_backward_inputs(c);
    const auto plain = verify::run_backward_case(c, in);
    RmsNormBackwardCase no_dw = c;
    no_dw.want_dw = false;
    const auto b = verify::run_backward_case(no_dw, in);
    RmsNormBackwardCase other_dx = c;
    other_dx.dx_dtype = s.dt == DType::kFloat32 ? DType::kBFloat16 : DType::kFloat32;
    const auto d = verify::run_backward_case(other_dx, in);
    ASSERT_TRUE(plain.passed) << plain.summary;
    ASSERT_TRUE(b.passed) << b.summary;
    ASSERT_TRUE(d.passed) << d.summary;
    EXPECT_EQ(plain.dx_out.bytes, b.dx_out.bytes) << verify::describe(c);
    const int elem = s.dt == DType::kFloat32 ? 4 : 2;
    const core::RmsNormBwdPlan general =
        core::plan_rms_norm_backward(s.n, 16 / elem, true, true, 2 * elem, true);
    const core::RmsNormBwdPlan ran = core::bwd_plain_plan(general, elem, cuda::device_smem_per_sm(),
                                                          cuda::device_smem_reserved_per_block());
    if (ran.stages == general.stages || s.m <= deep_rows) {
      EXPECT_EQ(plain.dw_out.bytes, d.dw_out.bytes) << verify::describe(c);
    }
  }
}

// dw (and dx) bitwise the same with a 16-byte aligned workspace and one a float off: the column
// sum's 16-byte and scalar forms, and the row kernels' vector and scalar partial stores, add in
// the same order.
TEST(GpuRmsNormBackward, DwIndependentOfWorkspaceAlignment) {
  ROPENORM_REQUIRE_GPU();
  struct Shape {
    int64_t m, n;
    DType dt;
  };
  for (const Shape& s : {Shape{4096, 4096, DType::kBFloat16}, Shape{989, 64, DType::kFloat16},
                         Shape{777, 8192, DType::kFloat32}, Shape{19, 65536, DType::kBFloat16}}) {
    RmsNormBackwardCase c = same_dtype(s.m, s.n, s.dt, static_cast<uint64_t>(s.m * 3 + s.n));
    const auto in = verify::make_backward_inputs(c);
    c.workspace_offset = 0;
    const auto a = verify::run_backward_case(c, in);
    c.workspace_offset = 1;
    const auto b = verify::run_backward_case(c, in);
    ASSERT_TRUE(a.passed) << a.summary;
    ASSERT_TRUE(b.passed) << b.summary;
    EXPECT_EQ(a.dx_out.bytes, b.dx_out.bytes) << verify::describe(c);
    EXPECT_EQ(a.dw_out.bytes, b.dw_out.bytes) << verify::describe(c);
  }
}

// Rows of varying phase read their weight factors from a table staged in shared memory where the
// plan has room for it (N = 4095) and per element from global memory where not (N = 8191 on
// 16-bit rows without ds, whose shared memory takes 100 KB of the 110 KB that keep two blocks
// per SM; with ds it is past that budget and the wide one leaves room for the table): both forms
// against the oracle, with a weight dtype of its own, the Gemma offset, the fused add and a
// recomputed rstd. BatchInvariance below checks both forms' dx bits against a single row's.
TEST(GpuRmsNormBackward, VaryingPhaseWeightFactors) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 900;
  for (int64_t n : {4095, 8191}) {
    const core::RmsNormBwdPlan plan = core::plan_rms_norm_backward(n, 8, false, true, 4, true);
    ASSERT_TRUE(plan.smem_acc) << n;
    ASSERT_EQ(plan.stage_weights, n == 4095) << n;
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      for (DType wt : {dt, DType::kFloat32}) {
        for (bool fused : {false, true}) {
          RmsNormBackwardCase c = same_dtype(37, n, dt, seed++);
          c.w_dtype = wt;
          c.fused = fused;
          c.has_ds = fused;
          expect_pass(c);
          c.params.weight_offset = 1.0f;
          c.give_rstd = false;
          expect_pass(c);
        }
      }
    }
  }
}

// A row's dx is bitwise the same whatever the number of rows in the call: bf16 over the paths;
// f32 (whose outputs show any change of the reduction order) for rows with edge elements and for
// rows whose 16-byte phase varies only in a batch (a padded pitch: a single row has one phase);
// an f32 x with 16-bit dy (the f32 residual stream) on rows of varying phase.
TEST(GpuRmsNormBackward, BatchInvariance) {
  ROPENORM_REQUIRE_GPU();
  struct Width {
    int64_t n;
    DType dt;
    int64_t pad;
    DType dy = DType::kFloat32;  ///< kFloat32: dy in dt; else an f32 x with 16-bit dy
  };
  const Width widths[] = {{64, DType::kBFloat16, 0},
                          {4096, DType::kBFloat16, 0},
                          {4095, DType::kBFloat16, 0},
                          {8191, DType::kBFloat16, 0},
                          {8192, DType::kBFloat16, 0},
                          {65536, DType::kBFloat16, 0},
                          {4095, DType::kFloat32, 0},
                          {4096, DType::kFloat32, 1},
                          {63, DType::kFloat32, 0, DType::kBFloat16},
                          {4095, DType::kFloat32, 0, DType::kBFloat16},
                          {4096, DType::kFloat32, 1, DType::kFloat16}};
  for (bool fused : {false, true}) {
    for (bool rstd : {true, false}) {
      for (const Width& w : widths) {
        const int64_t n = w.n;
        std::vector<std::vector<unsigned char>> first_rows;
        for (int64_t m : {1, 255, 4096}) {
          if (n >= 65536 && m > 255) continue;
          RmsNormBackwardCase c = same_dtype(m, n, w.dt, static_cast<uint64_t>(m + n));
          if (w.dy != DType::kFloat32) c.dy_dtype = w.dy;
          c.pitch_pad = w.pad;
          c.fused = fused;
          c.has_ds = fused;
          c.give_rstd = rstd;
          auto in = verify::make_backward_inputs(c);
          // Row 0 (and the weight) identical across M.
          RmsNormBackwardCase c1 = c;
          c1.m = 1;
          c1.seed = 77;
          const auto in1 = verify::make_backward_inputs(c1);
          for (int64_t k = 0; k < n; ++k) {
            in.x.set(k, in1.x.get(k));
            in.dy.set(k, in1.dy.get(k));
            if (fused) in.ds.set(k, in1.ds.get(k));
            in.weight.set(k, in1.weight.get(k));
          }
          if (rstd) in.rstd.set(0, in1.rstd.get(0));
          const auto out = verify::run_backward_case(c, in);
          ASSERT_TRUE(out.passed) << out.summary;
          const auto* dx = out.dx_out.bytes.data();
          first_rows.emplace_back(dx, dx + n * dtype_size(out.dx_out.dtype));
          if (fused) {
            const auto* dr = out.dres_out.bytes.data();
            first_rows.back().insert(first_rows.back().end(), dr,
                                     dr + n * dtype_size(out.dres_out.dtype));
          }
        }
        for (size_t i = 1; i < first_rows.size(); ++i) {
          ASSERT_EQ(first_rows[0], first_rows[i])
              << "n=" << n << " " << dtype_name(w.dt)
              << " dy=" << dtype_name(w.dy == DType::kFloat32 ? w.dt : w.dy) << " pad=" << w.pad
              << " run " << i;
        }
      }
    }
  }
}

// The lean kernel (rows of one dtype, 16-byte aligned, at most one leading dimension, a weight,
// dw wanted; up to core::kBwdLeanMaxRowsPerSm rows per SM) gives the ring kernel's bits: the same
// rows picked for their own count (the lean kernel, which the launcher reports it ran) and for
// one past the bound (the ring kernel), dx, dresidual and dw compared (both run on the ring
// kernel's grid, so dw's partial rows group alike). Every lean instance: each dtype at 1, 2 and
// 4 vectors per thread (f32 also 8, on 128 and 256 threads), plain (the rstd saved) and general
// (r recomputed with the Gemma offset; the fused add with and without ds and dresidual), against
// the plain ring, the general ring and the ring that reads ds directly (16-bit N = 8192, dx
// alone); a partly idle last warp (N = 1032, f32 N = 1000 and 1028), in place, padded pitches.
TEST(GpuRmsNormBackward, LeanKernelMatchesRingKernel) {
  ROPENORM_REQUIRE_GPU();
  const int sms = cuda::device_sm_count();
  const int64_t bound = int64_t{core::kBwdLeanMaxRowsPerSm} * sms;
  struct Variant {
    int64_t n;
    DType dt;
    bool fused, has_ds, want_dres, give_rstd, in_place;
    int64_t pad;
  };
  constexpr DType bf = DType::kBFloat16, f16 = DType::kFloat16, f32 = DType::kFloat32;
  const Variant variants[] = {
      {1032, bf, false, false, false, true, false, 0},    // bf16 x1 plain
      {1032, bf, false, false, false, false, false, 8},   // bf16 x1 general
      {2048, bf, false, false, false, true, true, 0},     // bf16 x2 plain
      {2048, bf, true, false, true, false, false, 0},     // bf16 x2 general
      {4096, bf, false, false, false, true, false, 0},    // bf16 x4 plain
      {4096, bf, true, true, false, false, false, 0},     // bf16 x4 general
      {8192, bf, true, true, true, true, false, 8},       // bf16 x4 general, ds in the ring
      {8192, bf, true, true, false, false, true, 0},      // bf16 x4 general, ds read directly
      {1032, f16, false, false, false, true, false, 0},   // f16 x1 plain
      {1032, f16, true, true, true, false, true, 0},      // f16 x1 general
      {2048, f16, false, false, false, true, false, 8},   // f16 x2 plain
      {2048, f16, false, false, false, false, false, 8},  // f16 x2 general
      {4096, f16, false, false, false, true, true, 0},    // f16 x4 plain
      {4096, f16, true, true, true, false, true, 0},      // f16 x4 general
      {8192, f16, true, true, false, false, false, 0},    // f16 x4 general, ds read directly
      {1000, f32, false, false, false, true, false, 0},   // f32 x1 plain
      {1000, f32, true, true, true, false, false, 0},     // f32 x1 general
      {1028, f32, false, false, false, true, false, 4},   // f32 x2 plain
      {1028, f32, false, false, false, false, false, 0},  // f32 x2 general
      {2048, f32, false, false, false, true, false, 4},   // f32 x4 plain
      {2048, f32, true, false, true, false, false, 0},    // f32 x4 general
      {4096, f32, false, false, false, true, false, 0},   // f32 x8 plain, 128 threads
      {4096, f32, true, true, false, false, false, 0},    // f32 x8 general
      {8192, f32, false, false, false, true, true, 0},    // f32 x8 plain, 256 threads
  };
  uint64_t seed = 1200;
  for (const Variant& v : variants) {
    const int elem = static_cast<int>(dtype_size(v.dt));
    const core::RmsNormBwdPlan plan = core::plan_rms_norm_backward_ds(
        v.n, 16 / elem, true, true, 2 * elem, v.fused && v.has_ds ? elem : 0,
        v.fused && v.want_dres, true);
    ASSERT_EQ(plan.path, core::RmsNormBwdPath::kBlockPerRow) << v.n;
    for (int64_t m : {int64_t{1}, int64_t{37}, bound}) {
      RmsNormBackwardCase c = same_dtype(m, v.n, v.dt, seed++);
      c.fused = v.fused;
      c.has_ds = v.has_ds;
      c.want_dres = v.want_dres;
      c.give_rstd = v.give_rstd;
      c.in_place = v.in_place;
      c.pitch_pad = v.pad;
      if (!v.give_rstd) c.params.weight_offset = 1.0f;
      const auto in = verify::make_backward_inputs(c);
      c.plan_rows = m;
      const auto lean = verify::run_backward_case(c, in);
      ASSERT_TRUE(lean.passed) << lean.summary;
      ASSERT_TRUE(lean.lean_kernel) << verify::describe(c);
      c.plan_rows = bound + 1;
      const auto ring = verify::run_backward_case(c, in);
      ASSERT_TRUE(ring.passed) << ring.summary;
      ASSERT_FALSE(ring.lean_kernel) << verify::describe(c);
      const std::string what = verify::describe(c) + " (" + std::to_string(plan.threads) + " x " +
                               std::to_string(plan.vpt) + ") lean against ring";
      expect_same_bits(lean.dx_out, ring.dx_out, 0, m * v.n, (what + " dx").c_str());
      if (verify::writes_dresidual(c)) {
        expect_same_bits(lean.dres_out, ring.dres_out, 0, m * v.n, (what + " dres").c_str());
      }
      expect_same_bits(lean.dw_out, ring.dw_out, 0, v.n, (what + " dw").c_str());
    }
  }
}

// Zero rows: nothing to write but dw, which is the empty sum (0). Zero width: nothing at all.
TEST(GpuRmsNormBackward, ZeroSize) {
  ROPENORM_REQUIRE_GPU();
  for (bool fused : {false, true}) {
    RmsNormBackwardCase c = same_dtype(0, 4096, DType::kBFloat16, 3);
    c.fused = fused;
    c.has_ds = fused;
    const auto out = expect_pass(c);
    ASSERT_EQ(out.dw_out.numel(), 4096);
    for (int64_t j = 0; j < 4096; ++j) ASSERT_EQ(out.dw_out.bits(j), 0u) << j;
    c.m = 3;
    c.n = 0;
    c.has_weight = false;
    c.give_rstd = false;
    const auto none = verify::run_backward_case(c, verify::make_backward_inputs(c));
    EXPECT_TRUE(none.status.ok()) << none.status.message();
    EXPECT_EQ(none.pad_written, 0);
  }
}

}  // namespace
}  // namespace ropenorm
