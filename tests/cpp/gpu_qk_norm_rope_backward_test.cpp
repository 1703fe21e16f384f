// GPU tests of the fused QK-norm + RoPE backward against the float64 oracle (per head vector:
// the inverse rotation of the incoming gradient, then the RMSNorm backward; dw summed over every
// head vector): head dims (common and odd), full and half rotary, both styles, GQA head counts,
// packed QKV views and separate tensors, in place and out of place, saved and recomputed rstd
// (and the recomputed r against the forward's saved one),
// every dtype and cos/sin source, weight dtypes other than q's, Gemma's offset, zero head
// vectors, the eps range, random positions, a short workspace; plus bitwise run-to-run
// determinism of dq, dk, dwq and dwk and the independence of a head's dq from T and the other
// heads.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "gpu_util.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "verify/qk_norm_rope_backward_case.h"

namespace ropenorm {
namespace {

using verify::QkNormRopeBackwardCase;
using verify::QkNormRopeBackwardInputs;
using verify::QkNormRopeBackwardOutcome;
using verify::RopeLayout;
using verify::RopePosKind;

QkNormRopeBackwardOutcome expect_pass(const QkNormRopeBackwardCase& c,
                                      const QkNormRopeBackwardInputs& in) {
  auto out = verify::run_case(c, in);
  if (!c.short_workspace) EXPECT_TRUE(out.status.ok()) << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
  return out;
}

QkNormRopeBackwardOutcome expect_pass(const QkNormRopeBackwardCase& c) {
  return expect_pass(c, verify::make_inputs(c));
}

const DType kFloatTypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};

TEST(GpuQkNormRopeBackward, HeadDimsRotaryStylesLayouts) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (int64_t d : {2, 6, 64, 80, 128, 256}) {
    for (int64_t frac : {1, 2}) {
      const int64_t r = frac == 1 ? d : (d / 2) / 2 * 2;  // D = 6: R = 2
      if (r < 2) continue;
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        for (RopeLayout layout : {RopeLayout::kSeparate, RopeLayout::kPackedQkv}) {
          for (bool in_place : {false, true}) {
            QkNormRopeBackwardCase c;
            c.rope.seq = 13;
            c.rope.hq = 16;
            c.rope.hk = 1;
            c.rope.head_dim = d;
            c.rope.rotary_dim = frac == 1 ? 0 : r;
            c.rope.style = style;
            c.rope.layout = layout;
            c.rope.in_place = in_place;
            c.rope.dtype = kFloatTypes[seed % 3];
            c.w_dtype = kFloatTypes[(seed / 3) % 3];
            c.with_rstd = seed % 2 == 0;
            c.rope.seed = seed++;
            expect_pass(c);
          }
        }
      }
    }
  }
}

TEST(GpuQkNormRopeBackward, DtypesGqaSourcesAndRstd) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (auto heads : {std::pair<int64_t, int64_t>{32, 8}, {16, 1}}) {
      for (CosSinKind src : {CosSinKind::kCache, CosSinKind::kHfCosSin,
                             CosSinKind::kHfCosSinGathered, CosSinKind::kInvFreq}) {
        for (bool with_rstd : {true, false}) {
          QkNormRopeBackwardCase c;
          c.rope.seq = 21;
          c.rope.hq = heads.first;
          c.rope.hk = heads.second;
          c.rope.head_dim = 128;
          c.rope.dtype = dt;
          c.rope.source = src;
          c.rope.cs_dtype = kFloatTypes[seed % 3];
          if (src == CosSinKind::kInvFreq) c.rope.attention_scaling = 1.25f;
          c.rope.pos_kind = seed % 2 ? RopePosKind::kI32 : RopePosKind::kI64;
          c.rope.layout = seed % 3 ? RopeLayout::kPackedQkv : RopeLayout::kSeparate;
          c.rope.in_place = seed % 4 == 1;
          c.w_dtype = kFloatTypes[(seed + 1) % 3];  // never q's for the first pass of each dt
          c.with_rstd = with_rstd;
          c.rope.seed = seed++;
          expect_pass(c);
          // wk (so dwk) in another dtype than wq: the column sums in two launches, not one
          // (its own seeds, so the cases above keep theirs).
          if (c.w_dtype != DType::kFloat32 && src == CosSinKind::kCache) {
            c.wk_f32 = true;
            c.rope.seed += 5000;
            expect_pass(c);
          }
        }
      }
    }
  }
}

