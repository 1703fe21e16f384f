// GPU tests of rope against the float64 oracle: head dims (common and odd), rotary fractions,
// both styles, GQA head counts and k absent, every position kind, every cos/sin source and
// dtype, packed QKV views, the [B, H, S, D] layout, storage offset 1, in place, inverse, large
// positions and 64-bit offsets; plus properties (pair norms kept, inverse undoes forward, gptj is
// neox after the channel permutation, a token's bits do not depend on T) and the checked mode;
// long token runs (the long-run kernel) over sources, styles, dtypes, layouts and head groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/rope_plan.h"
#include "gpu_util.h"
#include "reference/host_float.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/rope_case.h"

namespace ropenorm {
namespace {

using verify::RopeCase;
using verify::RopeLayout;
using verify::RopePosKind;

verify::RopeOutcome expect_pass(const RopeCase& c) {
  const auto in = verify::make_inputs(c);
  auto out = verify::run_case(c, in);
  EXPECT_TRUE(out.status.ok()) << out.status.message();
  EXPECT_TRUE(out.passed) << out.summary;
  return out;
}

// Runs c against the oracle, then the same inputs on the general kernel (the lean kernels
// disallowed; the launcher's reported plan must say so, and that run passes the oracle too), and
// expects the two outputs bit for bit equal. *planned: the first run's plan.
void expect_general_kernel_bits(const RopeCase& c, core::RopePlan* planned) {
  const auto in = verify::make_inputs(c);
  const auto a = verify::run_case(c, in);
  ASSERT_TRUE(a.passed) << a.summary;
  *planned = a.plan;
  RopeCase general = c;
  general.allow_lean = false;
  const auto b = verify::run_case(general, in);
  ASSERT_TRUE(b.passed) << b.summary;
  ASSERT_FALSE(b.plan.lean_run || b.plan.lean) << b.summary;
  ASSERT_EQ(a.q_out.bytes, b.q_out.bytes) << a.summary;
  ASSERT_EQ(a.k_out.bytes, b.k_out.bytes) << a.summary;
}

// A case of the lean-kernel tests below: a packed QKV buffer (separate q when hk = 0, k absent),
// a table of 8192 rows.
struct LeanVariant {
  DType dtype;
  RopeStyle style;
  bool inverse;
  CosSinKind source;
  DType cs_dtype;
  int64_t hq, hk, head_dim, batch, seq;
  RopePosKind pos_kind;
  bool in_place;
  bool hf_bhsd = false;             ///< Hugging Face [B, H, S, D] buffers (k present)
  bool gathered_broadcast = false;  ///< gathered tables [S, R] broadcast over B (RopeCase)
};

RopeCase lean_variant_case(const LeanVariant& v, uint64_t seed) {
  RopeCase c;
  c.dtype = v.dtype;
  c.style = v.style;
  c.inverse = v.inverse;
  c.source = v.source;
  c.cs_dtype = v.cs_dtype;
  c.hq = v.hq;
  c.hk = v.hk;
  c.has_k = v.hk > 0;
  c.head_dim = v.head_dim;
  c.batch = v.batch;
  c.seq = v.seq;
  c.pos_kind = v.pos_kind;
  c.table_rows = 8192;
  c.layout = v.hf_bhsd  ? RopeLayout::kHfBhsd
             : v.hk > 0 ? RopeLayout::kPackedQkv
                        : RopeLayout::kSeparate;
  c.in_place = v.in_place;
  c.gathered_broadcast = v.gathered_broadcast;
  c.seed = seed;
  return c;
}

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const CosSinKind kSources[] = {CosSinKind::kCache, CosSinKind::kHfCosSin,
                               CosSinKind::kHfCosSinGathered, CosSinKind::kInvFreq};

TEST(GpuRope, HeadDimsRotaryFractionsStyles) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (int64_t d : {64, 80, 96, 128, 256, 2, 6, 34, 512}) {
    for (int64_t frac : {1, 2, 4}) {
      const int64_t r = d / frac;
      if (r < 2 || r % 2 != 0) continue;
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        RopeCase c;
        c.seq = 37;
        c.hq = 8;
        c.hk = 1;
        c.head_dim = d;
        c.rotary_dim = frac == 1 ? 0 : r;
        c.style = style;
        c.seed = seed++;
        expect_pass(c);
        c.dtype = DType::kFloat32;
        c.cs_dtype = DType::kBFloat16;
        c.seed = seed++;
        expect_pass(c);
      }
    }
  }
}

