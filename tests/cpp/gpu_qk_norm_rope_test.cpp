// GPU tests of the fused QK-norm + RoPE forward against the float64 oracle (per head vector:
// RMSNorm with no intermediate rounding, then the rotation): head dims (common and odd), full and
// half rotary, both styles, GQA head counts, packed QKV views and separate tensors, in place and
// out of place, every dtype and cos/sin source, mixed weight dtypes, Gemma's offset, zero head
// vectors, the eps range; plus bitwise independence of a head's result from T and the other heads;
// long token runs.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/qk_norm_rope_plan.h"
#include "core/rope_plan.h"
#include "gpu_util.h"
#include "ropenorm/qk_norm_rope.h"
#include "verify/qk_norm_rope_case.h"

namespace ropenorm {
namespace {

using verify::QkNormRopeCase;
using verify::RopeLayout;
using verify::RopePosKind;

verify::QkNormRopeOutcome expect_pass(const QkNormRopeCase& c, const verify::QkNormRopeInputs& in) {
  auto out = verify::run_case(c, in);
  EXPECT_TRUE(out.status.ok()) << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
  return out;
}

verify::QkNormRopeOutcome expect_pass(const QkNormRopeCase& c) {
  return expect_pass(c, verify::make_inputs(c));
}

// Runs token tok of case c (inputs in, outcome a over all T tokens) alone (T = 1, at the same
// position) and checks that its q, k and q rstd keep their bits. Tables indexed by position
// only (a per-token gathered cos/sin would need its row copied too).
void expect_token_alone_same_bits(const QkNormRopeCase& c, const verify::QkNormRopeInputs& in,
                                  const verify::QkNormRopeOutcome& a, int64_t tok) {
  ASSERT_NE(c.rope.source, CosSinKind::kHfCosSinGathered);
  const int64_t nq = c.rope.hq * c.rope.head_dim, nk = c.rope.hk * c.rope.head_dim;
  QkNormRopeCase c1 = c;
  c1.rope.seq = 1;
  verify::QkNormRopeInputs in1 = in;
  in1.rope.q = ref::slice(in.rope.q, tok * nq, nq);
  in1.rope.k = ref::slice(in.rope.k, tok * nk, nk);
  in1.rope.positions = {in.rope.positions[tok]};
  const auto b = expect_pass(c1, in1);
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(b.q_out, a.q_out, tok * nq, nq, "q"));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(b.k_out, a.k_out, tok * nk, nk, "k"));
  for (int64_t i = 0; i < c.rope.hq; ++i) ASSERT_EQ(b.q_rstd[i], a.q_rstd[tok * c.rope.hq + i]);
}

const DType kFloatTypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};

TEST(GpuQkNormRope, HeadDimsRotaryStylesLayouts) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (int64_t d : {2, 6, 64, 80, 128, 256}) {
    for (int64_t frac : {1, 2}) {
      const int64_t r = d / frac;
      if (r < 2 || r % 2 != 0) continue;
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        for (RopeLayout layout : {RopeLayout::kSeparate, RopeLayout::kPackedQkv}) {
          for (bool in_place : {false, true}) {
            QkNormRopeCase c;
            c.rope.seq = 13;
            c.rope.hq = 16;
            c.rope.hk = 1;
            c.rope.head_dim = d;
            c.rope.rotary_dim = frac == 1 ? 0 : r;
            c.rope.style = style;
            c.rope.layout = layout;
            c.rope.in_place = in_place;
            c.rope.dtype = kFloatTypes[seed % 3];
            c.rope.seed = seed++;
            expect_pass(c);
          }
        }
      }
    }
  }
}

