// Dispatch decisions of the RMSNorm launcher: vector width from N, pointers and strides; path
// and threads from N, and the block path's split also from the rows per multiprocessor (its
// reduction is split-invariant, which keeps results batch invariant).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/rms_norm_plan.h"
#include "core/row_layout.h"
#include "ropenorm/tensor.h"

namespace ropenorm::core {
namespace {

RowLayout rows(int64_t stride) {
  RowLayout r;
  r.nd = 1;
  r.sizes[0] = 16;
  r.strides[0] = stride;
  return r;
}

alignas(16) unsigned char g_buf[1 << 16];

TEST(CpuRmsNormPlan, VectorWidth) {
  const void* a = g_buf;
  const void* b = g_buf + 8192;
  // Same layout, same 16-byte phase: full width, whatever N or the offset (rows are peeled).
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4096)}, {{b, 2, rows(4096)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 4, rows(4096)}, {{b, 4, rows(4096)}}), 4);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4095)}, {{b, 2, rows(4095)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({g_buf + 2, 2, rows(4096)}, {{g_buf + 8194, 2, rows(4096)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(70)}, {{b, 2, rows(70)}}), 8);
  // Different phase between x and y: scalar.
  EXPECT_EQ(rms_norm_vector_width({g_buf + 2, 2, rows(4096)}, {{b, 2, rows(4096)}}), 1);
  // Different layouts: both strides must be multiples of 16 bytes.
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4104)}, {{b, 2, rows(4096)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4100)}, {{b, 2, rows(4096)}}), 1);
  // Another element size (f32 residual with bf16 x): every row's element index congruent
  // modulo min(V, 16 / 4) = 4 (odd widths and padded pitches of the same element strides
  // included; rows at phase 0 with 16-byte strides are one such case).
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4096)}, {{b, 4, rows(4096)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4095)}, {{b, 4, rows(4095)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4097)}, {{b, 4, rows(4097)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 4, rows(4095)}, {{b, 2, rows(4095)}}), 4);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4096)}, {{b, 4, rows(4100)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4097)}, {{b, 4, rows(4096)}}), 1);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4104)}, {{b, 4, rows(4100)}}), 8);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4100)}, {{b, 4, rows(4098)}}), 1);
  EXPECT_EQ(rms_norm_vector_width({g_buf + 2, 2, rows(4096)}, {{b, 4, rows(4096)}}), 1);
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4096)}, {{g_buf + 8200, 4, rows(4096)}}), 1);
  EXPECT_EQ(rms_norm_vector_width({g_buf + 2, 2, rows(4096)}, {{g_buf + 8196, 4, rows(4096)}}), 8);
  // An absent tensor (null) does not constrain.
  EXPECT_EQ(rms_norm_vector_width({a, 2, rows(4096)}, {{nullptr, 4, rows(3)}}), 8);
}

