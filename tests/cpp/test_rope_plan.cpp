// RoPE launch planning: the vector width from the head geometry, alignment and strides, and the
// block shape (pairs x heads x tokens, at most kRopeBlockThreads threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "core/rope_plan.h"
#include "cuda/rope/rope_args.h"
#include "lean_facts.h"

namespace ropenorm::core {
namespace {

alignas(16) unsigned char g_buf[4096];

const void* at(int64_t byte_offset) { return g_buf + byte_offset; }

TEST(CpuRopePlan, VectorWidthFromGeometry) {
  // bf16, aligned, strides multiples of 8: the full 16-byte vector whenever h and D allow it.
  auto w = [](int64_t half, int64_t d, int es) {
    return rope_vector_width(half, d, es, {{at(0), es, {4096, 128}}, {at(0), 4, {128}}});
  };
  EXPECT_EQ(w(64, 128, 2), 8);  // D 128, full rotary
  EXPECT_EQ(w(32, 128, 2), 8);  // R = 64
  EXPECT_EQ(w(16, 128, 2), 8);  // R = 32
  EXPECT_EQ(w(40, 80, 2), 8);   // D 80
  EXPECT_EQ(w(20, 80, 2), 4);   // D 80, R 40
  EXPECT_EQ(w(10, 80, 2), 2);   // D 80, R 20
  EXPECT_EQ(w(48, 96, 2), 8);   // D 96
  EXPECT_EQ(w(12, 96, 2), 4);   // D 96, R 24
  EXPECT_EQ(w(17, 34, 2), 1);   // D 34: 17 pairs
  EXPECT_EQ(w(3, 6, 2), 1);     // D 6
  EXPECT_EQ(w(1, 2, 2), 1);     // D 2
  EXPECT_EQ(w(256, 512, 2), 8);
  EXPECT_EQ(w(64, 128, 4), 4);  // f32: 4 per 16 bytes
  EXPECT_EQ(w(10, 80, 4), 2);
  EXPECT_EQ(w(8, 34, 2), 2);  // h 8 but D 34: the pass-through tail forces 2
}

TEST(CpuRopePlan, VectorWidthFromAlignment) {
  // Storage offset of one element on q: scalar.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(2), 2, {128}}}), 1);
  // Base aligned to 4 bytes only: two bf16 per access.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(4), 2, {128}}}), 2);
  // Base aligned to 8 bytes: four.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(8), 2, {128}}}), 4);
  // A token stride that is not a multiple of 8 elements limits the width.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {132, 128}}}), 4);
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {130}}}), 2);
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {129}}}), 1);
  // An f32 cache at a 4-byte offset limits a bf16 q to scalar (V f32 values need V * 4 bytes).
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {128}}, {at(4), 4, {128}}}), 1);
  // A cache row stride that is not a multiple of V.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {128}}, {at(0), 2, {132}}}), 4);
  // Absent operands (k when there is none) do not count.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {128}}, {nullptr, 2, {1}}}), 8);
  // Zero strides (single-index dims) are multiples of everything.
  EXPECT_EQ(rope_vector_width(64, 128, 2, {{at(0), 2, {0, 128, 0}}}), 8);
}