TEST(GpuQkNormRopeBackward, EpsOffsetArangeMisalignedNoDw) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 200;
  for (float eps : {1e-12f, 1e-2f}) {
    for (float o : {0.0f, 1.0f}) {
      for (bool want_dw : {true, false}) {
        QkNormRopeBackwardCase c;
        c.rope.seq = 9;
        c.rope.hq = 32;
        c.rope.hk = 8;
        c.rope.head_dim = 64;
        c.rope.style = seed % 2 ? RopeStyle::kGptj : RopeStyle::kNeox;
        c.rope.pos_kind = RopePosKind::kArange;
        c.rope.storage_offset = seed % 4 == 3 ? 1 : 0;  // the scalar path
        c.rope.dtype = kFloatTypes[seed % 3];
        c.eps = eps;
        c.weight_offset = o;
        c.with_rstd = want_dw;
        c.want_dw = want_dw;
        c.rope.seed = seed++;
        expect_pass(c);
      }
    }
  }
}

TEST(GpuQkNormRopeBackward, ShortWorkspaceIsRefusedAndNothingWritten) {
  ROPENORM_REQUIRE_GPU();
  QkNormRopeBackwardCase c;
  c.rope.seq = 700;
  c.rope.hq = 4;
  c.rope.hk = 2;
  c.rope.head_dim = 64;
  c.short_workspace = true;
  expect_pass(c);
}

TEST(GpuQkNormRopeBackward, ZeroHeadVectors) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t d : {6, 128}) {
      for (bool with_rstd : {true, false}) {
        QkNormRopeBackwardCase c;
        c.rope.seq = 5;
        c.rope.hq = 4;
        c.rope.hk = 2;
        c.rope.head_dim = d;
        c.rope.dtype = dt;
        c.rope.seed = 300 + d + with_rstd;
        c.eps = dt == DType::kFloat16 ? 1e-6f : 1e-12f;  // r = 1/sqrt(eps) keeps f16 finite
        c.with_rstd = with_rstd;
        auto in = verify::make_inputs(c);
        // Head 1 of q at token 2 and head 0 of k at token 4: all zeros (dx = r g, no dw share).
        for (int64_t j = 0; j < d; ++j) {
          in.rope.q.set((2 * c.rope.hq + 1) * d + j, 0.0);
          in.rope.k.set((4 * c.rope.hk + 0) * d + j, 0.0);
        }
        expect_pass(c, in);
      }
    }
  }
}

// Two runs of the same inputs give the same bits: dq, dk, dwq and dwk (fixed-order reductions).
TEST(GpuQkNormRopeBackward, BitwiseDeterministicRunToRun) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    QkNormRopeBackwardCase c;
    c.rope.seq = 3000;
    c.rope.hq = 32;
    c.rope.hk = 8;
    c.rope.head_dim = 128;
    c.rope.dtype = dt;
    c.rope.layout = RopeLayout::kPackedQkv;
    c.w_dtype = DType::kFloat32;
    c.with_rstd = false;
    c.rope.seed = 500;
    const auto in = verify::make_inputs(c);
    const auto a = expect_pass(c, in);
    const auto b = expect_pass(c, in);
    ASSERT_EQ(a.dq_val.bytes, b.dq_val.bytes);
    ASSERT_EQ(a.dk_val.bytes, b.dk_val.bytes);
    ASSERT_EQ(a.dwq.bytes, b.dwq.bytes);
    ASSERT_EQ(a.dwk.bytes, b.dwk.bytes);
  }
}

// Where the forward's lanes hold the backward's runs (16-bit q and k, full rotary, aligned
// operands: the forward's pair and lean kernels), r recomputed in the backward is the forward's
// saved r bit for bit, so both modes give the same dq, dk, dwq and dwk: on the lean and the
// general backward kernel, both styles, decode and long runs of the forward.
TEST(GpuQkNormRopeBackward, RecomputedRstdIsTheForwardsSaved) {
  ROPENORM_REQUIRE_GPU();
  struct Variant {
    DType dtype;
    int64_t head_dim, hq, hk, seq;
    RopeLayout layout;
  };
  const Variant variants[] = {
      {DType::kBFloat16, 128, 32, 8, 7, RopeLayout::kPackedQkv},
      {DType::kBFloat16, 128, 32, 8, 1100, RopeLayout::kPackedQkv},
      {DType::kFloat16, 64, 16, 1, 300, RopeLayout::kSeparate},
      {DType::kBFloat16, 256, 16, 8, 33, RopeLayout::kSeparate},
  };
  uint64_t seed = 1900;
  for (const Variant& v : variants) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      for (bool lean : {true, false}) {
        QkNormRopeBackwardCase c;
        c.rope.seq = v.seq;
        c.rope.hq = v.hq;
        c.rope.hk = v.hk;
        c.rope.head_dim = v.head_dim;
        c.rope.dtype = v.dtype;
        c.rope.style = style;
        c.rope.layout = v.layout;
        c.rope.seed = seed++;
        c.w_dtype = DType::kBFloat16;
        c.weight_offset = 1.0f;
        c.allow_lean = lean;
        c.rstd_from_forward = true;
        const auto in = verify::make_inputs(c);
        const auto saved = expect_pass(c, in);
        c.with_rstd = false;
        const auto recomputed = expect_pass(c, in);
        ASSERT_EQ(saved.dq_val.bytes, recomputed.dq_val.bytes) << recomputed.summary;
        ASSERT_EQ(saved.dk_val.bytes, recomputed.dk_val.bytes) << recomputed.summary;
        ASSERT_EQ(saved.dwq.bytes, recomputed.dwq.bytes) << recomputed.summary;
        ASSERT_EQ(saved.dwk.bytes, recomputed.dwk.bytes) << recomputed.summary;
      }
    }
  }
}