TEST(CpuRmsNormPlan, PathsAndThreads) {
  // Small rows: warp per row.
  auto p = plan_rms_norm(64, 8);
  EXPECT_EQ(p.path, RmsNormPath::kWarpPerRow);
  EXPECT_EQ(p.vpt, 1);
  p = plan_rms_norm(1024, 8);  // 128 vectors
  EXPECT_EQ(p.path, RmsNormPath::kWarpPerRow);
  EXPECT_EQ(p.vpt, 4);
  p = plan_rms_norm(127, 1);
  EXPECT_EQ(p.path, RmsNormPath::kWarpPerRow);
  // Mid rows: block per row, registers.
  p = plan_rms_norm(4096, 8);  // 512 vectors: 128 threads x 4
  EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow);
  EXPECT_EQ(p.vpt, 4);
  EXPECT_EQ(p.threads, 128);
  p = plan_rms_norm(2048, 8);  // 256 vectors: no fewer than 128 threads, so 2 vectors each
  EXPECT_EQ(p.vpt, 2);
  EXPECT_EQ(p.threads, 128);
  p = plan_rms_norm(4096, 8, 2, 2, true);  // with a residual: 2 vectors per thread
  EXPECT_EQ(p.vpt, 2);
  EXPECT_EQ(p.threads, 256);
  p = plan_rms_norm(8192, 8);
  EXPECT_EQ(p.vpt, 4);
  EXPECT_EQ(p.threads, 256);
  // With a residual a thread holds two values per element: half the vectors per thread.
  p = plan_rms_norm(8192, 8, 2, 2, true);
  EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow);
  EXPECT_EQ(p.vpt, 2);
  EXPECT_EQ(p.threads, 512);
  p = plan_rms_norm(4095, 8);  // ceil(4095 / 8) = 512 vectors
  EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow);
  EXPECT_EQ(p.threads, 128);
  p = plan_rms_norm(4095, 1);
  EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow);
  EXPECT_EQ(p.vpt, 8);
  EXPECT_EQ(p.threads, 512);
  p = plan_rms_norm(16384, 8);  // 2048 vectors: 512 threads x 4
  EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow);
  EXPECT_EQ(p.threads, 512);
  // Wide rows beyond the register budget: two passes.
  p = plan_rms_norm(32768, 8);
  EXPECT_EQ(p.path, RmsNormPath::kTwoPass);
  p = plan_rms_norm(262144, 8);
  EXPECT_EQ(p.path, RmsNormPath::kTwoPass);
  p = plan_rms_norm(8199, 1);
  EXPECT_EQ(p.path, RmsNormPath::kTwoPass);
}

// The block path's split follows the rows per multiprocessor (132 SMs here): the widest split
// for at most one row per SM, at most 256 threads up to 8 rows per SM, the many-rows split
// beyond; the path itself never changes with the row count.
TEST(CpuRmsNormPlan, BlockSplitFollowsRowsPerSm) {
  constexpr int kSms = 132;
  struct Want {
    int64_t rows;
    int threads, vpt;
  };
  auto check = [&](int64_t n, int r_elem, std::initializer_list<Want> wants) {
    for (const Want& w : wants) {
      const auto p = plan_rms_norm(n, 8, 2, r_elem, true, w.rows, kSms);
      EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow) << n << " rows " << w.rows;
      EXPECT_EQ(p.threads, w.threads) << n << " rows " << w.rows;
      EXPECT_EQ(p.vpt, w.vpt) << n << " rows " << w.rows;
    }
  };
  check(4096, 0, {{1, 512, 1}, {132, 512, 1}, {133, 256, 2}, {1056, 256, 2}, {1057, 128, 4}});
  check(8192, 0, {{1, 512, 2}, {132, 512, 2}, {133, 256, 4}, {1057, 256, 4}});
  check(4096, 2, {{1, 512, 1}, {133, 256, 2}, {1057, 256, 2}});
  check(8192, 2, {{1, 512, 2}, {133, 512, 2}, {1057, 512, 2}});
  check(4095, 0, {{1, 512, 1}, {133, 256, 2}, {1057, 128, 4}});
  // The default row count is the many-rows plan.
  const auto many = plan_rms_norm(4096, 8);
  EXPECT_EQ(many.threads, 128);
  EXPECT_EQ(many.vpt, 4);
  for (int64_t n : {64, 1024, 32768, 262144}) {
    for (int64_t rows : {1, 133, 1057}) {
      EXPECT_EQ(plan_rms_norm(n, 8, 2, 0, true, rows, kSms).path, plan_rms_norm(n, 8).path) << n;
    }
  }
}