TEST(GpuRope, DtypesSourcesAndTableDtypes) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (CosSinKind src : kSources) {
      for (DType cs : kFloatTypes) {
        if (src == CosSinKind::kInvFreq && cs != DType::kFloat32) continue;
        for (int64_t d : {128, 80, 6}) {
          for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
            RopeCase c;
            c.batch = 3;
            c.seq = 11;
            c.hq = 4;
            c.hk = 2;
            c.head_dim = d;
            c.rotary_dim = d == 128 ? 64 : 0;
            c.style = style;
            c.dtype = dt;
            c.source = src;
            c.cs_dtype = cs;
            c.seed = seed++;
            expect_pass(c);
          }
        }
      }
    }
  }
}

TEST(GpuRope, HeadCountsLayoutsInPlace) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 300;
  struct Heads {
    int64_t hq, hk;
    bool has_k;
  };
  for (Heads hs : {Heads{32, 8, true}, Heads{8, 1, true}, Heads{4, 4, true}, Heads{8, 0, false}}) {
    for (RopeLayout layout : {RopeLayout::kSeparate, RopeLayout::kPackedQkv, RopeLayout::kHfBhsd}) {
      for (bool in_place : {false, true}) {
        for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
          RopeCase c;
          c.batch = 2;
          c.seq = 19;
          c.hq = hs.hq;
          c.hk = hs.hk;
          c.has_k = hs.has_k;
          c.head_dim = 128;
          c.layout = layout;
          c.in_place = in_place;
          c.dtype = dt;
          c.seed = seed++;
          expect_pass(c);
          c.rotary_dim = 32;  // pass-through channels: copied out of place, untouched in place
          c.style = RopeStyle::kGptj;
          c.seed = seed++;
          expect_pass(c);
        }
      }
    }
  }
}

TEST(GpuRope, PositionKinds) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 500;
  for (RopePosKind pk :
       {RopePosKind::kI32, RopePosKind::kI64, RopePosKind::kArange, RopePosKind::kArangeSeqOffs}) {
    for (int64_t batch : {0, 1, 2, 5}) {  // 2: B x S within the lean kernel's bound, 5 past it
      for (bool flat : {false, true}) {
        if (flat &&
            (batch == 0 || pk == RopePosKind::kArange || pk == RopePosKind::kArangeSeqOffs)) {
          continue;
        }
        for (CosSinKind src : {CosSinKind::kCache, CosSinKind::kHfCosSin, CosSinKind::kInvFreq}) {
          RopeCase c;
          c.batch = batch;
          c.seq = 23;
          c.hq = 8;
          c.hk = 2;
          c.head_dim = 64;
          c.pos_kind = pk;
          c.pos_flat = flat;
          c.seq_offs_i64 = (seed % 2) == 0;
          c.source = src;
          c.table_rows = 300;
          c.seed = seed++;
          expect_pass(c);
          c.check_positions = true;  // all positions valid: the checked mode must accept them
          c.seed = seed++;
          expect_pass(c);
        }
      }
    }
  }
}

// Positions up to 2^20 + 63: a large cache (only the used rows are built), the Hugging Face
// tables gathered per token, and the in-kernel fp32 angle (which the oracle forms the same way).
TEST(GpuRope, LargePositions) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 700;
  for (CosSinKind src : kSources) {
    for (DType dt : kFloatTypes) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        RopeCase c;
        c.seq = 257;
        c.hq = 4;
        c.hk = 1;
        // The Hugging Face table is two [P, R] tensors: 16-bit only, to keep them small.
        if (src == CosSinKind::kHfCosSin && dt == DType::kFloat32) continue;
        c.head_dim = 64;
        c.dtype = dt;
        c.style = style;
        c.source = src;
        c.cs_dtype = src == CosSinKind::kInvFreq ? DType::kFloat32 : dt;
        c.table_rows = (int64_t{1} << 20) + 64;
        c.theta = 500000.0;
        c.pos_kind = (seed % 2) ? RopePosKind::kI64 : RopePosKind::kI32;
        c.seed = seed++;
        expect_pass(c);
      }
    }
  }
  // Arange deep into a long context, per-sequence offsets.
  RopeCase c;
  c.batch = 3;
  c.seq = 64;
  c.hq = 8;
  c.hk = 8;
  c.head_dim = 64;
  c.table_rows = (int64_t{1} << 20) + 64;
  c.theta = 1e6;
  c.pos_kind = RopePosKind::kArangeSeqOffs;
  c.seed = seed++;
  expect_pass(c);
}

