// Planning of the fused QK-norm + RoPE forward: which kernel serves which geometry and alignment,
// and the launch shapes (each decided from the head geometry and alignment, never from the
// data).
#include <gtest/gtest.h>

#include "core/qk_norm_rope_plan.h"

namespace ropenorm::core {
namespace {

QkNormRopeFacts facts(int64_t tokens, int64_t heads, int64_t d, int64_t r, int width = 8,
                      int elem = 2, bool w16 = true, bool loaded = false) {
  QkNormRopeFacts f;
  f.rope.cos_sin_loaded = loaded;
  f.rope.elem_size = elem;
  f.rope.vec = width;
  f.weights_aligned16 = w16;
  f.rope.tokens = tokens;
  f.rope.seq = tokens;
  f.rope.heads = heads;
  f.rope.head_dim = d;
  f.rope.half = r / 2;
  return f;
}

TEST(CpuQkNormRopePlan, PairKernelForFullRotaryAligned16Bit) {
  // Qwen3-like: 32 q + 8 k heads, D 128, R = D.
  QkNormRopePlan p = plan_qk_norm_rope(facts(65536, 40, 128, 128));
  EXPECT_EQ(p.kernel, QkKernel::kPair);
  EXPECT_EQ(p.rope.vec, 8);
  EXPECT_EQ(p.rope.bx, 8);  // 64 pairs / 8 per lane
  EXPECT_EQ(p.rope.by, 20);
  EXPECT_TRUE(p.rope.single);
  EXPECT_EQ(p.rope.grid * p.rope.bz, 65536);
  // D 64 and 256, decode.
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 40, 64, 64)).kernel, QkKernel::kPair);
  p = plan_qk_norm_rope(facts(1, 40, 256, 256));
  EXPECT_EQ(p.kernel, QkKernel::kPair);
  EXPECT_EQ(p.rope.bx, 16);
  EXPECT_EQ(p.rope.head_groups, 2);  // 20 rows of 2 heads, 16 fit a block: 2 groups of 10
  EXPECT_EQ(p.rope.by, 10);
  EXPECT_TRUE(p.rope.single);
}