// A head's dq bits depend only on its own x, dout, position and the weights: not on T, not on
// the other heads.
TEST(GpuQkNormRopeBackward, HeadResultIndependentOfTAndOtherHeads) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t d : {6, 80, 256}) {
      QkNormRopeBackwardCase c;
      c.rope.seq = 33;
      c.rope.hq = 16;
      c.rope.hk = 4;
      c.rope.head_dim = d;
      c.rope.dtype = dt;
      c.rope.layout = RopeLayout::kPackedQkv;
      c.with_rstd = false;
      c.rope.seed = 400 + d;
      const auto in = verify::make_inputs(c);
      const auto a = expect_pass(c, in);

      // The same token alone (T = 1), at the same position.
      const int64_t tok = 17;
      QkNormRopeBackwardCase c1 = c;
      c1.rope.seq = 1;
      QkNormRopeBackwardInputs in1 = in;
      const size_t es = dtype_size(dt);
      const int64_t nq = c.rope.hq * d, nk = c.rope.hk * d;
      in1.rope.q = ref::slice(in.rope.q, tok * nq, nq);
      in1.rope.k = ref::slice(in.rope.k, tok * nk, nk);
      in1.dq_out = ref::slice(in.dq_out, tok * nq, nq);
      in1.dk_out = ref::slice(in.dk_out, tok * nk, nk);
      in1.rope.positions = {in.rope.positions[tok]};
      const auto b = expect_pass(c1, in1);
      ASSERT_NO_FATAL_FAILURE(expect_same_bits(b.dq_val, a.dq_val, tok * nq, nq, "dq"));
      ASSERT_NO_FATAL_FAILURE(expect_same_bits(b.dk_val, a.dk_val, tok * nk, nk, "dk"));

      // Every other head redrawn: head 3 of q and head 1 of k keep their bits.
      QkNormRopeBackwardInputs in2 = in;
      std::mt19937_64 rng(99);
      ref::fill_normal(in2.rope.q, rng, 3.0);
      ref::fill_normal(in2.rope.k, rng, 3.0);
      ref::fill_normal(in2.dq_out, rng, 2.0);
      ref::fill_normal(in2.dk_out, rng, 2.0);
      for (int64_t t = 0; t < c.rope.seq; ++t) {
        const size_t qo = static_cast<size_t>((t * c.rope.hq + 3) * d) * es;
        const size_t ko = static_cast<size_t>((t * c.rope.hk + 1) * d) * es;
        std::memcpy(in2.rope.q.bytes.data() + qo, in.rope.q.bytes.data() + qo, d * es);
        std::memcpy(in2.rope.k.bytes.data() + ko, in.rope.k.bytes.data() + ko, d * es);
        std::memcpy(in2.dq_out.bytes.data() + qo, in.dq_out.bytes.data() + qo, d * es);
        std::memcpy(in2.dk_out.bytes.data() + ko, in.dk_out.bytes.data() + ko, d * es);
      }
      const auto e = expect_pass(c, in2);
      for (int64_t t = 0; t < c.rope.seq; ++t) {
        for (int64_t j = 0; j < d; ++j) {
          ASSERT_EQ(e.dq_val.bits((t * c.rope.hq + 3) * d + j),
                    a.dq_val.bits((t * c.rope.hq + 3) * d + j));
          ASSERT_EQ(e.dk_val.bits((t * c.rope.hk + 1) * d + j),
                    a.dk_val.bits((t * c.rope.hk + 1) * d + j));
        }
      }
    }
  }
}