TEST(CpuRopePlan, BlockShape) {
  // Decode, 32 q + 8 kv heads, bf16 D 128: 8 pair vectors x 20 pairs of heads, one token.
  RopePlan p = plan_rope(1, 40, 64, 8);
  EXPECT_EQ(p.vec, 8);
  EXPECT_EQ(p.bx, 8);
  EXPECT_EQ(p.by, 20);
  EXPECT_EQ(p.bz, 1);
  EXPECT_EQ(p.grid, 1);
  EXPECT_FALSE(p.long_run);
  // Many tokens: one token per block of 160 threads, a long run.
  p = plan_rope(65536, 40, 64, 8);
  EXPECT_EQ(p.bx * p.by * p.bz, 160);
  EXPECT_EQ(p.bz, 1);
  EXPECT_EQ(p.grid, 65536);
  EXPECT_TRUE(p.long_run);
  EXPECT_TRUE(plan_rope(kRopeLongRunTokens, 40, 64, 8).long_run);
  EXPECT_FALSE(plan_rope(kRopeLongRunTokens - 1, 40, 64, 8).long_run);
  // Few heads and pairs: several tokens per block.
  p = plan_rope(1000, 8, 32, 8);
  EXPECT_EQ(p.bx, 4);
  EXPECT_EQ(p.by, 4);
  EXPECT_EQ(p.bz, 16);
  EXPECT_EQ(p.grid, 63);
  // Many pair vectors (scalar D 512): 32 threads across, looping.
  p = plan_rope(10, 2, 256, 1);
  EXPECT_EQ(p.bx, 32);
  EXPECT_EQ(p.by, 1);
  EXPECT_EQ(p.bz, 8);
  EXPECT_EQ(p.grid, 2);
  // Many heads: 500 rows of 2 heads split into 16 head groups of 32 rows (grid y).
  p = plan_rope(10, 1000, 64, 8);
  EXPECT_EQ(p.by, 32);
  EXPECT_EQ(p.head_groups, 16);
  EXPECT_TRUE(p.single);
  // 64 q + 8 kv heads at D 128 (36 rows, 32 fit a block): two groups of 18 rows.
  p = plan_rope(65536, 72, 64, 8);
  EXPECT_EQ(p.by, 18);
  EXPECT_EQ(p.head_groups, 2);
  EXPECT_TRUE(p.single);
  // The grid is capped; the kernel loops over the rest.
  p = plan_rope(int64_t{1} << 40, 40, 64, 8);
  EXPECT_EQ(p.grid, kRopeMaxGrid);
  // bz never exceeds the token count, nor CUDA's 64.
  p = plan_rope(3, 1, 1, 1);
  EXPECT_EQ(p.bz, 3);
  p = plan_rope(1000, 1, 1, 1);
  EXPECT_EQ(p.bz, 64);
}

TEST(CpuRopePlan, SingleRoundWhenEveryThreadHasOneTokenOnePairVectorOneRoundOfHeads) {
  // The standard shapes with D = 64 and 128: one token per block slice, every pair vector and
  // head covered.
  for (int64_t tokens : {1, 64, 1024, 65536}) {
    for (int64_t half : {32, 64}) {
      const RopePlan p = plan_rope(tokens, 40, half, 8);
      EXPECT_TRUE(p.single) << tokens << " " << half;
      EXPECT_GE(p.grid * p.bz, tokens);
      EXPECT_GE(p.by * kRopeHeadsPerThread, 40);
      EXPECT_GE(p.bx * 8, half);
    }
  }
  // D = 256 (16 pair vectors, 16 rows of heads per block): the 20 rows of 2 heads in two head
  // groups of 10 rows.
  const RopePlan d256 = plan_rope(1024, 40, 128, 8);
  EXPECT_TRUE(d256.single);
  EXPECT_EQ(d256.bx, 16);
  EXPECT_EQ(d256.by, 10);
  EXPECT_EQ(d256.head_groups, 2);
  // More pair vectors than a block row (scalar D 512): the kernel loops over them.
  EXPECT_FALSE(plan_rope(10, 2, 256, 1).single);
  EXPECT_FALSE(plan_rope(100000, 2, 256, 1).long_run);
  // More tokens than the largest grid covers: the grid loops.
  EXPECT_FALSE(plan_rope(int64_t{1} << 40, 40, 64, 8).single);
}

TEST(CpuRopePlan, ThreadsWithinLimits) {
  for (int64_t tokens : {1, 2, 7, 100, 100000}) {
    for (int64_t heads : {1, 2, 9, 40, 128, 1000}) {
      for (int64_t half : {1, 3, 17, 32, 64, 128, 256}) {
        for (int vec : {1, 2, 4, 8}) {
          if (half % vec != 0) continue;
          const RopePlan p = plan_rope(tokens, heads, half, vec);
          EXPECT_GE(p.bx, 1);
          EXPECT_GE(p.by, 1);
          EXPECT_GE(p.bz, 1);
          EXPECT_LE(p.bx * p.by * p.bz, kRopeBlockThreads);
          EXPECT_LE(p.bz, 64);
          EXPECT_LE(p.by * kRopeHeadsPerThread, heads + kRopeHeadsPerThread - 1);
          // Every head has a thread row, and no head group is empty.
          EXPECT_GE(int64_t{p.head_groups} * p.by * kRopeHeadsPerThread, heads);
          EXPECT_LT(int64_t{p.head_groups - 1} * p.by * kRopeHeadsPerThread, heads);
          EXPECT_LE(p.head_groups, kRopeMaxHeadGroups);
          EXPECT_LE(p.bx, 32);
          EXPECT_GE(p.grid * p.bz, tokens < kRopeMaxGrid ? tokens : kRopeMaxGrid);
        }
      }
    }
  }
}