TEST(GpuRope, InvFreqAttentionScaling) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 800;
  for (float scaling : {1.0f, 1.2079442f, 0.5f}) {
    for (DType dt : kFloatTypes) {
      RopeCase c;
      c.batch = 2;
      c.seq = 33;
      c.hq = 8;
      c.hk = 2;
      c.head_dim = 96;
      c.dtype = dt;
      c.source = CosSinKind::kInvFreq;
      c.attention_scaling = scaling;
      c.table_rows = 200000;  // positions drawn up to 2e5 (no table is built for this source)
      c.seed = seed++;
      expect_pass(c);
    }
  }
}

// Storage offset 1 on every tensor: the scalar path, for every source, style and layout.
TEST(GpuRope, MisalignedStorageOffset) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 900;
  for (CosSinKind src : kSources) {
    for (RopeLayout layout : {RopeLayout::kSeparate, RopeLayout::kPackedQkv, RopeLayout::kHfBhsd}) {
      for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
        for (bool in_place : {false, true}) {
          RopeCase c;
          c.batch = 2;
          c.seq = 9;
          c.hq = 4;
          c.hk = 2;
          c.head_dim = 128;
          c.rotary_dim = 64;
          c.dtype = dt;
          c.source = src;
          c.cs_dtype = DType::kBFloat16;
          c.layout = layout;
          c.storage_offset = 1;
          c.in_place = in_place;
          c.style = (seed % 2) ? RopeStyle::kGptj : RopeStyle::kNeox;
          c.seed = seed++;
          expect_pass(c);
        }
      }
    }
  }
}

// More rows of heads than a block holds: the heads are split over head groups (grid y), each
// with its share of the pass-through channels. Aligned D 256 (16 lanes per head, 40 heads: 2
// groups), 64 q + 8 kv heads at D 128 (2 groups), and the scalar path (storage offset 1, 32
// lanes per head: 3 groups) with pass-through channels, in place and out of place. Each at
// 2 x 5 tokens (the aligned full-rotary shapes take the lean kernel there: one block per token,
// up to 1024 threads) and 2 x 40 (past kRopeLeanMaxTokens: the general kernel's head groups).
TEST(GpuRope, HeadGroups) {
  ROPENORM_REQUIRE_GPU();
  struct Shape {
    int64_t hq, hk, d, r, offset;
  };
  uint64_t seed = 950;
  for (const Shape& sh :
       {Shape{32, 8, 256, 0, 0}, Shape{32, 8, 256, 128, 0}, Shape{64, 8, 128, 0, 0},
        Shape{32, 8, 128, 64, 1}, Shape{61, 3, 256, 192, 1}}) {
    for (bool in_place : {false, true}) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        for (int64_t seq : {int64_t{5}, core::kRopeLeanMaxTokens / 2 + 8}) {
          RopeCase c;
          c.batch = 2;
          c.seq = seq;
          c.hq = sh.hq;
          c.hk = sh.hk;
          c.head_dim = sh.d;
          c.rotary_dim = sh.r;
          c.storage_offset = sh.offset;
          c.layout = RopeLayout::kPackedQkv;
          c.in_place = in_place;
          c.style = style;
          c.seed = seed++;
          expect_pass(c);
        }
      }
    }
  }
}

TEST(GpuRope, InverseAgainstOracle) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (CosSinKind src : kSources) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      RopeCase c;
      c.seq = 41;
      c.hq = 8;
      c.hk = 2;
      c.head_dim = 80;
      c.source = src;
      c.style = style;
      c.inverse = true;
      c.seed = seed++;
      expect_pass(c);
    }
  }
}

// Long token runs (T >= kRopeLongRunTokens: the single-round kernel at its long-run register
// budget): every source, both styles, every dtype, pass-through channels in and out of place,
// [B, S] with S not dividing the grid, packed QKV views, head groups, the inverse.
TEST(GpuRope, LongRuns) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1050;
  for (DType dt : kFloatTypes) {
    for (CosSinKind src : kSources) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        RopeCase c;
        c.batch = 3;
        c.seq = 1531;
        c.hq = 4;
        c.hk = 2;
        c.head_dim = 64;
        c.rotary_dim = style == RopeStyle::kGptj ? 32 : 0;
        c.dtype = dt;
        c.source = src;
        c.style = style;
        c.layout = RopeLayout::kPackedQkv;
        c.in_place = src == CosSinKind::kHfCosSin;
        c.inverse = src == CosSinKind::kInvFreq;
        c.pos_kind = src == CosSinKind::kCache ? RopePosKind::kArangeSeqOffs : RopePosKind::kI32;
        c.seed = seed++;
        expect_pass(c);
      }
    }
  }
  RopeCase g;  // 64 q + 8 kv heads at D 128: two head groups; T = 4099 tokens, one sequence
  g.seq = 4099;
  g.hq = 64;
  g.hk = 8;
  g.head_dim = 128;
  g.seed = seed++;
  ASSERT_EQ(core::plan_rope(g.tokens(), g.hq + g.hk, g.head_dim / 2, 8).head_groups, 2);
  expect_pass(g);
}