// The lean kernel (what the planner picks for these calls) gives the general kernel's dq and dk
// bits (the same call with the lean kernel disallowed), and both pass against the oracle
// (dw too: the two add its fp32 partials in different orders): both styles, f16 and bf16, f32 /
// bf16 / f16 tables (cache, Hugging Face table, per-token gathered), bf16 and f32 weights with
// an offset, saved and recomputed rstd, in place, D 64 / 128 / 256, and head counts that need
// two head groups (40 heads of D 256, 80 of D 128) or leave a row of the last group idle (43),
// and batches whose sequences end inside a block's run of tokens (3 x 301 and 2 x 389 tokens,
// positions per token and per-sequence offsets).
TEST(GpuQkNormRopeBackward, LeanKernelMatchesGeneralKernel) {
  ROPENORM_REQUIRE_GPU();
  struct Variant {
    DType dtype;
    RopeStyle style;
    CosSinKind source;
    DType cs_dtype;
    DType w_dtype;
    int64_t head_dim, hq, hk;
    bool with_rstd, in_place;
    RopePosKind pos_kind;
    int64_t batch = 0, seq = 777;
  };
  const Variant variants[] = {
      {DType::kBFloat16, RopeStyle::kNeox, CosSinKind::kCache, DType::kFloat32, DType::kBFloat16,
       128, 32, 8, true, false, RopePosKind::kI64},
      {DType::kBFloat16, RopeStyle::kGptj, CosSinKind::kCache, DType::kBFloat16, DType::kBFloat16,
       128, 32, 8, false, true, RopePosKind::kI32},
      {DType::kFloat16, RopeStyle::kNeox, CosSinKind::kHfCosSin, DType::kFloat16, DType::kFloat32,
       64, 16, 1, false, false, RopePosKind::kArange},
      {DType::kBFloat16, RopeStyle::kGptj, CosSinKind::kHfCosSinGathered, DType::kFloat32,
       DType::kFloat32, 256, 32, 8, true, false, RopePosKind::kI64},
      {DType::kBFloat16, RopeStyle::kNeox, CosSinKind::kCache, DType::kFloat32, DType::kBFloat16,
       128, 72, 8, true, true, RopePosKind::kI64},
      {DType::kFloat16, RopeStyle::kGptj, CosSinKind::kHfCosSin, DType::kBFloat16, DType::kBFloat16,
       128, 41, 2, false, false, RopePosKind::kI32},
      {DType::kBFloat16, RopeStyle::kNeox, CosSinKind::kCache, DType::kFloat32, DType::kBFloat16,
       128, 32, 8, true, false, RopePosKind::kI64, 3, 301},
      {DType::kBFloat16, RopeStyle::kGptj, CosSinKind::kHfCosSinGathered, DType::kBFloat16,
       DType::kBFloat16, 256, 32, 8, false, true, RopePosKind::kArangeSeqOffs, 2, 389},
  };
  uint64_t seed = 700;
  for (const Variant& v : variants) {
    QkNormRopeBackwardCase c;
    c.rope.batch = v.batch;
    c.rope.seq = v.seq;
    c.rope.hq = v.hq;
    c.rope.hk = v.hk;
    c.rope.head_dim = v.head_dim;
    c.rope.dtype = v.dtype;
    c.rope.style = v.style;
    c.rope.source = v.source;
    c.rope.cs_dtype = v.cs_dtype;
    c.rope.pos_kind = v.pos_kind;
    c.rope.in_place = v.in_place;
    c.rope.layout = RopeLayout::kPackedQkv;
    c.w_dtype = v.w_dtype;
    c.weight_offset = 1.0f;
    c.with_rstd = v.with_rstd;
    c.rope.seed = seed++;
    const auto in = verify::make_inputs(c);
    const auto a = expect_pass(c, in);
    QkNormRopeBackwardCase general = c;
    general.allow_lean = false;
    const auto b = expect_pass(general, in);
    ASSERT_EQ(a.dq_val.bytes, b.dq_val.bytes) << a.summary;
    ASSERT_EQ(a.dk_val.bytes, b.dk_val.bytes) << a.summary;
  }
}

// Many tokens (several tokens per block of the persistent grid, the largest grid): dw sums over
// about 650000 head vectors.
TEST(GpuQkNormRopeBackward, ManyTokens) {
  ROPENORM_REQUIRE_GPU();
  QkNormRopeBackwardCase c;
  c.rope.seq = 16384;
  c.rope.hq = 32;
  c.rope.hk = 8;
  c.rope.head_dim = 128;
  c.rope.table_rows = 16384;
  c.rope.layout = RopeLayout::kPackedQkv;
  c.rope.in_place = true;
  c.w_dtype = DType::kFloat32;
  c.rope.seed = 600;
  expect_pass(c);
}

}  // namespace
}  // namespace ropenorm