using plan_test::lean_facts;

TEST(CpuRopePlan, LeanRuleForShortRunsOnly) {
  // Decode of 32 + 8 heads of D 64 / 128 / 256, up to the token bound.
  EXPECT_TRUE(rope_lean(lean_facts(1, 40, 64, 128)));
  EXPECT_TRUE(rope_lean(lean_facts(1, 40, 32, 64)));
  EXPECT_TRUE(rope_lean(lean_facts(kRopeLeanMaxTokens, 40, 128, 256)));
  EXPECT_TRUE(rope_lean(lean_facts(1, 1, 8, 16)));  // one lane, one head
  EXPECT_FALSE(rope_lean(lean_facts(kRopeLeanMaxTokens + 1, 40, 64, 128)));
  EXPECT_FALSE(rope_lean(lean_facts(0, 40, 64, 128)));
  EXPECT_FALSE(rope_lean(lean_facts(1, 0, 64, 128)));
  // Pass-through channels (R < D), a half that is not whole vectors.
  EXPECT_FALSE(rope_lean(lean_facts(1, 40, 32, 128)));
  EXPECT_FALSE(rope_lean(lean_facts(1, 40, 4, 8)));
  // More threads than a block: 16 lanes x 65 heads.
  EXPECT_TRUE(rope_lean(lean_facts(1, 64, 128, 256)));
  EXPECT_FALSE(rope_lean(lean_facts(1, 65, 128, 256)));
  // 32-bit q/k, a narrower vector (alignment), cos/sin computed from inv_freq.
  RopeLeanFacts f = lean_facts(1, 40, 64, 128);
  f.elem_size = 4;
  f.vec = 4;
  EXPECT_FALSE(rope_lean(f));
  f = lean_facts(1, 40, 64, 128);
  f.vec = 4;
  EXPECT_FALSE(rope_lean(f));
  f = lean_facts(1, 40, 64, 128);
  f.cos_sin_loaded = false;
  EXPECT_FALSE(rope_lean(f));
  // A caller's own token bound (QK-norm + RoPE: every run); the grid (S, B) within CUDA's
  // limits: B <= 65535 sequences, S <= 2^31 - 1 tokens each.
  EXPECT_TRUE(rope_lean(lean_facts(65536, 40, 64, 128), INT64_MAX));
  EXPECT_FALSE(rope_lean(lean_facts(65, 40, 64, 128), 64));
  f = lean_facts(kRopeMaxHeadGroups, 40, 64, 128);
  f.seq = 1;
  EXPECT_TRUE(rope_lean(f, INT64_MAX));
  f = lean_facts(kRopeMaxHeadGroups + 1, 40, 64, 128);
  f.seq = 1;
  EXPECT_FALSE(rope_lean(f, INT64_MAX));
  EXPECT_TRUE(rope_lean(lean_facts(kRopeLeanMaxSeq, 40, 64, 128), INT64_MAX));
  EXPECT_FALSE(rope_lean(lean_facts(kRopeLeanMaxSeq + 1, 40, 64, 128), INT64_MAX));
  f = lean_facts(2 * (kRopeLeanMaxSeq + 1), 40, 64, 128);
  f.seq = kRopeLeanMaxSeq + 1;
  EXPECT_FALSE(rope_lean(f, INT64_MAX));
}

// The token bound of the RoPE launcher: every run for blocks of up to kRopeLeanLongRunThreads
// threads (cos/sin rows by position or gathered per token), else the short-run bound.
TEST(CpuRopePlan, LeanTokenBound) {
  RopeLeanFacts f = lean_facts(65536, 40, 64, 128);  // 8 lanes x 40 heads = 320 threads
  EXPECT_EQ(rope_lean_max_tokens(f), INT64_MAX);     // gathered rows
  f.cos_sin_rows = true;
  EXPECT_EQ(rope_lean_max_tokens(f), INT64_MAX);
  EXPECT_TRUE(rope_lean(f, rope_lean_max_tokens(f)));
  f = lean_facts(65536, kRopeLeanLongRunThreads / 16, 128, 256);  // 16 lanes: 512 threads
  f.cos_sin_rows = true;
  EXPECT_EQ(rope_lean_max_tokens(f), INT64_MAX);
  f.heads += 1;  // 528 threads
  EXPECT_EQ(rope_lean_max_tokens(f), kRopeLeanMaxTokens);
  EXPECT_FALSE(rope_lean(f, rope_lean_max_tokens(f)));
  f.tokens = kRopeLeanMaxTokens;
  EXPECT_TRUE(rope_lean(f, rope_lean_max_tokens(f)));
  f.cos_sin_rows = false;  // gathered rows: the same bound
  EXPECT_EQ(rope_lean_max_tokens(f), kRopeLeanMaxTokens);
}