// The lean kernel (what the planner picks for these calls, as the launcher's reported plan
// shows: for cos/sin rows indexed by position and blocks of at most kRopeLeanLongRunThreads
// threads every run length the lean run does not take, so up to kRopeLeanRunMinTokens - 1 tokens
// at D 128 / 256 and every run at D 64; up to kRopeLeanMaxTokens tokens for gathered rows) gives
// the general kernel's bits (the same call with the lean kernel disallowed): both styles, both
// directions, f16 and bf16 data, every table source and table dtype, D 64 / 128 / 256, one
// sequence and B x S, in and out of place; a run of 3 tokens of 16 + 1 heads at D 256, whose
// heads the planner splits over three blocks of 6 rows per token (one row past the heads).
TEST(GpuRope, LeanKernelMatchesGeneralKernel) {
  ROPENORM_REQUIRE_GPU();
  const RopePosKind i64 = RopePosKind::kI64;
  const LeanVariant variants[] = {
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32, 32, 8, 128,
       0, core::kRopeLeanRunMinTokens - 1, i64, false},
      {DType::kFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSin, DType::kBFloat16, 32, 8, 64,
       3, 700, i64, true},
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kFloat16, 16, 8, 256,
       2, 1100, i64, false},
      {DType::kFloat16, RopeStyle::kNeox, true, CosSinKind::kHfCosSinGathered, DType::kFloat32, 32,
       8, 128, 2, core::kRopeLeanMaxTokens / 2, i64, true},
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32, 16, 1, 256,
       0, 3, i64, true},
  };
  uint64_t seed = 1100;
  for (const LeanVariant& v : variants) {
    const RopeCase c = lean_variant_case(v, seed++);
    core::RopePlan planned;
    ASSERT_NO_FATAL_FAILURE(expect_general_kernel_bits(c, &planned));
    ASSERT_TRUE(planned.lean) << verify::describe(c);
    // The 3-token run's 17 heads in 3 blocks per token (every device of the kernels' architectures
    // has the 5 or more multiprocessors this takes); the runs of 4095 tokens (40 heads at D 128)
    // and 2 x 1100 (24 at D 256) in 2 blocks per token, of at most kRopeLeanSplitMinThreads
    // threads, on any device of fewer than 1024 multiprocessors.
    if (v.hk == 1) EXPECT_EQ(planned.head_split, 3) << verify::describe(c);
    if (v.head_dim >= 128 && std::max<int64_t>(1, v.batch) * v.seq > 1000) {
      EXPECT_EQ(planned.head_split, 2) << verify::describe(c);
    }
  }
}