// The lean kernels' row layout (forward and backward): 16-byte vectors dividing n, every given
// tensor of x's element size with rows of at most one leading dimension, each 16-byte aligned.
TEST(CpuRmsNormPlan, LeanRowLayout) {
  const AccessFacts x{g_buf, 2, rows(4096)}, dy{g_buf + 16384, 2, rows(4104)}, absent{};
  EXPECT_TRUE(lean_row_layout(x, 4096, 8, {dy, x}));
  EXPECT_FALSE(lean_row_layout(x, 4096, 8, {dy, absent}));  // no element size
  EXPECT_TRUE(lean_row_layout(x, 4096, 8, {}));
  EXPECT_FALSE(lean_row_layout(x, 4095, 8, {dy}));  // edge elements
  EXPECT_FALSE(lean_row_layout(x, 4096, 4, {dy}));  // 8-byte vectors
  EXPECT_FALSE(lean_row_layout(x, 4096, 1, {dy}));  // scalar width
  AccessFacts t = dy;
  t.data = g_buf + 16386;  // misaligned base
  EXPECT_FALSE(lean_row_layout(x, 4096, 8, {t}));
  t = dy;
  t.rows = rows(4100);  // a row stride that moves the phase
  EXPECT_FALSE(lean_row_layout(x, 4096, 8, {t}));
  t = dy;
  t.rows.nd = 2;  // two leading dimensions
  EXPECT_FALSE(lean_row_layout(x, 4096, 8, {t}));
  t = dy;
  t.elem_size = 4;  // another element size
  EXPECT_FALSE(lean_row_layout(x, 4096, 8, {t}));
  t = x;
  t.rows.nd = 0;  // a single row
  EXPECT_TRUE(lean_row_layout(t, 4096, 8, {dy}));
  const AccessFacts x32{g_buf, 4, rows(4100)};
  EXPECT_TRUE(lean_row_layout(x32, 4100, 4, {}));
}

// Rows the lean direct kernel serves: the plain op with a weight, exact rounding, one dtype,
// aligned rows of one leading dimension and no edge elements; anything else is the direct kernel.
TEST(CpuRmsNormPlan, LeanRows) {
  LeanRowFacts f;
  f.x = {g_buf, 2, rows(4096)};
  f.y = {g_buf + 16384, 2, rows(4096)};
  f.weight = g_buf + 32768;
  f.same_dtype = true;
  f.exact = true;
  f.fused = false;
  f.n = 4096;
  EXPECT_TRUE(rms_norm_lean_rows(f, 8));
  EXPECT_FALSE(rms_norm_lean_rows(f, 1));
  // Whether the facts `base` with one change are lean rows at 8-element vectors.
  auto without = [](const LeanRowFacts& base, auto change) {
    LeanRowFacts g = base;
    change(g);
    return rms_norm_lean_rows(g, 8);
  };
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.n = 4095; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.fused = true; }));  // no residual facts
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.exact = false; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.same_dtype = false; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.weight = nullptr; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.weight = g_buf + 32770; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) {
    g.x.data = g_buf + 16;
    g.x.rows = rows(4100);
  }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.y.data = g_buf + 16386; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.y.rows.nd = 2; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.x.rows.nd = 2; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.x.data = g_buf + 2; }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.y.rows = rows(4100); }));
  EXPECT_FALSE(without(f, [](LeanRowFacts& g) { g.y.elem_size = 4; }));
  EXPECT_TRUE(without(f, [](LeanRowFacts& g) { g.x.rows = rows(4104); }));
  EXPECT_TRUE(without(f, [](LeanRowFacts& g) { g.y.rows.nd = 0; }));
  // The fused add: the residual and residual_out laid out as x and y must be.
  LeanRowFacts fused = f;
  fused.fused = true;
  fused.r = {g_buf + 49152, 2, rows(4096)};
  fused.ro = {g_buf + 65536, 2, rows(4104)};
  EXPECT_TRUE(rms_norm_lean_rows(fused, 8));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.r.data = g_buf + 49154; }));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.ro.rows = rows(4100); }));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.r.rows.nd = 2; }));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.ro.rows.nd = 2; }));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.r.elem_size = 4; }));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.exact = false; }));
  EXPECT_FALSE(without(fused, [](LeanRowFacts& g) { g.same_dtype = false; }));
  EXPECT_TRUE(without(fused, [](LeanRowFacts& g) { g.ro.rows.nd = 0; }));
  // f32 rows: 4-element vectors.
  f.x.elem_size = f.y.elem_size = 4;
  f.x.rows = f.y.rows = rows(4100);
  EXPECT_TRUE(rms_norm_lean_rows(f, 4));
}