TEST(CpuRopePlan, LeanLaunchShape) {
  RopePlan p = plan_rope_lean(lean_facts(7, 40, 64, 128), 0);  // unknown device: no split
  EXPECT_TRUE(p.lean);
  EXPECT_TRUE(p.single);
  EXPECT_FALSE(p.long_run);
  EXPECT_EQ(p.vec, kRopeLeanVec);
  EXPECT_EQ(p.bx, 8);  // 64 pairs / 8 per thread
  EXPECT_EQ(p.by, 40);
  EXPECT_EQ(p.bz, 1);
  EXPECT_EQ(p.grid, 7);
  EXPECT_EQ(p.head_groups, 1);
  EXPECT_EQ(p.head_split, 1);
  EXPECT_FALSE(plan_rope(7, 40, 64, 8).lean);
  EXPECT_EQ(plan_rope(7, 40, 64, 8).head_split, 1);
  // B sequences of S tokens: grid (S, B); seq 0 stands for one sequence.
  RopeLeanFacts f = lean_facts(16, 40, 64, 128);
  f.seq = 1;
  p = plan_rope_lean(f, 0);
  EXPECT_EQ(p.grid, 1);
  EXPECT_EQ(p.head_groups, 16);
  f.seq = 0;
  p = plan_rope_lean(f, 0);
  EXPECT_EQ(p.grid, 16);
  EXPECT_EQ(p.head_groups, 1);
}