TEST(CpuQkNormRopePlan, LeanKernelForShortRunsWithLoadedCosSin) {
  QkNormRopePlan p = plan_qk_norm_rope(facts(1, 40, 128, 128, 8, 2, true, true));
  EXPECT_EQ(p.kernel, QkKernel::kLean);
  EXPECT_TRUE(p.rope.lean);
  EXPECT_EQ(p.rope.bx, 8);
  EXPECT_EQ(p.rope.by, 40);
  EXPECT_EQ(p.rope.bz, 1);
  EXPECT_EQ(p.rope.grid, 1);
  EXPECT_EQ(p.rope.head_split, 1);  // the device unknown
  // On a device of 132 multiprocessors a token's heads are split (core::plan_rope_lean): a
  // decode step in 4 blocks of 10 rows; the GPU tests' lean cases: 73 tokens in 3 blocks of 14
  // rows per token, a token alone at D 256 in 7 of 6 (the last with 4 heads); 1023 tokens (the
  // lean run's kQkLeanRunMinTokens less one) in 2 blocks of 20 (blocks of at most
  // kRopeLeanSplitMinThreads threads at any run length).
  struct Split {
    int64_t tokens, d;
    int head_split, by;
  };
  for (const Split& e : {Split{1, 128, 4, 10}, Split{73, 128, 3, 14}, Split{1, 256, 7, 6},
                         Split{kQkLeanRunMinTokens - 1, 128, 2, 20}}) {
    QkNormRopeFacts on = facts(e.tokens, 40, e.d, e.d, 8, 2, true, true);
    on.sm_count = 132;
    p = plan_qk_norm_rope(on);
    EXPECT_EQ(p.kernel, QkKernel::kLean);
    EXPECT_EQ(p.rope.head_split, e.head_split) << e.tokens << " tokens, D " << e.d;
    EXPECT_EQ(p.rope.by, e.by) << e.tokens << " tokens, D " << e.d;
  }
  // Every run length for blocks of up to kRopeLeanLongRunThreads threads (8 lanes x 40 heads,
  // 16 x 32); larger blocks (16 x 40) up to the RoPE bound.
  EXPECT_EQ(plan_qk_norm_rope(facts(kRopeLeanMaxTokens, 40, 256, 256, 8, 2, true, true)).kernel,
            QkKernel::kLean);
  EXPECT_EQ(plan_qk_norm_rope(facts(kRopeLeanMaxTokens + 1, 40, 256, 256, 8, 2, true, true)).kernel,
            QkKernel::kPair);
  EXPECT_EQ(
      plan_qk_norm_rope(facts(kQkLeanRunMinTokens - 1, 32, 256, 256, 8, 2, true, true)).kernel,
      QkKernel::kLean);
  p = plan_qk_norm_rope(facts(kQkLeanRunMinTokens - 1, 40, 128, 128, 8, 2, true, true));
  EXPECT_EQ(p.kernel, QkKernel::kLean);
  EXPECT_EQ(p.rope.grid, kQkLeanRunMinTokens - 1);
  EXPECT_EQ(p.rope.head_groups, 1);
  // Computed cos/sin, more threads than a block, the lean kernel disallowed: the pair kernel.
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 40, 128, 128, 8, 2, true, false)).kernel, QkKernel::kPair);
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 160, 256, 256, 8, 2, true, true)).kernel, QkKernel::kPair);
  QkNormRopeFacts f = facts(7, 40, 128, 128, 8, 2, true, true);
  f.allow_lean = false;
  p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.kernel, QkKernel::kPair);
  EXPECT_FALSE(p.rope.lean);
  // The grid is (S, B); seq 0 stands for one sequence.
  f = facts(kRopeLeanMaxTokens, 40, 128, 128, 8, 2, true, true);
  f.rope.seq = kRopeLeanMaxTokens / 4;
  p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.kernel, QkKernel::kLean);
  EXPECT_EQ(p.rope.grid, kRopeLeanMaxTokens / 4);
  EXPECT_EQ(p.rope.head_groups, 4);
  f.rope.seq = 0;
  p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.rope.grid, kRopeLeanMaxTokens);
  EXPECT_EQ(p.rope.head_groups, 1);
  // B = T / S within gridDim.y's limit: 65535 sequences of one token are lean, 65536 are not
  // (D 64: 4 lanes, which the lean run does not serve; it has no such limit).
  f = facts(kRopeMaxHeadGroups, 32, 64, 64, 8, 2, true, true);
  f.rope.seq = 1;
  p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.kernel, QkKernel::kLean);
  EXPECT_EQ(p.rope.head_groups, kRopeMaxHeadGroups);
  f = facts(kRopeMaxHeadGroups + 1, 32, 64, 64, 8, 2, true, true);
  f.rope.seq = 1;
  EXPECT_EQ(plan_qk_norm_rope(f).kernel, QkKernel::kPair);
  f = facts(kRopeMaxHeadGroups + 1, 40, 128, 128, 8, 2, true, true);
  f.rope.seq = 1;
  EXPECT_EQ(plan_qk_norm_rope(f).kernel, QkKernel::kLeanRun);
  // Where the pair kernel does not apply, neither does the lean one.
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 40, 128, 64, 8, 2, true, true)).kernel, QkKernel::kVector);
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 40, 128, 128, 8, 2, false, true)).kernel, QkKernel::kVector);
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 40, 96, 96, 8, 2, true, true)).kernel, QkKernel::kScalar);
  EXPECT_EQ(plan_qk_norm_rope(facts(1, 40, 128, 128, 4, 4, true, true)).kernel, QkKernel::kScalar);
}

// The plan of 65536 tokens of `heads` heads of D channels (R = D, loaded cos/sin) on 132
// multiprocessors, which must be the lean run.
QkNormRopePlan lean_run_plan(int64_t heads, int64_t d) {
  QkNormRopeFacts f = facts(65536, heads, d, d, 8, 2, true, true);
  f.sm_count = 132;
  const QkNormRopePlan p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.kernel, QkKernel::kLeanRun);
  return p;
}