// The lean run (what the planner picks from kRopeLeanRunMinTokens tokens for loaded cos/sin and
// D 128 / 256, from kRopeLeanRunShortMinTokens where the lean kernel's block would
// be past kRopeLeanLongRunThreads: a persistent grid, each block's tokens interleaved over it; gptj
// through the row swizzle) gives the general kernel's bits: both styles, both directions, f16
// and bf16 data, the cache and the [P, R] table in every dtype, every explicit and implicit
// position kind, one sequence and B x S (sequences ending inside a block's stride), two head
// groups (D 256, 32 + 8 heads; D 128, 41 heads with an idle row and a partial last warp), 8 and
// 16 lanes a row in both styles, small blocks several to a multiprocessor, k absent, in and out
// of place; int64 positions on flat tokens (the flat walk: one sequence, a packed batch, k
// absent) and on Hugging Face [B, H, S, D] buffers of two sequences (not flat); Hugging Face's
// tables gathered per token (the source read at run time), one sequence and B x S, their [S, R]
// table broadcast over B (batch stride 0, as Hugging Face models pass it). Each case is first
// checked against the oracle, and the plan the launcher reports is the lean run (the general kernel
// with the lean ones disallowed).
TEST(GpuRope, LeanRunMatchesGeneralKernel) {
  ROPENORM_REQUIRE_GPU();
  const int64_t n = core::kRopeLeanRunMinTokens;
  const LeanVariant variants[] = {
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32, 32, 8, 128,
       0, n + 3, RopePosKind::kI64, false},
      {DType::kFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSin, DType::kBFloat16, 24, 8, 128,
       3, 1501, RopePosKind::kI32, true},
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat16, 32, 8, 256,
       2, 2101, RopePosKind::kArangeSeqOffs, false},
      {DType::kFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kFloat32, 9, 3, 128, 2,
       2500, RopePosKind::kI64, true},
      {DType::kBFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSin, DType::kFloat32, 16, 0, 256,
       0, n, RopePosKind::kArange, false},
      {DType::kFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kBFloat16, 32, 8, 256,
       2, 2101, RopePosKind::kI32, true},
      // 41 heads: two groups of 21 rows (168 threads, a partial last warp), one row idle.
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kHfCosSin, DType::kFloat16, 33, 8,
       128, 0, n + 1, RopePosKind::kI64, false},
      // 9 + 1 heads: 80-thread blocks, the last warp half full.
      {DType::kFloat16, RopeStyle::kGptj, true, CosSinKind::kCache, DType::kFloat32, 9, 1, 128, 3,
       1400, RopePosKind::kArangeSeqOffs, true},
      // int64 positions: k absent on flat tokens; [B, H, S, D] buffers (not flat), both styles.
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32, 16, 0, 128,
       0, n + 2, RopePosKind::kI64, false},
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kCache, DType::kFloat32, 32, 8, 128,
       2, 2101, RopePosKind::kI64, false, true},
      {DType::kFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSin, DType::kFloat16, 16, 4, 256,
       2, 2101, RopePosKind::kI64, true, true},
      // D 256, 32 + 8 heads (16 lanes x 40 rows): from kRopeLeanRunShortMinTokens.
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kCache, DType::kFloat32, 32, 8, 256,
       0, core::kRopeLeanRunShortMinTokens + 5, RopePosKind::kI64, false},
      {DType::kFloat16, RopeStyle::kNeox, true, CosSinKind::kHfCosSin, DType::kBFloat16, 32, 8, 256,
       2, core::kRopeLeanRunShortMinTokens / 2, RopePosKind::kI32, true},
      // Gathered tables: one sequence and B x S per token (flat tokens: LeanTokensFlat); B x S
      // broadcast over B (LeanAny); both styles, the three table dtypes, 8 and 16 lanes, in
      // place and out, the inverse rotation.
      {DType::kBFloat16, RopeStyle::kNeox, false, CosSinKind::kHfCosSinGathered, DType::kFloat16,
       32, 8, 128, 0, n + 3, RopePosKind::kI64, false},
      {DType::kFloat16, RopeStyle::kGptj, true, CosSinKind::kHfCosSinGathered, DType::kFloat32, 16,
       4, 256, 2, 2101, RopePosKind::kI64, true},
      {DType::kBFloat16, RopeStyle::kNeox, true, CosSinKind::kHfCosSinGathered, DType::kFloat32, 32,
       8, 128, 3, 1501, RopePosKind::kI64, false, false, true},
      {DType::kBFloat16, RopeStyle::kGptj, false, CosSinKind::kHfCosSinGathered, DType::kBFloat16,
       32, 8, 256, 2, core::kRopeLeanRunShortMinTokens / 2 + 3, RopePosKind::kI64, true, false,
       true},
  };
  uint64_t seed = 1200;
  for (const LeanVariant& v : variants) {
    const RopeCase c = lean_variant_case(v, seed++);
    core::RopePlan planned;
    ASSERT_NO_FATAL_FAILURE(expect_general_kernel_bits(c, &planned));
    ASSERT_TRUE(planned.lean_run) << "the lean run was not planned: " << verify::describe(c);
  }
}

// Decode-like and large-token shapes of the standard benchmark set.
TEST(GpuRope, StandardShapes) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 1100;
  for (int64_t t : {1, 64, 1024, 8192}) {
    for (int64_t d : {64, 128, 256}) {
      RopeCase c;
      c.seq = t;
      c.hq = 32;
      c.hk = 8;
      c.head_dim = d;
      c.layout = RopeLayout::kPackedQkv;
      c.in_place = true;
      c.seed = seed++;
      expect_pass(c);
    }
  }
}

// Every pair's norm is kept (a rotation), within rounding.
TEST(GpuRope, PairNormsPreserved) {
  ROPENORM_REQUIRE_GPU();
  for (CosSinKind src : kSources) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      RopeCase c;
      c.seq = 29;
      c.hq = 4;
      c.hk = 0;
      c.has_k = false;
      c.head_dim = 64;
      c.dtype = DType::kFloat32;
      c.source = src;
      c.style = style;
      c.seed = 1200 + static_cast<uint64_t>(src) * 2 + static_cast<uint64_t>(style);
      const auto in = verify::make_inputs(c);
      const auto out = verify::run_case(c, in);
      ASSERT_TRUE(out.passed) << out.summary;
      const int64_t h = 32;
      for (int64_t row = 0; row < c.seq * c.hq; ++row) {
        for (int64_t i = 0; i < h; ++i) {
          const int64_t ia = style == RopeStyle::kNeox ? i : 2 * i;
          const int64_t ib = style == RopeStyle::kNeox ? i + h : 2 * i + 1;
          const double n0 = std::hypot(in.q.get(row * 64 + ia), in.q.get(row * 64 + ib));
          const double n1 = std::hypot(out.q_out.get(row * 64 + ia), out.q_out.get(row * 64 + ib));
          ASSERT_NEAR(n1, n0, 1e-5 * (n0 + 1e-30)) << "row " << row << " pair " << i;
        }
      }
    }
  }
}