// A token's heads split over grid z into blocks of at most kRopeLeanSplitThreads threads, while
// the T x head_split blocks stay within kRopeLeanSplitBlocksPerSm per multiprocessor, and at any
// run length into blocks of at most kRopeLeanSplitMinThreads threads, for blocks of more than
// kRopeLeanSplitMinThreads threads.
TEST(CpuRopePlan, LeanHeadSplit) {
  RopePlan p = plan_rope_lean(lean_facts(1, 40, 64, 128), 132);
  EXPECT_EQ(p.bx, 8);
  EXPECT_EQ(p.grid, 1);
  EXPECT_TRUE(p.lean);
  // Splits at 132 multiprocessors (half = h: the lanes are half / 8).
  struct Split {
    int64_t tokens, heads, half;
    int head_split, by;
    const char* why;
  };
  const Split splits[] = {
      {1, 40, 64, 4, 10, "8 lanes: 12 rows at most, so 40 heads in 4 blocks of 10 rows"},
      {64, 40, 64, 4, 10, "256 blocks"},
      {67, 40, 64, 3, 14, "4 x 67 > 264: 3 blocks of 14 rows"},
      {100, 40, 64, 2, 20, "3 x 100 > 264: 2 blocks of 20"},
      {133, 40, 64, 2, 20, "2 x 133 > 264, but 320 threads pass kRopeLeanSplitMinThreads"},
      {1024, 40, 64, 2, 20, "blocks of at most kRopeLeanSplitMinThreads at any run length"},
      {65536, 40, 64, 2, 20, "blocks of at most kRopeLeanSplitMinThreads at any run length"},
      {1100, 24, 128, 2, 12, "16 + 8 heads at 16 lanes (D 256, 384 threads)"},
      {4096, 64, 64, 3, 22, "64 heads at 8 lanes (512 threads): the last block 20 heads"},
      {1, 40, 128, 7, 6, "16 lanes (D 256): 6 rows at most, the last block 4 heads"},
      {1, 17, 128, 3, 6, "16 + 1 heads at 16 lanes (272 threads): one row past the heads"},
      {1, 40, 32, 1, 40, "4 lanes (D 64, 160 threads): whole"},
      {1, 17, 64, 1, 17, "8 lanes, 136 threads: whole"},
      {1, 1, 64, 1, 1, "one head: whole"},
      {27, 64, 128, 8, 8, "9 blocks would fit, but 8 rows fill 8: no ninth block without a head"},
  };
  for (const Split& e : splits) {
    p = plan_rope_lean(lean_facts(e.tokens, e.heads, e.half, 2 * e.half), 132);
    EXPECT_EQ(p.head_split, e.head_split) << e.why;
    EXPECT_EQ(p.by, e.by) << e.why;
  }
  // B sequences count as tokens: 8 x 16 tokens at 132 multiprocessors split in 2.
  RopeLeanFacts f = lean_facts(128, 40, 64, 128);
  f.seq = 16;
  p = plan_rope_lean(f, 132);
  EXPECT_EQ(p.grid, 16);
  EXPECT_EQ(p.head_groups, 8);
  EXPECT_EQ(p.head_split, 2);
  // Every split: no block without a head, every head in a block, no finer than blocks of
  // kRopeLeanSplitThreads threads need, no block of more than kRopeLeanSplitMinThreads threads
  // where a row fits, and more blocks than those that bound needs only within the
  // multiprocessors' bound.
  for (int sms : {0, 1, 132}) {
    for (int64_t tokens : {1, 2, 7, 27, 29, 64, 300, 5000}) {
      for (int64_t heads : {1, 2, 3, 9, 12, 13, 40, 64, 128}) {
        for (int64_t half : {8, 64, 128}) {
          const RopePlan q = plan_rope_lean(lean_facts(tokens, heads, half, 2 * half), sms);
          SCOPED_TRACE(testing::Message()
                       << sms << " SMs, T " << tokens << ", " << heads << " heads, h " << half);
          EXPECT_GE(int64_t{q.by} * q.head_split, heads);
          EXPECT_LT(int64_t{q.by} * (q.head_split - 1), heads);
          EXPECT_GE(q.head_split, 1);
          const int64_t rows = std::max<int64_t>(1, kRopeLeanSplitThreads / q.bx);
          EXPECT_LE(q.head_split, (heads + rows - 1) / rows);
          const int64_t max_rows = std::max<int64_t>(1, kRopeLeanSplitMinThreads / q.bx);
          const int64_t least = (heads + max_rows - 1) / max_rows;
          if (sms > 0) EXPECT_LE(q.by, max_rows);
          if (q.head_split > 1) {
            EXPECT_GT(q.bx * heads, kRopeLeanSplitMinThreads);
            if (q.head_split > least) {
              EXPECT_LE(tokens * q.head_split, int64_t{kRopeLeanSplitBlocksPerSm} * sms);
            }
          } else {
            EXPECT_EQ(q.by, heads);
          }
        }
      }
    }
  }
}

// The RoPE lean run: any loaded cos/sin, 8 or 16 lanes, from kRopeLeanRunMinTokens tokens for
// rows by position and from kRopeLeanRunShortMinTokens for tables gathered per token.
TEST(CpuRopePlan, LeanRunRule) {
  RopeLeanFacts f = lean_facts(kRopeLeanRunShortMinTokens, 40, 64, 128);
  EXPECT_TRUE(rope_lean_run(f));  // gathered rows
  f.tokens -= 1;
  EXPECT_FALSE(rope_lean_run(f));
  f.tokens = kRopeLeanRunMinTokens;
  f.cos_sin_loaded = false;  // computed from inv_freq: no lean shape
  EXPECT_FALSE(rope_lean_run(f));
  f.cos_sin_loaded = true;
  f.cos_sin_rows = true;
  EXPECT_TRUE(rope_lean_run(f));
  f.tokens -= 1;
  EXPECT_FALSE(rope_lean_run(f));
  f = lean_facts(65536, 40, 128, 256);  // 16 lanes
  f.cos_sin_rows = true;
  EXPECT_TRUE(rope_lean_run(f));
  f = lean_facts(65536, 40, 32, 64);  // 4 lanes: the lean kernel
  f.cos_sin_rows = true;
  EXPECT_FALSE(rope_lean_run(f));
  f = lean_facts(65536, 40, 256, 512);  // 32 lanes
  f.cos_sin_rows = true;
  EXPECT_FALSE(rope_lean_run(f));
  f = lean_facts(65536, 40, 32, 128);  // partial rotary: no lean shape
  f.cos_sin_rows = true;
  EXPECT_FALSE(rope_lean_run(f));
  // Blocks the lean kernel does not serve past kRopeLeanMaxTokens (16 lanes x 40 heads): from
  // kRopeLeanRunShortMinTokens; 16 x 32 (512 threads, the lean kernel's): from
  // kRopeLeanRunMinTokens.
  f = lean_facts(kRopeLeanRunShortMinTokens, 40, 128, 256);
  f.cos_sin_rows = true;
  EXPECT_TRUE(rope_lean_run(f));
  f.tokens -= 1;
  EXPECT_FALSE(rope_lean_run(f));
  f = lean_facts(kRopeLeanRunShortMinTokens, 32, 128, 256);
  f.cos_sin_rows = true;
  EXPECT_FALSE(rope_lean_run(f));
  f.tokens = kRopeLeanRunMinTokens;
  EXPECT_TRUE(rope_lean_run(f));
}