// The fused add on lean rows: the widest split at every row count (early weight up to 2 rows
// per SM) while it has at most 2 vectors per thread; 16-bit rows of 513 to 1024 vectors take one
// vector per thread on up to 1024 threads (the wide instance, never the early weight); lean rows
// never take the block ring, rows of more vectors keep the direct kernel's plans.
TEST(CpuRmsNormPlan, FusedLeanSplit) {
  constexpr int kSms = 132;
  struct Want {
    int64_t n;
    int vec, elem;
    int64_t rows;
    RmsNormPath path;
    int threads, vpt;
    bool lean, early;
  };
  const auto blk = RmsNormPath::kBlockPerRow;
  for (const Want& w : {Want{4096, 8, 2, 1, blk, 512, 1, true, true},
                        Want{4096, 8, 2, 264, blk, 512, 1, true, true},
                        Want{4096, 8, 2, 265, blk, 512, 1, true, false},
                        Want{4096, 8, 2, 1057, blk, 512, 1, true, false},
                        Want{4096, 8, 2, 40000, blk, 512, 1, true, false},
                        Want{2048, 8, 2, 40000, blk, 256, 1, true, false},
                        Want{8192, 8, 2, 1, blk, 1024, 1, true, false},
                        Want{8192, 8, 2, 1056, blk, 1024, 1, true, false},
                        Want{8192, 8, 2, 40000, blk, 1024, 1, true, false},
                        Want{5120, 8, 2, 600, blk, 640, 1, true, false},
                        Want{4104, 8, 2, 1, blk, 544, 1, true, false},
                        Want{4104, 8, 2, 40000, blk, 544, 1, true, false},
                        Want{8200, 8, 2, 1, blk, 288, 4, false, false},
                        Want{4096, 4, 4, 1, blk, 512, 2, true, true},
                        Want{4096, 4, 4, 1056, blk, 512, 2, true, false},
                        Want{4096, 4, 4, 1057, blk, 512, 2, true, false},
                        Want{4096, 4, 4, 40000, blk, 512, 2, true, false},
                        Want{16384, 8, 2, 1, blk, 512, 4, false, false},
                        Want{16384, 8, 2, 5000, blk, 512, 4, false, false}}) {
    const auto p = plan_rms_norm(w.n, w.vec, w.elem, w.elem, true, w.rows, kSms, true, true);
    const std::string at =
        std::to_string(w.n) + " x" + std::to_string(w.elem) + " rows " + std::to_string(w.rows);
    EXPECT_EQ(p.path, w.path) << at;
    EXPECT_EQ(p.threads, w.threads) << at;
    EXPECT_EQ(p.vpt, w.vpt) << at;
    EXPECT_EQ(p.lean, w.lean) << at;
    EXPECT_EQ(p.early_weight, w.early) << at;
  }
  // Without lean rows the fused add keeps the direct kernel's and the ring's plans.
  for (int64_t rows : {1, 600, 5000}) {
    const auto p = plan_rms_norm(4096, 8, 2, 2, true, rows, kSms, false, true);
    EXPECT_FALSE(p.lean || p.early_weight) << rows;
    EXPECT_EQ(p.path, rows > 1056 ? RmsNormPath::kBlockRing : RmsNormPath::kBlockPerRow) << rows;
  }
}