// rope(rope(x), inverse) == x within rounding.
TEST(GpuRope, InverseUndoesForward) {
  ROPENORM_REQUIRE_GPU();
  for (CosSinKind src : kSources) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      RopeCase c;
      c.batch = 2;
      c.seq = 17;
      c.hq = 4;
      c.hk = 2;
      c.head_dim = 128;
      c.rotary_dim = 96;
      c.dtype = DType::kFloat32;
      c.source = src;
      c.style = style;
      c.seed = 1300 + static_cast<uint64_t>(src) * 2 + static_cast<uint64_t>(style);
      const auto in = verify::make_inputs(c);
      const auto fwd = verify::run_case(c, in);
      ASSERT_TRUE(fwd.passed) << fwd.summary;
      auto in2 = in;
      in2.q = fwd.q_out;
      in2.k = fwd.k_out;
      RopeCase c2 = c;
      c2.inverse = true;
      const auto back = verify::run_case(c2, in2);
      ASSERT_TRUE(back.passed) << back.summary;
      for (int64_t i = 0; i < in.q.numel(); ++i) {
        ASSERT_NEAR(back.q_out.get(i), in.q.get(i), 1e-5 * (1.0 + std::fabs(in.q.get(i)))) << i;
      }
      for (int64_t i = 0; i < in.k.numel(); ++i) {
        ASSERT_NEAR(back.k_out.get(i), in.k.get(i), 1e-5 * (1.0 + std::fabs(in.k.get(i)))) << i;
      }
    }
  }
}

// gptj on x equals neox on P x (P: channel 2i -> i, 2i + 1 -> h + i), bit for bit, mapped back.
TEST(GpuRope, GptjIsNeoxAfterChannelPermutation) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t r : {128, 64, 6}) {
      RopeCase c;
      c.seq = 31;
      c.hq = 4;
      c.hk = 2;
      c.head_dim = 128;
      c.rotary_dim = r;
      c.dtype = dt;
      c.style = RopeStyle::kGptj;
      c.seed = 1400 + static_cast<uint64_t>(r);
      const auto in = verify::make_inputs(c);
      const auto g = verify::run_case(c, in);
      ASSERT_TRUE(g.passed) << g.summary;
      const int64_t h = r / 2, d = c.head_dim;
      auto permute = [&](const verify::HostTensor& x) {
        verify::HostTensor y = x;
        const size_t es = dtype_size(x.dtype);
        for (int64_t row = 0; row < x.numel() / d; ++row) {
          for (int64_t i = 0; i < h; ++i) {
            std::memcpy(y.bytes.data() + (row * d + i) * es,
                        x.bytes.data() + (row * d + 2 * i) * es, es);
            std::memcpy(y.bytes.data() + (row * d + h + i) * es,
                        x.bytes.data() + (row * d + 2 * i + 1) * es, es);
          }
        }
        return y;
      };
      auto in2 = in;
      in2.q = permute(in.q);
      in2.k = permute(in.k);
      RopeCase c2 = c;
      c2.style = RopeStyle::kNeox;
      const auto n = verify::run_case(c2, in2);
      ASSERT_TRUE(n.passed) << n.summary;
      const auto gq = permute(g.q_out);
      const auto gk = permute(g.k_out);
      for (int64_t i = 0; i < gq.numel(); ++i) ASSERT_EQ(gq.bits(i), n.q_out.bits(i)) << i;
      for (int64_t i = 0; i < gk.numel(); ++i) ASSERT_EQ(gk.bits(i), n.k_out.bits(i)) << i;
    }
  }
}