TEST(CpuQkNormRopePlan, LeanRunForLongRuns) {
  // From kQkLeanRunMinTokens tokens and 8 or 16 lanes: a persistent grid of
  // kQkLeanRunMinBlocks blocks of at most kQkLeanRunThreads threads per multiprocessor, the
  // tokens interleaved over its blocks.
  QkNormRopeFacts f = facts(65536, 40, 128, 128, 8, 2, true, true);
  f.sm_count = 132;
  QkNormRopePlan p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.kernel, QkKernel::kLeanRun);
  EXPECT_EQ(p.rope.bx, 8);
  EXPECT_EQ(p.rope.by, 40);
  EXPECT_EQ(p.rope.bz, 1);
  EXPECT_EQ(p.rope.grid, 264);
  EXPECT_EQ(p.rope.head_groups, 1);
  // The ring: 2 stages of 320 threads' two bf16 vectors and f32 cos and sin vectors of 8.
  EXPECT_EQ(p.rope.smem_bytes, 2 * 320 * (2 * 16 + 2 * 32));
  f.sm_count = 0;  // unknown: the largest grid
  p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.rope.grid, kQkLeanRunMaxGrid);
  f = facts(kQkLeanRunMinTokens, 20, 256, 256, 8, 2, true, true);  // 16 lanes x 20 heads
  f.sm_count = 132;
  f.rope.seq = 1000;        // sequences of any length: the kernel advances (b, s) itself
  f.rope.cs_elem_size = 2;  // a bf16 table
  p = plan_qk_norm_rope(f);
  EXPECT_EQ(p.rope.smem_bytes, 2 * 320 * (2 * 16 + 2 * 16));
  EXPECT_EQ(p.kernel, QkKernel::kLeanRun);
  EXPECT_EQ(p.rope.bx, 16);
  EXPECT_EQ(p.rope.head_groups, 1);             // one head group, not B sequences
  EXPECT_LE(p.rope.grid, kQkLeanRunMinTokens);  // every block has a token
  // More heads than a block of kQkLeanRunThreads holds: the fewest head groups that fit, the
  // token blocks shared out between them. D 256, 32 + 8 heads: 2 groups of 20 rows of 16 lanes.
  p = lean_run_plan(40, 256);
  EXPECT_EQ(p.rope.bx, 16);
  EXPECT_EQ(p.rope.by, 20);
  EXPECT_EQ(p.rope.head_groups, 2);
  EXPECT_EQ(p.rope.grid, 132);  // 2 blocks of 320 threads per multiprocessor in all
  EXPECT_EQ(p.rope.smem_bytes, 2 * 320 * (2 * 16 + 2 * 32));
  p = lean_run_plan(41, 128);  // 2 groups of 21 rows: 168 threads
  EXPECT_EQ(p.rope.by, 21);
  EXPECT_EQ(p.rope.head_groups, 2);
  EXPECT_EQ(p.rope.grid, 3 * 132 / 2);  // 3 blocks of 6 warps fill 640 threads
  // From kQkLeanRunMinTokens tokens; below, the lean kernel where its block is within
  // kRopeLeanLongRunThreads (8 lanes x 40 heads), else the pair kernel (16 x 40).
  EXPECT_EQ(plan_qk_norm_rope(facts(kQkLeanRunMinTokens, 40, 256, 256, 8, 2, true, true)).kernel,
            QkKernel::kLeanRun);
  EXPECT_EQ(
      plan_qk_norm_rope(facts(kQkLeanRunMinTokens - 1, 40, 256, 256, 8, 2, true, true)).kernel,
      QkKernel::kPair);
  EXPECT_EQ(plan_qk_norm_rope(facts(kQkLeanRunMinTokens, 40, 128, 128, 8, 2, true, true)).kernel,
            QkKernel::kLeanRun);
  // Small blocks: as many per multiprocessor as fill 640 threads (8 + 2 heads: 3 warps, 6).
  p = lean_run_plan(10, 128);
  EXPECT_EQ(p.rope.by, 10);
  EXPECT_EQ(p.rope.head_groups, 1);
  EXPECT_EQ(p.rope.grid, 6 * 132);
  EXPECT_EQ(p.rope.smem_bytes, 2 * 80 * (2 * 16 + 2 * 32));
  // Too few tokens, other lanes, no lean shape, the lean kernel disallowed.
  f = facts(kQkLeanRunMinTokens - 1, 40, 128, 128, 8, 2, true, true);
  EXPECT_EQ(plan_qk_norm_rope(f).kernel, QkKernel::kLean);
  EXPECT_EQ(plan_qk_norm_rope(facts(65536, 40, 64, 64, 8, 2, true, true)).kernel, QkKernel::kLean);
  EXPECT_EQ(plan_qk_norm_rope(facts(65536, 40, 128, 128, 8, 2, true, false)).kernel,
            QkKernel::kPair);
  f = facts(65536, 40, 128, 128, 8, 2, true, true);
  f.allow_lean = false;
  EXPECT_EQ(plan_qk_norm_rope(f).kernel, QkKernel::kPair);
}