// The layouts GpuAddRmsNorm.LeanKernelMatchesDirectKernel compares: rows of pitch n + 8 are lean
// rows of the fused add, the same rows viewed as [3, m / 3, n] stored sequence-major (leading
// dimensions that do not collapse) are not, so that test sets the lean kernel against the direct
// kernel and the ring.
TEST(CpuRmsNormPlan, FusedLeanRowsOfTheGpuTestLayouts) {
  struct Variant {
    int64_t n;
    DType dt;
  };
  for (const Variant& v : {Variant{4096, DType::kBFloat16}, Variant{2048, DType::kFloat16},
                           Variant{8192, DType::kBFloat16}, Variant{5120, DType::kFloat16},
                           Variant{4096, DType::kFloat32}, Variant{4104, DType::kBFloat16}}) {
    const int64_t m = 24, pitch = v.n + 8;
    const int elem = static_cast<int>(dtype_size(v.dt));
    auto facts = [&](bool batched, int64_t at) {
      void* p = g_buf + at;
      const TensorRef t =
          batched ? TensorRef(p, v.dt, {3, m / 3, v.n}, {pitch, 3 * pitch, 1}, Device::cuda(0))
                  : TensorRef(p, v.dt, {m, v.n}, {pitch, 1}, Device::cuda(0));
      return AccessFacts{p, elem, make_row_layout(t)};
    };
    for (bool batched : {false, true}) {
      LeanRowFacts f;
      f.x = facts(batched, 0);
      f.y = facts(batched, 16);
      f.r = facts(batched, 32);
      f.ro = facts(batched, 48);
      f.weight = g_buf + 64;
      f.same_dtype = f.exact = f.fused = true;
      f.n = v.n;
      EXPECT_EQ(f.x.rows.nd, batched ? 2 : 1) << v.n;
      EXPECT_EQ(rms_norm_lean_rows(f, 16 / elem), !batched) << v.n << " batched " << batched;
    }
  }
}

// Lean rows take the many-rows split on the early-weight form up to 2 rows per SM, then the
// widest split up to 4 rows per SM (1 where it has 2 vectors per thread), the middle one up to
// 32 and the many-rows split beyond, on the lean kernel at 1, 2 and 4 vectors per thread.
TEST(CpuRmsNormPlan, LeanSplitFollowsRowsPerSm) {
  constexpr int kSms = 132;
  struct Want {
    int64_t rows;
    int threads, vpt;
    bool lean, early;
  };
  auto check = [&](int64_t n, std::initializer_list<Want> wants) {
    for (const Want& w : wants) {
      const auto p = plan_rms_norm(n, 8, 2, 0, true, w.rows, kSms, true);
      EXPECT_EQ(p.path, RmsNormPath::kBlockPerRow) << n << " rows " << w.rows;
      EXPECT_EQ(p.threads, w.threads) << n << " rows " << w.rows;
      EXPECT_EQ(p.vpt, w.vpt) << n << " rows " << w.rows;
      EXPECT_EQ(p.lean, w.lean) << n << " rows " << w.rows;
      EXPECT_EQ(p.early_weight, w.early) << n << " rows " << w.rows;
    }
  };
  check(4096, {{1, 128, 4, true, true},
               {264, 128, 4, true, true},
               {265, 512, 1, true, false},
               {528, 512, 1, true, false},
               {529, 256, 2, true, false},
               {4224, 256, 2, true, false},
               {4225, 128, 4, true, false}});
  check(8192, {{1, 256, 4, true, true}, {264, 256, 4, true, true}, {265, 256, 4, true, false}});
  // Rows that need 4 vectors per thread at 512 threads: that split at every row count.
  check(16384, {{1, 512, 4, true, true}, {265, 512, 4, true, false}, {5000, 512, 4, true, false}});
  // Without lean rows the plan never takes the lean kernel or its early weight, and the warp
  // path never does.
  for (int64_t rows : {1, 600, 5000}) {
    const auto direct = plan_rms_norm(4096, 8, 2, 0, true, rows, kSms);
    EXPECT_FALSE(direct.lean || direct.early_weight) << rows;
    const auto warp = plan_rms_norm(1024, 8, 2, 0, true, rows, kSms, true);
    EXPECT_FALSE(warp.lean || warp.early_weight) << rows;
  }
}