TEST(GpuQkNormRope, DtypesGqaAndSources) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (auto heads : {std::pair<int64_t, int64_t>{32, 8}, {16, 1}}) {
      for (CosSinKind src : {CosSinKind::kCache, CosSinKind::kHfCosSin,
                             CosSinKind::kHfCosSinGathered, CosSinKind::kInvFreq}) {
        QkNormRopeCase c;
        c.rope.seq = 21;
        c.rope.hq = heads.first;
        c.rope.hk = heads.second;
        c.rope.head_dim = 128;
        c.rope.dtype = dt;
        c.rope.source = src;
        c.rope.cs_dtype = dt;
        c.rope.pos_kind = seed % 2 ? RopePosKind::kI32 : RopePosKind::kI64;
        c.rope.layout = RopeLayout::kPackedQkv;
        c.w_dtype = kFloatTypes[seed % 3];
        c.rope.seed = seed++;
        expect_pass(c);
      }
    }
  }
}

TEST(GpuQkNormRope, EpsOffsetInverseArangeNoRstd) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 200;
  for (float eps : {1e-12f, 1e-2f}) {
    for (float o : {0.0f, 1.0f}) {
      for (bool inverse : {false, true}) {
        QkNormRopeCase c;
        c.rope.seq = 9;
        c.rope.hq = 32;
        c.rope.hk = 8;
        c.rope.head_dim = 64;
        c.rope.inverse = inverse;
        c.rope.pos_kind = RopePosKind::kArange;
        c.eps = eps;
        c.weight_offset = o;
        c.with_rstd = !inverse;
        c.rope.seed = seed++;
        expect_pass(c);
      }
    }
  }
}

TEST(GpuQkNormRope, ZeroHeadVectors) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t d : {6, 128}) {
      QkNormRopeCase c;
      c.rope.seq = 5;
      c.rope.hq = 4;
      c.rope.hk = 2;
      c.rope.head_dim = d;
      c.rope.dtype = dt;
      c.rope.seed = 300 + d;
      c.eps = 1e-12f;
      auto in = verify::make_inputs(c);
      // Head 1 of q at token 2 and head 0 of k at token 4: all zeros.
      for (int64_t j = 0; j < d; ++j) {
        in.rope.q.set((2 * c.rope.hq + 1) * d + j, 0.0);
        in.rope.k.set((4 * c.rope.hk + 0) * d + j, 0.0);
      }
      const auto out = expect_pass(c, in);
      for (int64_t j = 0; j < d; ++j) {
        EXPECT_EQ(out.q_out.get((2 * c.rope.hq + 1) * d + j), 0.0);
        EXPECT_EQ(out.k_out.get((4 * c.rope.hk + 0) * d + j), 0.0);
      }
    }
  }
}

// Long token runs (T > 4096, 16-bit q/k, R = D: the lean run at D 128 and 256, the lean kernel
// over thousands of blocks at D 64, and the pair kernel over hundreds, by inv_freq or with the
// lean kernels disallowed): every source,
// both styles, D 64 / 128 / 256, in place and out; and, with 32 + 8 heads, the last token's bits
// equal those of the token alone (T = 1), and the pair kernel's bits the lean kernel's.
TEST(GpuQkNormRope, LongRuns) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    for (CosSinKind src : {CosSinKind::kCache, CosSinKind::kHfCosSin, CosSinKind::kHfCosSinGathered,
                           CosSinKind::kInvFreq}) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        QkNormRopeCase c;
        c.rope.seq = 4106;
        c.rope.table_rows = 8192;  // arange positions 0 .. T - 1 need T rows
        c.rope.hq = 4;
        c.rope.hk = 2;
        c.rope.head_dim = seed % 3 == 0 ? 256 : (seed % 3 == 1 ? 128 : 64);
        c.rope.dtype = dt;
        c.rope.source = src;
        c.rope.style = style;
        c.rope.layout = RopeLayout::kPackedQkv;
        c.rope.in_place = seed % 2 == 0;
        c.rope.pos_kind = seed % 2 ? RopePosKind::kI32 : RopePosKind::kArange;
        c.rope.seed = seed++;
        for (bool lean : {true, false}) {
          c.allow_lean = lean;
          expect_pass(c);
        }
      }
    }
  }
  QkNormRopeCase c;
  c.rope.seq = 4100;
  c.rope.hq = 32;
  c.rope.hk = 8;
  c.rope.head_dim = 128;
  c.rope.layout = RopeLayout::kPackedQkv;
  c.rope.seed = seed++;
  const auto in = verify::make_inputs(c);
  const auto a = expect_pass(c, in);
  ASSERT_NO_FATAL_FAILURE(expect_token_alone_same_bits(c, in, a, c.rope.seq - 1));
  c.allow_lean = false;
  const auto b = expect_pass(c, in);
  ASSERT_EQ(a.q_out.bytes, b.q_out.bytes);
  ASSERT_EQ(a.k_out.bytes, b.k_out.bytes);
}