// Flat tokens: one sequence, or every operand's batch stride S times its token stride; the
// 32-bit bounds on T and on the token strides in bytes.
TEST(CpuRopePlan, FlatTokens) {
  const TokenStrides packed{4096 * 6144, 6144, 2};  // [B, S, (32 + 2 x 8) x 128] bf16
  const TokenStrides pos{4096, 1, 8};               // [B, S] int64
  const TokenStrides ops[] = {packed, packed, pos};
  EXPECT_TRUE(flat_tokens(8, 4096, ops, 3));
  EXPECT_TRUE(flat_tokens(1, 65536, ops, 3));
  // Hugging Face [B, H, S, D] viewed as [B, S, H, D]: flat only for one sequence.
  const TokenStrides bhsd[] = {{32 * 4096 * 128, 128, 2}};
  EXPECT_FALSE(flat_tokens(2, 4096, bhsd, 1));
  EXPECT_TRUE(flat_tokens(1, 4096, bhsd, 1));
  // Positions broadcast over the batch ([1, S] expanded: batch stride 0).
  const TokenStrides shared_pos[] = {packed, {0, 1, 8}};
  EXPECT_FALSE(flat_tokens(8, 4096, shared_pos, 2));
  EXPECT_TRUE(flat_tokens(1, 4096, shared_pos, 2));
  // The bounds.
  EXPECT_TRUE(flat_tokens(1, kFlatMaxTokens, ops, 3));
  EXPECT_FALSE(flat_tokens(1, kFlatMaxTokens + 1, ops, 3));
  EXPECT_FALSE(flat_tokens(2, kFlatMaxTokens / 2 + 1, ops, 0));
  const TokenStrides widest[] = {{0, kFlatMaxStrideBytes / 2, 2}};
  EXPECT_TRUE(flat_tokens(1, 16, widest, 1));
  const TokenStrides too_wide[] = {{0, kFlatMaxStrideBytes / 2 + 1, 2}};
  EXPECT_FALSE(flat_tokens(1, 16, too_wide, 1));
  const TokenStrides negative[] = {{0, -1, 2}};
  EXPECT_FALSE(flat_tokens(1, 16, negative, 1));
  EXPECT_TRUE(flat_tokens(3, 7, ops, 0));  // no operand: only T bounds it
}