// Aligned fused rows with more than 8 rows per SM take the block ring: about 256 threads, 2
// stages and the weight in shared memory where it fits 200 KiB; fewer rows, the plain op, rows
// too wide for its scratch (or its ring) keep the direct kernel's plans.
TEST(CpuRmsNormPlan, FusedRingRows) {
  constexpr int kSms = 132;
  const auto ring = [&](int64_t n, int vec, int x_elem, int r_elem, int64_t rows) {
    return plan_rms_norm(n, vec, x_elem, r_elem, true, rows, kSms, false, true);
  };
  struct Want {
    int64_t n;
    int vec, x_elem, r_elem;
    int threads, vpt, stages;
    bool w_smem;
  };
  for (const Want& w : {Want{8192, 8, 2, 2, 256, 4, 2, true}, Want{4096, 8, 2, 2, 256, 2, 2, true},
                        Want{5120, 8, 2, 2, 160, 4, 2, true}, Want{2048, 8, 2, 2, 256, 1, 2, true},
                        Want{8192, 8, 2, 4, 256, 4, 2, true}, Want{4096, 4, 4, 4, 256, 4, 2, true},
                        Want{1032, 8, 2, 2, 160, 1, 2, true}}) {
    const auto p = ring(w.n, w.vec, w.x_elem, w.r_elem, 1057);
    EXPECT_EQ(p.path, RmsNormPath::kBlockRing) << w.n;
    EXPECT_EQ(p.threads, w.threads) << w.n;
    EXPECT_EQ(p.vpt, w.vpt) << w.n;
    EXPECT_EQ(p.stages, w.stages) << w.n;
    EXPECT_EQ(p.weight_in_smem, w.w_smem) << w.n;
    EXPECT_EQ(p.rows_per_block, 1) << w.n;
    EXPECT_FALSE(p.lean) << w.n;
    EXPECT_LE(p.smem_bytes, kSmemBudget) << w.n;
    EXPECT_EQ(p.smem_bytes, 32 * 4 + (w.w_smem ? w.n * 4 : 0) +
                                ring_bytes(w.vec, w.vpt, w.stages, w.threads, w.x_elem, w.r_elem))
        << w.n;
    EXPECT_LE(int64_t{p.threads} * p.vpt, kRingMaxVectors) << w.n;
    // Up to 8 rows per SM, the direct kernel's split.
    const auto few = ring(w.n, w.vec, w.x_elem, w.r_elem, 1056);
    const auto direct = plan_rms_norm(w.n, w.vec, w.x_elem, w.r_elem, true, 1056, kSms);
    EXPECT_EQ(few.path, RmsNormPath::kBlockPerRow) << w.n;
    EXPECT_EQ(few.threads, direct.threads) << w.n;
    EXPECT_EQ(few.vpt, direct.vpt) << w.n;
  }
  EXPECT_EQ(ring(8192, 8, 2, 0, 5000).path, RmsNormPath::kBlockPerRow);   // plain op
  EXPECT_EQ(ring(16384, 8, 2, 2, 5000).path, RmsNormPath::kBlockPerRow);  // 2048 vectors
  EXPECT_EQ(ring(1024, 8, 2, 2, 5000).path, RmsNormPath::kWarpPerRow);
  EXPECT_EQ(plan_rms_norm(8192, 8, 2, 2, true, 5000, kSms).path, RmsNormPath::kBlockPerRow);
  // Rows without a weight stage none.
  EXPECT_FALSE(plan_rms_norm(8192, 8, 2, 2, false, 5000, kSms, false, true).weight_in_smem);
}

// Which rows have no edge elements (the block ring's rows).
TEST(CpuRmsNormPlan, AlignedRows) {
  EXPECT_TRUE(rms_norm_aligned_rows({g_buf, 2, rows(4096)}, 4096, 8));
  EXPECT_TRUE(rms_norm_aligned_rows({g_buf, 2, rows(4104)}, 4096, 8));
  EXPECT_FALSE(rms_norm_aligned_rows({g_buf, 2, rows(4096)}, 4095, 8));
  EXPECT_FALSE(rms_norm_aligned_rows({g_buf, 2, rows(4100)}, 4096, 8));
  EXPECT_FALSE(rms_norm_aligned_rows({g_buf + 2, 2, rows(4096)}, 4096, 8));
  EXPECT_FALSE(rms_norm_aligned_rows({g_buf, 2, rows(4096)}, 4096, 1));
  EXPECT_TRUE(rms_norm_aligned_rows({g_buf, 4, rows(4100)}, 4096, 4));
}