// The lean kernel (what the planner picks for these calls, but for D = 256: 16 lanes x 40 heads
// is past kRopeLeanLongRunThreads, so 73 tokens take the pair kernel and the token alone the lean
// one) gives the pair kernel's bits (the same call with the lean kernel disallowed), token by
// token, in both styles, both directions, f16 and bf16 data, f32 / bf16 / f16 tables and bf16 /
// f16 / f32 weights with an offset, int64 / int32 / implicit positions (weights in the data's
// dtype take the decode instances at D 128 with explicit positions and cos/sin rows, the
// lanes-and-weights ones at D 128 with implicit positions and at 256, the rest the general
// one: core::qk_lean_instance); and a token alone gives the run's bits.
TEST(GpuQkNormRope, LeanKernelMatchesPairKernel) {
  ROPENORM_REQUIRE_GPU();
  struct Variant {
    DType dtype;
    RopeStyle style;
    bool inverse;
    CosSinKind source;
    DType cs_dtype;
    DType w_dtype;
    int64_t head_dim;
    RopePosKind pos_kind;
  };
  const Variant variants[] = {
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kBFloat16,
       DType::kBFloat16, 128, RopePosKind::kI64},
      {DType::kFloat16, RopeStyle::kNeox, true, CosSinKind::kHfCosSin, DType::kFloat16,
       DType::kFloat32, 64, RopePosKind::kI64},
      {DType::kBFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSin, DType::kFloat32,
       DType::kBFloat16, 256, RopePosKind::kI64},
      {DType::kFloat16, RopeStyle::kNeox, false, CosSinKind::kHfCosSin, DType::kBFloat16,
       DType::kFloat16, 128, RopePosKind::kI32},
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32,
       DType::kBFloat16, 128, RopePosKind::kArange},
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32,
       DType::kFloat32, 128, RopePosKind::kI64},
  };
  uint64_t seed = 450;
  for (const Variant& v : variants) {
    QkNormRopeCase c;
    c.rope.seq = core::kRopeLeanMaxTokens + 9;
    c.rope.hq = 32;
    c.rope.hk = 8;
    c.rope.head_dim = v.head_dim;
    c.rope.dtype = v.dtype;
    c.rope.style = v.style;
    c.rope.inverse = v.inverse;
    c.rope.source = v.source;
    c.rope.cs_dtype = v.cs_dtype;
    c.rope.layout = RopeLayout::kPackedQkv;
    c.rope.pos_kind = v.pos_kind;
    c.w_dtype = v.w_dtype;
    c.weight_offset = 1.0f;
    c.rope.seed = seed++;
    const auto in = verify::make_inputs(c);
    const auto a = expect_pass(c, in);
    QkNormRopeCase pair = c;
    pair.allow_lean = false;
    const auto b = expect_pass(pair, in);
    ASSERT_EQ(a.q_out.bytes, b.q_out.bytes);
    ASSERT_EQ(a.k_out.bytes, b.k_out.bytes);
    ASSERT_EQ(a.q_rstd, b.q_rstd);
    ASSERT_EQ(a.k_rstd, b.k_rstd);
    if (v.pos_kind != RopePosKind::kArange) {  // a token alone would sit at position 0
      ASSERT_NO_FATAL_FAILURE(expect_token_alone_same_bits(c, in, a, 5));
    }
  }
}