// The flat walk also addresses a table row from the low 32 bits of its position: the tables
// indexed by position are taken as operands of P rows, so the 32-bit bounds hold for their row
// count and row strides in bytes too (rope_tables_flat, which the launcher records in the
// argument block), and rope_flat_tokens asks it only of those sources.
TEST(CpuRopePlan, FlatTokensTables) {
  EXPECT_TRUE(cuda::rope_tables_flat(65536, 128, 128, DType::kFloat32));
  EXPECT_TRUE(cuda::rope_tables_flat(kFlatMaxTokens, 128, 128, DType::kFloat32));
  EXPECT_FALSE(cuda::rope_tables_flat(kFlatMaxTokens + 1, 128, 128, DType::kFloat32));
  EXPECT_TRUE(cuda::rope_tables_flat(4096, 128, kFlatMaxStrideBytes / 4, DType::kFloat32));
  EXPECT_FALSE(cuda::rope_tables_flat(4096, 128, kFlatMaxStrideBytes / 4 + 1, DType::kFloat32));
  EXPECT_FALSE(cuda::rope_tables_flat(4096, kFlatMaxStrideBytes / 2 + 1, 0, DType::kBFloat16));
  EXPECT_TRUE(cuda::rope_tables_flat(4096, kFlatMaxStrideBytes / 4 + 1, 0, DType::kBFloat16));
  EXPECT_TRUE(cuda::rope_tables_flat(0, 0, 0, DType::kFloat32));  // no tables

  cuda::RopeKernelArgs a{};
  a.q = {const_cast<void*>(at(0)), 65536 * 6144, 6144, 128};
  a.q_out = a.q;
  a.seq = 65536;
  a.tokens = 65536;
  a.batch = 1;
  a.pos = at(0);
  a.pos_i64 = true;
  a.pos_ss = 1;
  a.tables_flat = true;
  for (cuda::RopeSource src : {cuda::RopeSource::kCache, cuda::RopeSource::kTable}) {
    a.source = src;
    a.tables_flat = true;
    EXPECT_TRUE(cuda::rope_flat_tokens(a, 2));
    a.tables_flat = false;
    EXPECT_FALSE(cuda::rope_flat_tokens(a, 2));
  }
  for (cuda::RopeSource src : {cuda::RopeSource::kGathered, cuda::RopeSource::kInvFreq}) {
    a.source = src;
    EXPECT_TRUE(cuda::rope_flat_tokens(a, 2));  // no rows by position
  }
  a.q.ss = kFlatMaxStrideBytes / 2 + 1;  // and the token strides still bound it
  EXPECT_FALSE(cuda::rope_flat_tokens(a, 2));
  a.q.ss = 6144;
  // Gathered tables are operands too: [B, S, R] per token is flat, a [1, S, R] table broadcast
  // over B (batch stride 0) is not, nor a token stride past the bound.
  a.source = cuda::RopeSource::kGathered;
  a.pos = nullptr;
  a.batch = 4;
  a.seq = 16384;
  a.q.sb = 16384 * 6144;
  a.q_out = a.q;
  a.cs_dtype = DType::kBFloat16;
  a.cos_sb = a.sin_sb = 16384 * 128;
  a.cos_ss = a.sin_ss = 128;
  EXPECT_TRUE(cuda::rope_flat_tokens(a, 2));
  a.sin_sb = 0;
  EXPECT_FALSE(cuda::rope_flat_tokens(a, 2));
  a.sin_sb = 16384 * 128;
  a.cos_ss = kFlatMaxStrideBytes / 2 + 1;
  a.cos_sb = 16384 * a.cos_ss;
  EXPECT_FALSE(cuda::rope_flat_tokens(a, 2));
}

TEST(CpuRopePlan, LeanRunInstance) {
  EXPECT_EQ(rope_lean_run_instance(true, 64, true), RopeLeanRunInstance::kRowsFlatI64);
  EXPECT_EQ(rope_lean_run_instance(true, 64, false), RopeLeanRunInstance::kRows);
  EXPECT_EQ(rope_lean_run_instance(true, 32, true), RopeLeanRunInstance::kRows);
  EXPECT_EQ(rope_lean_run_instance(true, 0, true), RopeLeanRunInstance::kRows);
  // Gathered tables (no rows by position): rows by token on flat tokens, else the source read
  // at run time.
  EXPECT_EQ(rope_lean_run_instance(false, 0, true), RopeLeanRunInstance::kTokensFlat);
  EXPECT_EQ(rope_lean_run_instance(false, 0, false), RopeLeanRunInstance::kAny);
}