TEST(CpuRmsNormPlan, EveryRegisterPlanCoversTheRow) {
  for (int vec : {1, 4, 8}) {
    for (int64_t n = 1; n <= 40000; n += 37) {
      for (int64_t rows : {int64_t{1}, int64_t{1000}, int64_t{2000}, kManyRows}) {
        for (int r_elem : {0, 2}) {
          const auto p = plan_rms_norm(n, vec, 2, r_elem, true, rows, 132, false, r_elem > 0);
          // Lean rows (16-byte vectors) of 16- and 32-bit elements: the kernels built for them.
          for (int elem : {2, 4}) {
            if (vec * elem != 16) continue;
            const auto q =
                plan_rms_norm(n, vec, elem, r_elem > 0 ? elem : 0, true, rows, 132, true, true);
            if (q.lean) {
              EXPECT_EQ(q.path, RmsNormPath::kBlockPerRow) << n;
              EXPECT_LE(q.vpt, r_elem > 0 ? kLeanFusedMaxVpt : kLeanMaxVpt) << n;
              EXPECT_GE(int64_t{q.threads} * q.vpt * vec, n) << n;
              EXPECT_EQ(q.threads % 32, 0) << n;
              // Past kRowsMaxThreads only the fused add's wide instance.
              if (q.threads > kRowsMaxThreads) {
                EXPECT_TRUE(r_elem > 0 && elem == kLeanFusedWideElem && q.vpt == 1 &&
                            !q.early_weight && q.threads <= kLeanFusedWideThreads)
                    << n;
              }
            }
            // A residual of another element size is never planned on the lean kernel.
            if (r_elem > 0) {
              const auto mixed = plan_rms_norm(n, vec, elem, 6 - elem, true, rows, 132, true, true);
              EXPECT_FALSE(mixed.lean) << n;
            }
          }
          if (p.path == RmsNormPath::kTwoPass) continue;
          EXPECT_LE(p.vpt * vec, kMaxRegElems) << n;
          EXPECT_LE(p.threads, kRowsMaxThreads) << n;
          EXPECT_EQ(p.threads % 32, 0) << n;
          EXPECT_GE(static_cast<int64_t>(p.threads) * p.vpt * vec, n) << n;
          EXPECT_GE(p.threads, 2 * vec - 2) << n;  // one thread per edge element
          if (p.path == RmsNormPath::kBlockRing) {
            EXPECT_LE(int64_t{p.threads} * p.vpt, kRingMaxVectors) << n;
            EXPECT_LE(p.smem_bytes, kSmemBudget) << n;
            EXPECT_GT(p.stages, 0) << n;
          }
        }
      }
    }
  }
}

TEST(CpuRowLayout, CollapsesContiguousLeadingDims) {
  int dummy;
  // [2, 3, 8] contiguous: one row dim of 6, stride 8.
  auto t = TensorRef::contiguous(&dummy, DType::kBFloat16, {2, 3, 8}, Device::cuda(0));
  auto r = make_row_layout(t);
  ASSERT_EQ(r.nd, 1);
  EXPECT_EQ(r.sizes[0], 6);
  EXPECT_EQ(r.strides[0], 8);
  EXPECT_EQ(r.offset(5), 40);
  for (int64_t m = 0; m < 6; ++m) EXPECT_EQ(r.lead_offset(m), r.offset(m)) << m;
  // [B=2, S=3, H=8] stored sequence-major (strides [8, 16, 1]): two dims.
  t = TensorRef(&dummy, DType::kBFloat16, {2, 3, 8}, {8, 16, 1}, Device::cuda(0));
  r = make_row_layout(t);
  ASSERT_EQ(r.nd, 2);
  EXPECT_EQ(r.offset(0), 0);
  EXPECT_EQ(r.offset(1), 16);  // b=0, s=1
  EXPECT_EQ(r.offset(3), 8);   // b=1, s=0
  EXPECT_EQ(r.offset(5), 8 + 32);
  // 1-D tensor: a single row.
  t = TensorRef::contiguous(&dummy, DType::kBFloat16, {8}, Device::cuda(0));
  EXPECT_EQ(make_row_layout(t).nd, 0);
  EXPECT_EQ(make_row_layout(t).lead_offset(0), 0);
  EXPECT_EQ(row_count(t), 1);
}

}  // namespace
}  // namespace ropenorm::core