// Token 0's output bits are the same whatever T (and whatever kernel and block shape the plan
// picks: the lean kernel at every T for cos/sin rows indexed by position, up to
// kRopeLeanMaxTokens tokens for gathered rows, the general one above), for both
// styles, both directions, 16-bit data types and table dtypes, and head dims 64 / 128 / 256.
TEST(GpuRope, TokenResultIndependentOfT) {
  ROPENORM_REQUIRE_GPU();
  struct Variant {
    DType dtype;
    RopeStyle style;
    int64_t head_dim;
    bool inverse;
    DType cs_dtype;
  };
  const Variant variants[] = {
      {DType::kBFloat16, RopeStyle::kNeox, 128, false, DType::kFloat32},
      {DType::kFloat16, RopeStyle::kGptj, 64, true, DType::kFloat32},
      {DType::kBFloat16, RopeStyle::kGptj, 256, false, DType::kBFloat16},
  };
  for (const Variant& v : variants) {
    for (CosSinKind src : kSources) {
      std::vector<std::vector<uint64_t>> first;
      for (int64_t t : {int64_t{1}, int64_t{3}, core::kRopeLeanMaxTokens,
                        core::kRopeLeanMaxTokens + 1, int64_t{4097}}) {
        RopeCase c;
        c.seq = t;
        c.hq = 8;
        c.hk = 2;
        c.head_dim = v.head_dim;
        c.dtype = v.dtype;
        c.style = v.style;
        c.inverse = v.inverse;
        c.cs_dtype = v.cs_dtype;
        c.source = src;
        c.seed = 1500 + static_cast<uint64_t>(t);
        auto in = verify::make_inputs(c);
        RopeCase c1 = c;
        c1.seq = 1;
        c1.seed = 99;
        const auto in1 = verify::make_inputs(c1);
        const size_t qrow = static_cast<size_t>(c.hq * c.head_dim) * dtype_size(c.dtype);
        const size_t krow = static_cast<size_t>(c.hk * c.head_dim) * dtype_size(c.dtype);
        std::memcpy(in.q.bytes.data(), in1.q.bytes.data(), qrow);
        std::memcpy(in.k.bytes.data(), in1.k.bytes.data(), krow);
        in.positions[0] = 1234;
        if (src == CosSinKind::kHfCosSinGathered) {
          // Token 0's gathered row from the one-token inputs, with its position.
          const size_t crow = static_cast<size_t>(c.rot()) * dtype_size(c.cs_dtype);
          std::memcpy(in.cos.bytes.data(), in1.cos.bytes.data(), crow);
          std::memcpy(in.sin.bytes.data(), in1.sin.bytes.data(), crow);
        }
        const auto out = verify::run_case(c, in);
        ASSERT_TRUE(out.passed) << out.summary;
        std::vector<uint64_t> bits;
        for (int64_t i = 0; i < c.hq * c.head_dim; ++i) bits.push_back(out.q_out.bits(i));
        for (int64_t i = 0; i < c.hk * c.head_dim; ++i) bits.push_back(out.k_out.bits(i));
        first.push_back(bits);
      }
      for (size_t i = 1; i < first.size(); ++i) ASSERT_EQ(first[0], first[i]) << "run " << i;
    }
  }
}

// Checked mode: a position outside [0, P) fails before anything is written, naming the token.
TEST(GpuRope, CheckedModeRejectsBadPosition) {
  ROPENORM_REQUIRE_GPU();
  for (RopePosKind pk : {RopePosKind::kI32, RopePosKind::kI64, RopePosKind::kArangeSeqOffs}) {
    for (CosSinKind src : {CosSinKind::kCache, CosSinKind::kHfCosSin}) {
      for (bool in_place : {false, true}) {
        RopeCase c;
        c.batch = 3;
        c.seq = 10;
        c.hq = 4;
        c.hk = 1;
        c.head_dim = 64;
        c.pos_kind = pk;
        c.source = src;
        c.table_rows = 100;
        c.check_positions = true;
        c.in_place = in_place;
        c.bad_token = 17;
        c.seed = 1600 + static_cast<uint64_t>(pk);
        const auto in = verify::make_inputs(c);
        const auto out = verify::run_case(c, in);
        ASSERT_FALSE(out.status.ok()) << out.summary;
        const int64_t first_bad = pk == RopePosKind::kArangeSeqOffs ? 10 : 17;
        EXPECT_NE(out.status.message().find("token " + std::to_string(first_bad)),
                  std::string::npos)
            << out.status.message();
        EXPECT_NE(out.status.message().find("expected"), std::string::npos);
        EXPECT_NE(out.status.message().find("received"), std::string::npos);
        EXPECT_EQ(out.pad_written, 0) << out.summary;
      }
    }
  }
}