TEST(CpuQkNormRopePlan, LeanRunInstance) {
  EXPECT_EQ(qk_lean_run_instance(true, 64, true, true), QkLeanRunInstance::kFlatI64);
  EXPECT_EQ(qk_lean_run_instance(true, 64, false, true), QkLeanRunInstance::kLanesRowsI64);
  EXPECT_EQ(qk_lean_run_instance(true, 64, true, false), QkLeanRunInstance::kLanesRowsI64);
  EXPECT_EQ(qk_lean_run_instance(true, 64, false, false), QkLeanRunInstance::kLanesRowsI64);
  for (bool flat : {false, true}) {
    EXPECT_EQ(qk_lean_run_instance(true, 32, flat, true), QkLeanRunInstance::kLanes);
    EXPECT_EQ(qk_lean_run_instance(true, 0, flat, true), QkLeanRunInstance::kLanes);
  }
  // Gathered tables: rows by token on flat tokens with full warps, else the general walk.
  EXPECT_EQ(qk_lean_run_instance(false, 0, true, true), QkLeanRunInstance::kFlatTokens);
  EXPECT_EQ(qk_lean_run_instance(false, 0, false, true), QkLeanRunInstance::kLanes);
  EXPECT_EQ(qk_lean_run_instance(false, 0, true, false), QkLeanRunInstance::kLanes);
}

// Full warps on the lean-run plans the GPU tests take: 32 + 8 heads at D 128 (one group of 40
// rows of 8 lanes) and D 256 (two groups of 20 rows of 16 lanes) are full; 16 + 1 heads (136 or
// 272 threads) and 36 + 8 at D 128 (two groups of 22 rows: 176 threads) are not.
TEST(CpuQkNormRopePlan, LeanRunFullWarps) {
  auto plan = [](int64_t heads, int64_t d) {
    const QkNormRopePlan p = plan_qk_norm_rope(facts(65536, heads, d, d, 8, 2, true, true));
    EXPECT_EQ(p.kernel, QkKernel::kLeanRun);
    return p.rope;
  };
  EXPECT_TRUE(lean_run_full_warps(plan(40, 128), 40));
  EXPECT_TRUE(lean_run_full_warps(plan(40, 256), 40));
  EXPECT_FALSE(lean_run_full_warps(plan(17, 128), 17));
  EXPECT_FALSE(lean_run_full_warps(plan(17, 256), 17));
  EXPECT_FALSE(lean_run_full_warps(plan(44, 128), 44));
  EXPECT_TRUE(lean_run_full_warps(plan(48, 256), 48));  // three groups of 16 rows
}

TEST(CpuQkNormRopePlan, VectorKernelWhenThePairKernelDoesNotApply) {
  // Partial rotary.
  QkNormRopePlan p = plan_qk_norm_rope(facts(1024, 40, 128, 64));
  EXPECT_EQ(p.kernel, QkKernel::kVector);
  EXPECT_EQ(p.group, 16);
  EXPECT_EQ(p.groups_per_token, 16);  // 256 threads / 16 lanes, fewer than 40 heads
  EXPECT_EQ(p.threads, 256);
  EXPECT_EQ(p.grid, 1024);
  // A weight that is not 16-byte aligned.
  EXPECT_EQ(plan_qk_norm_rope(facts(1024, 40, 128, 128, 8, 2, false)).kernel, QkKernel::kVector);
  // h / 8 not a power of two (R = D = 96): vector kernel needs D / 8 a power of two: scalar.
  EXPECT_EQ(plan_qk_norm_rope(facts(1024, 40, 96, 96)).kernel, QkKernel::kScalar);
  // Few heads: several tokens per block.
  p = plan_qk_norm_rope(facts(1000, 2, 64, 32));
  EXPECT_EQ(p.kernel, QkKernel::kVector);
  EXPECT_EQ(p.group, 8);
  EXPECT_EQ(p.groups_per_token, 2);
  EXPECT_EQ(p.threads, 256);  // 16 tokens x 2 groups x 8 lanes
  EXPECT_EQ(p.grid, 63);
}

TEST(CpuQkNormRopePlan, ScalarKernelForEverythingElse) {
  // 32-bit q/k, misaligned views, odd head counts of small heads.
  QkNormRopePlan p = plan_qk_norm_rope(facts(10, 40, 128, 128, 4, 4));
  EXPECT_EQ(p.kernel, QkKernel::kScalar);
  EXPECT_EQ(p.group, 32);
  EXPECT_EQ(p.slots_per_lane, 2);  // 64 slots over 32 lanes
  EXPECT_EQ(p.threads, kQkScalarMaxThreads);
  EXPECT_EQ(p.grid, 10);
  p = plan_qk_norm_rope(facts(3, 3, 6, 6, 1));  // D = 6: 3 slots, groups of 4 lanes
  EXPECT_EQ(p.kernel, QkKernel::kScalar);
  EXPECT_EQ(p.group, 4);
  EXPECT_EQ(p.slots_per_lane, 1);
  EXPECT_EQ(p.threads, 32);
  p = plan_qk_norm_rope(facts(3, 1, 512, 512, 1));  // 256 slots over 32 lanes
  EXPECT_EQ(p.slots_per_lane, 8);
  p = plan_qk_norm_rope(facts(3, 1, 2, 2, 1));  // D = 2: one lane per head
  EXPECT_EQ(p.group, 1);
}