// The lean-run kernel (what the planner picks from kQkLeanRunMinTokens tokens for 8 or 16 lanes
// and at most kQkLeanRunThreads threads) gives the pair kernel's bits and rstd (the same call with
// the lean kernels disallowed): both styles and directions, f16 and bf16 data, f32 / bf16 / f16
// tables (cache, Hugging Face table, per-token gathered), bf16 / f16 / f32 weights with an
// offset, int64 / int32 / implicit positions with per-sequence offsets, in place, D 128 and 256,
// one sequence and batches whose sequences end inside a block's run of tokens, a gathered table
// broadcast over the batch, one and two head groups, blocks of 96 to 320 threads. Every instance
// core::qk_lean_run_instance picks: flat tokens and full warps with int64 positions and cache rows
// (32 + 8 heads, one sequence and a batch, D 128 and 256), the same rows and positions with a
// partial warp (16 + 1 heads, D 128 and 256), gathered tables on flat tokens with full warps
// (D 128 and 256), and the rest.
TEST(GpuQkNormRope, LeanRunMatchesPairKernel) {
  ROPENORM_REQUIRE_GPU();
  struct Variant {
    DType dtype;
    RopeStyle style;
    bool inverse;
    CosSinKind source;
    DType cs_dtype;
    DType w_dtype;
    int64_t head_dim, hq, hk;
    RopePosKind pos_kind;
    int64_t batch, seq;
    bool in_place;
    bool gathered_broadcast = false;  ///< one [S, R] gathered table broadcast over B
  };
  const Variant variants[] = {
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32,
       DType::kBFloat16, 128, 32, 8, RopePosKind::kI64, 0, core::kQkLeanRunMinTokens + 3, false},
      // Gathered tables: broadcast over B (batch stride 0, as Hugging Face models pass them:
      // LeanLanes), and per token on flat tokens, in place and out (LeanFlatTokens<8>; the
      // 16-lane one below: 16 + 4 heads at D 256).
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kHfCosSinGathered, DType::kFloat32,
       DType::kBFloat16, 128, 32, 8, RopePosKind::kI64, 4, 1100, false, true},
      {DType::kBFloat16, RopeStyle::kNeox, true, CosSinKind::kHfCosSinGathered, DType::kFloat16,
       DType::kFloat32, 128, 32, 8, RopePosKind::kI64, 0, core::kQkLeanRunMinTokens + 7, true},
      {DType::kFloat16, RopeStyle::kGptj, false, CosSinKind::kHfCosSinGathered, DType::kFloat32,
       DType::kBFloat16, 128, 32, 8, RopePosKind::kI64, 2, 1100, false},
      {DType::kFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSin, DType::kFloat16,
       DType::kFloat32, 128, 32, 8, RopePosKind::kI32, 3, 1501, false},
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kHfCosSinGathered, DType::kBFloat16,
       DType::kBFloat16, 256, 16, 4, RopePosKind::kI64, 2, 2101, true},
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kBFloat16,
       DType::kFloat16, 128, 24, 8, RopePosKind::kArangeSeqOffs, 4, 1100, false},
      // Two head groups of 20 rows (16 lanes x 40 heads), and small blocks (12 heads) several
      // to a multiprocessor.
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32,
       DType::kBFloat16, 256, 32, 8, RopePosKind::kI64, 0, core::kQkLeanRunMinTokens + 5, false},
      {DType::kFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kFloat32,
       DType::kFloat16, 128, 9, 3, RopePosKind::kI32, 2, 2500, true},
      // Flat tokens over a batch, full warps.
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kFloat32,
       DType::kBFloat16, 128, 32, 8, RopePosKind::kI64, 3, 1501, false},
      // 17 heads: 136 / 272 threads, the last warp partial (int64 positions, cache rows).
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32,
       DType::kBFloat16, 128, 16, 1, RopePosKind::kI64, 2, 1100, false},
      {DType::kFloat16, RopeStyle::kNeox, true, CosSinKind::kCache, DType::kFloat16,
       DType::kFloat16, 256, 16, 1, RopePosKind::kI64, 0, core::kQkLeanRunMinTokens + 1, true},
  };
  uint64_t seed = 480;
  for (const Variant& v : variants) {
    QkNormRopeCase c;
    c.rope.batch = v.batch;
    c.rope.seq = v.seq;
    c.rope.hq = v.hq;
    c.rope.hk = v.hk;
    c.rope.head_dim = v.head_dim;
    c.rope.dtype = v.dtype;
    c.rope.style = v.style;
    c.rope.inverse = v.inverse;
    c.rope.source = v.source;
    c.rope.cs_dtype = v.cs_dtype;
    c.rope.layout = RopeLayout::kPackedQkv;
    c.rope.pos_kind = v.pos_kind;
    c.rope.in_place = v.in_place;
    c.rope.gathered_broadcast = v.gathered_broadcast;
    c.rope.table_rows = 8192;
    c.w_dtype = v.w_dtype;
    c.weight_offset = 1.0f;
    c.rope.seed = seed++;
    const auto in = verify::make_inputs(c);
    const auto a = expect_pass(c, in);
    QkNormRopeCase pair = c;
    pair.allow_lean = false;
    const auto b = expect_pass(pair, in);
    ASSERT_EQ(a.q_out.bytes, b.q_out.bytes) << a.summary;
    ASSERT_EQ(a.k_out.bytes, b.k_out.bytes) << a.summary;
    ASSERT_EQ(a.q_rstd, b.q_rstd) << a.summary;
    ASSERT_EQ(a.k_rstd, b.k_rstd) << a.summary;
  }
}