TEST(CpuRopePlan, LeanRunLaunchShape) {
  // D 128, 32 + 8 heads: one block of 8 x 40 = 320 threads, kRopeLeanRunMinBlocks per SM.
  RopeLeanFacts f = lean_facts(65536, 40, 64, 128);
  f.cos_sin_rows = true;
  RopePlan p = plan_rope_lean_run(f, 320, 2, 132, 4096);
  EXPECT_TRUE(p.lean_run);
  EXPECT_FALSE(p.lean);
  EXPECT_EQ(p.vec, kRopeLeanVec);
  EXPECT_EQ(p.bx, 8);
  EXPECT_EQ(p.by, 40);
  EXPECT_EQ(p.bz, 1);
  EXPECT_EQ(p.head_groups, 1);
  EXPECT_EQ(p.grid, 264);
  // The ring: 2 stages of 320 threads' two bf16 vectors and f32 cos and sin vectors of 8.
  EXPECT_EQ(p.smem_bytes, 2 * 320 * (2 * 16 + 2 * 32));
  EXPECT_EQ(plan_rope_lean_run(f, 320, 3, 132, 4096).grid, 396);
  EXPECT_EQ(plan_rope_lean_run(f, 320, 2, 0, 4096).grid, 4096);  // SMs unknown
  // D 256, 32 + 8 heads: two head groups of 20 rows of 16 lanes, the blocks shared out.
  f = lean_facts(65536, 40, 128, 256);
  f.cs_elem_size = 2;
  p = plan_rope_lean_run(f, 320, 2, 132, 4096);
  EXPECT_EQ(p.bx, 16);
  EXPECT_EQ(p.by, 20);
  EXPECT_EQ(p.head_groups, 2);
  EXPECT_EQ(p.grid, 132);
  EXPECT_EQ(p.smem_bytes, 2 * 320 * (2 * 16 + 2 * 16));
  // Small blocks (8 + 2 heads: 80 threads, 3 warps): as many as fill 640 threads; few tokens:
  // one block per token.
  f = lean_facts(100, 10, 64, 128);
  p = plan_rope_lean_run(f, 320, 2, 132, 4096);
  EXPECT_EQ(p.by, 10);
  EXPECT_EQ(p.grid, 100);
  f.tokens = 65536;
  EXPECT_EQ(plan_rope_lean_run(f, 320, 2, 132, 4096).grid, 6 * 132);
  // Blocks of threads not a multiple of 8 (D 32: 2 lanes, 5 heads, 10 threads): the ring holds
  // whole groups of kRopeLeanRunRingGroup threads' slots.
  f = lean_facts(65536, 5, 16, 32);
  p = plan_rope_lean_run(f, 320, 2, 132, 4096);
  EXPECT_EQ(p.bx * p.by, 10);
  EXPECT_EQ(kRopeLeanRunRingGroup, 8);
  EXPECT_EQ(p.smem_bytes, 2 * 16 * (2 * 16 + 2 * 32));
}

// The launcher's choice: lean run, then the lean kernel, then the general kernel; none of the
// lean ones when they are disallowed.
TEST(CpuRopePlan, CallPlan) {
  RopeLeanFacts f = lean_facts(65536, 40, 64, 128);
  f.cos_sin_rows = true;
  RopePlan p = plan_rope_call(f, true, 132);
  EXPECT_TRUE(p.lean_run);
  EXPECT_EQ(p.grid, 2 * 132);
  EXPECT_EQ(p.bx, 8);
  EXPECT_EQ(p.by, 40);
  p = plan_rope_call(f, false, 132);
  EXPECT_FALSE(p.lean_run || p.lean);
  f.tokens = kRopeLeanRunMinTokens - 1;
  p = plan_rope_call(f, true, 132);
  EXPECT_TRUE(p.lean);
  EXPECT_FALSE(p.lean_run);
  f = lean_facts(65536, 40, 32, 64);  // D 64: the lean kernel at every run length
  f.cos_sin_rows = true;
  EXPECT_TRUE(plan_rope_call(f, true, 132).lean);
  // D 256, 32 + 8 heads: the lean run from kRopeLeanRunShortMinTokens, the general kernel below
  // (down to kRopeLeanMaxTokens + 1).
  f = lean_facts(kRopeLeanRunShortMinTokens, 40, 128, 256);
  f.cos_sin_rows = true;
  EXPECT_TRUE(plan_rope_call(f, true, 132).lean_run);
  f.tokens -= 1;
  p = plan_rope_call(f, true, 132);
  EXPECT_FALSE(p.lean_run || p.lean);
  // Gathered rows (D 128, 32 + 8 heads): the lean kernel up to the lean run, which starts at
  // kRopeLeanRunShortMinTokens; D 256 (640 threads): the general kernel between them.
  f = lean_facts(65536, 40, 64, 128);
  EXPECT_TRUE(plan_rope_call(f, true, 132).lean_run);
  f.tokens = kRopeLeanRunShortMinTokens;
  EXPECT_TRUE(plan_rope_call(f, true, 132).lean_run);
  f.tokens -= 1;
  p = plan_rope_call(f, true, 132);
  EXPECT_TRUE(p.lean);
  EXPECT_FALSE(p.lean_run);
  f.tokens = kRopeLeanMaxTokens + 1;
  EXPECT_TRUE(plan_rope_call(f, true, 132).lean);
  f = lean_facts(kRopeLeanRunShortMinTokens - 1, 40, 128, 256);
  p = plan_rope_call(f, true, 132);
  EXPECT_FALSE(p.lean_run || p.lean);
  EXPECT_EQ(p.vec, 8);
}

}  // namespace
}  // namespace ropenorm::core