TEST(CpuQkNormRopePlan, ShapesStayWithinTheKernelsLimits) {
  for (int sms : {0, 132}) {
    for (int64_t tokens : {1, 2, 7, 1000, 100000}) {
      for (int64_t heads : {1, 2, 9, 40, 160}) {
        for (int64_t d : {2, 6, 16, 64, 80, 128, 256, 512}) {
          for (int64_t r : {d, d / 2 / 2 * 2}) {
            if (r < 2) continue;
            for (int width : {1, 8}) {
              for (bool loaded : {false, true}) {
                QkNormRopeFacts f = facts(tokens, heads, d, r, width, 2, true, loaded);
                f.sm_count = sms;
                const QkNormRopePlan p = plan_qk_norm_rope(f);
                switch (p.kernel) {
                  case QkKernel::kLean:
                    EXPECT_TRUE(loaded);
                    EXPECT_EQ(r, d);
                    EXPECT_LE(p.rope.bx * p.rope.by, kRopeLeanMaxThreads);
                    EXPECT_EQ(p.rope.bx * kQkVecChannels * 2, r);
                    EXPECT_GE(int64_t{p.rope.by} * p.rope.head_split, heads);
                    EXPECT_LT(int64_t{p.rope.by} * (p.rope.head_split - 1), heads);
                    if (sms == 0) EXPECT_EQ(p.rope.by, heads);
                    EXPECT_EQ(p.rope.grid, tokens);
                    break;
                  case QkKernel::kPair:
                    EXPECT_EQ(r, d);
                    EXPECT_LE(p.rope.bx * p.rope.by * p.rope.bz, kRopeBlockThreads);
                    EXPECT_EQ(p.rope.bx * kQkVecChannels * 2, r);
                    break;
                  case QkKernel::kVector:
                    EXPECT_LE(p.threads, kQkVecThreads);
                    EXPECT_EQ(p.group * kQkVecChannels, d);
                    EXPECT_GE(p.grid * (p.threads / (p.group * p.groups_per_token)), tokens);
                    break;
                  case QkKernel::kScalar:
                    EXPECT_LE(p.threads, kQkScalarMaxThreads);
                    EXPECT_EQ(p.threads % 32, 0);
                    EXPECT_GE(static_cast<int64_t>(p.group) * p.slots_per_lane, d / 2);
                    EXPECT_EQ(p.grid, tokens);
                    break;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The lean kernel's instance: the decode instances for D 128 (8 lanes) with weights in the data
// dtype, cos/sin rows, explicit positions, up to kQkLeanDecodeTokens tokens and
// kQkLeanDecodeThreads threads; the lanes-and-weights instance for 8 or 16 lanes and weights in
// the data dtype otherwise; the general instance for the rest.
TEST(CpuQkNormRopePlan, LeanInstance) {
  QkLeanInstanceFacts f;
  f.tokens = 1;
  f.lanes = 8;
  f.threads = 320;
  f.weights_as_data = true;
  f.cos_sin_rows = true;
  f.explicit_position_bits = 64;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kDecodeI64);
  f.explicit_position_bits = 32;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kDecodeI32);
  f.tokens = kQkLeanDecodeTokens;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kDecodeI32);
  f.tokens = kQkLeanDecodeTokens + 1;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kLanesWeights);
  f.tokens = 1;
  f.explicit_position_bits = 0;  // implicit positions
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kLanesWeights);
  f.explicit_position_bits = 64;
  f.cos_sin_rows = false;  // gathered rows
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kLanesWeights);
  f.cos_sin_rows = true;
  f.threads = kQkLeanDecodeThreads + 8;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kLanesWeights);
  f.threads = kQkLeanDecodeThreads;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kDecodeI64);
  f.lanes = 16;  // D 256: no decode instance
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kLanesWeights);
  f.lanes = 4;  // D 64
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kAny);
  f.lanes = 8;
  f.weights_as_data = false;
  EXPECT_EQ(qk_lean_instance(f), QkLeanInstance::kAny);
}

}  // namespace
}  // namespace ropenorm::core