// A head's output bits depend only on its own input, its position and the weights: not on T,
// not on the other heads.
TEST(GpuQkNormRope, HeadResultIndependentOfTAndOtherHeads) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t d : {6, 80, 256}) {
      QkNormRopeCase c;
      c.rope.seq = core::kRopeLeanMaxTokens + 9;
      c.rope.hq = 16;
      c.rope.hk = 4;
      c.rope.head_dim = d;
      c.rope.dtype = dt;
      c.rope.layout = RopeLayout::kPackedQkv;
      c.rope.seed = 400 + d;
      const auto in = verify::make_inputs(c);
      const auto a = expect_pass(c, in);

      // The same token alone (T = 1), at the same position.
      ASSERT_NO_FATAL_FAILURE(expect_token_alone_same_bits(c, in, a, 17));

      // Every other head redrawn: head 3 of q and head 1 of k keep their bits.
      const size_t es = dtype_size(dt);
      verify::QkNormRopeInputs in2 = in;
      std::mt19937_64 rng(99);
      ref::fill_normal(in2.rope.q, rng, 3.0);
      ref::fill_normal(in2.rope.k, rng, 3.0);
      for (int64_t t = 0; t < c.rope.seq; ++t) {
        const size_t qo = static_cast<size_t>((t * c.rope.hq + 3) * d) * es;
        const size_t ko = static_cast<size_t>((t * c.rope.hk + 1) * d) * es;
        std::memcpy(in2.rope.q.bytes.data() + qo, in.rope.q.bytes.data() + qo, d * es);
        std::memcpy(in2.rope.k.bytes.data() + ko, in.rope.k.bytes.data() + ko, d * es);
      }
      const auto e = expect_pass(c, in2);
      for (int64_t t = 0; t < c.rope.seq; ++t) {
        for (int64_t j = 0; j < d; ++j) {
          ASSERT_EQ(e.q_out.bits((t * c.rope.hq + 3) * d + j),
                    a.q_out.bits((t * c.rope.hq + 3) * d + j));
          ASSERT_EQ(e.k_out.bits((t * c.rope.hk + 1) * d + j),
                    a.k_out.bits((t * c.rope.hk + 1) * d + j));
        }
      }
    }
  }
}

TEST(GpuQkNormRope, BadInputWritesNothing) {
  ROPENORM_REQUIRE_GPU();
  QkNormRopeCase c;
  c.rope.seq = 4;
  c.rope.hq = 2;
  c.rope.hk = 1;
  c.rope.head_dim = 64;
  c.eps = 0.5f;  // outside [1e-12, 1e-2]
  const auto out = verify::run_case(c, verify::make_inputs(c));
  EXPECT_FALSE(out.status.ok());
  EXPECT_NE(out.status.message().find("'eps'"), std::string::npos) << out.status.message();
  EXPECT_EQ(out.pad_written, 0);
}

}  // namespace
}  // namespace ropenorm