// Zero tokens and zero heads: valid no-ops.
TEST(GpuRope, ZeroSizeIsNoOp) {
  ROPENORM_REQUIRE_GPU();
  verify::DeviceBuffer q(64), cache(4 * 8 * 4), pos(8);
  const Device d = Device::cuda(0);
  RopeCosSin cs;
  cs.cache = TensorRef::contiguous(cache.get(), DType::kFloat32, {4, 8}, d);
  RopePositions p;
  const TensorRef q0 = TensorRef::contiguous(q.get(), DType::kBFloat16, {0, 2, 8}, d);
  p.positions = TensorRef::contiguous(pos.get(), DType::kInt32, {0}, d);
  EXPECT_TRUE(rope(q0, TensorRef(), q0, TensorRef(), p, cs, RopeParams{}).ok());
  const TensorRef qh = TensorRef::contiguous(q.get(), DType::kBFloat16, {2, 0, 8}, d);
  p.positions = TensorRef::contiguous(pos.get(), DType::kInt32, {2}, d);
  RopeParams checked;
  checked.check_positions = true;
  EXPECT_TRUE(rope(qh, TensorRef(), qh, TensorRef(), p, cs, checked).ok());
  EXPECT_TRUE(verify::sync_device().ok());
}

// Element offsets beyond 2^31: a [2, 3, 2, 128] bf16 view whose batch stride is 2^31 + 64
// elements (4 GiB apart), rotated in place; only the viewed bytes are uploaded and checked.
TEST(GpuRope, SixtyFourBitOffsets) {
  ROPENORM_REQUIRE_GPU();
  const int64_t B = 2, S = 3, H = 2, D = 128, R = 128, P = 16;
  const int64_t sb = (int64_t{1} << 31) + 64;
  const size_t es = 2;
  verify::DeviceBuffer buf(static_cast<size_t>(sb + S * H * D) * es);
  std::mt19937_64 rng(42);
  verify::HostTensor x(DType::kBFloat16, B * S * H * D);
  ref::fill_normal(x, rng);
  for (int64_t b = 0; b < B; ++b) {
    buf.upload(x.bytes.data() + b * S * H * D * es, S * H * D * es,
               static_cast<size_t>(b * sb) * es);
  }
  RopeConfig cfg;
  cfg.rotary_dim = R;
  verify::HostTensor cache(DType::kFloat32, P * R);
  ASSERT_TRUE(build_rope_cache(cfg, P, DType::kFloat32, cache.bytes.data()).ok());
  auto dcache = verify::to_device(cache);
  std::vector<int64_t> posv = {5, 0, 15, 7, 7, 2};
  verify::DeviceBuffer dpos(posv.size() * 8);
  dpos.upload(posv.data(), posv.size() * 8);
  const Device d = Device::cuda(0);
  const TensorRef q(buf.get(), DType::kBFloat16, {B, S, H, D}, {sb, H * D, D, 1}, d);
  RopePositions p;
  p.positions = TensorRef::contiguous(dpos.get(), DType::kInt64, {B, S}, d);
  RopeCosSin cs;
  cs.cache = TensorRef::contiguous(dcache.get(), DType::kFloat32, {P, R}, d);
  ASSERT_TRUE(rope(q, TensorRef(), q, TensorRef(), p, cs, RopeParams{}).ok());
  ASSERT_TRUE(verify::sync_device().ok());
  verify::HostTensor y(DType::kBFloat16, B * S * H * D);
  for (int64_t b = 0; b < B; ++b) {
    buf.download(y.bytes.data() + b * S * H * D * es, S * H * D * es,
                 static_cast<size_t>(b * sb) * es);
  }
  const double tol = ref::tolerance_ulp("rope", "q_out", DType::kBFloat16);
  std::vector<double> cv(R / 2), sv(R / 2), in(D), ref_out(D);
  for (int64_t t = 0; t < B * S; ++t) {
    for (int64_t i = 0; i < R / 2; ++i) {
      cv[i] = cache.get(posv[t] * R + i);
      sv[i] = cache.get(posv[t] * R + R / 2 + i);
    }
    for (int64_t hd = 0; hd < H; ++hd) {
      const int64_t base = (t * H + hd) * D;
      for (int64_t j = 0; j < D; ++j) in[j] = x.get(base + j);
      ref::rope_rotate_ref(in.data(), ref_out.data(), D, R, RopeStyle::kNeox, cv.data(), sv.data(),
                           false);
      for (int64_t j = 0; j < D; ++j) {
        const double rounded = ref::round_to_dtype(ref_out[j], DType::kBFloat16);
        ASSERT_LE(std::fabs(y.get(base + j) - rounded) / ref::ulp_of(rounded, DType::kBFloat16),
                  tol)
            << "token " << t << " head " << hd << " ch " << j;
      }
    }
  }
}

}  // namespace
}  // namespace ropenorm
