// Launch planning for the RoPE kernel (see rope_plan.h).
#include "core/rope_plan.h"

#include <algorithm>
#include <cstdint>

namespace ropenorm::core {

namespace {

bool fits(int v, int64_t half, int64_t head_dim, std::initializer_list<RopeAccess> operands) {
  if (half % v != 0 || head_dim % v != 0) return false;
  for (const RopeAccess& t : operands) {
    if (t.data == nullptr) continue;
    const int64_t bytes = static_cast<int64_t>(v) * t.elem_size;
    const int64_t align = bytes < 16 ? bytes : 16;
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align) != 0) return false;
    for (int64_t s : t.strides) {
      if (s % v != 0) return false;
    }
  }
  return true;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The fewest blocks of at most `threads` threads, each at least one row of `lanes` lanes, that
/// hold `rows` rows.
int64_t blocks_for_rows(int64_t rows, int64_t lanes, int64_t threads) {
  return ceil_div(rows, std::max<int64_t>(1, threads / lanes));
}

}  // namespace

int rope_vector_width(int64_t half, int64_t head_dim, int elem_size,
                      std::initializer_list<RopeAccess> operands) {
  for (int v = 16 / elem_size; v >= 2; v /= 2) {
    if (fits(v, half, head_dim, operands)) return v;
  }
  return 1;
}

RopePlan plan_rope(int64_t tokens, int64_t heads, int64_t half, int vec) {
  RopePlan p;
  p.vec = vec;
  const int64_t nvp = half / vec;  // pair vectors per head
  p.bx = static_cast<int>(nvp < 32 ? (nvp < 1 ? 1 : nvp) : 32);
  // Rows of kRopeHeadsPerThread heads, split evenly over as few head groups as fit the block.
  int64_t rows = (heads + kRopeHeadsPerThread - 1) / kRopeHeadsPerThread;
  if (rows < 1) rows = 1;
  const int64_t max_by = kRopeBlockThreads / p.bx;
  int64_t groups = (rows + max_by - 1) / max_by;
  if (groups > kRopeMaxHeadGroups) groups = kRopeMaxHeadGroups;
  int64_t by = (rows + groups - 1) / groups;
  if (by > max_by) by = max_by;
  p.by = static_cast<int>(by);
  p.head_groups = static_cast<int>(groups);
  int64_t bz = kRopeBlockThreads / (p.bx * p.by);
  if (bz > 64) bz = 64;  // CUDA's limit on blockDim.z
  if (bz > tokens) bz = tokens;
  if (bz < 1) bz = 1;
  p.bz = static_cast<int>(bz);
  int64_t grid = (tokens + bz - 1) / bz;
  if (grid > kRopeMaxGrid) grid = kRopeMaxGrid;
  if (grid < 1) grid = 1;
  p.grid = grid;
  const bool one_round = p.bx >= nvp && groups * by * kRopeHeadsPerThread >= heads;
  p.single = grid * p.bz >= tokens && one_round;
  p.long_run = p.single && tokens >= kRopeLongRunTokens;
  return p;
}

bool rope_lean_shape(const RopeLeanFacts& f) {
  if (f.elem_size != 2 || f.vec != kRopeLeanVec || !f.cos_sin_loaded) return false;
  if (2 * f.half != f.head_dim || f.half % kRopeLeanVec != 0) return false;
  return f.tokens >= 1 && f.heads >= 1;
}

bool rope_lean(const RopeLeanFacts& f, int64_t max_tokens) {
  if (!rope_lean_shape(f) || f.tokens > max_tokens || f.seq < 0) return false;
  const int64_t seq = f.seq > 0 ? f.seq : f.tokens;
  if (seq > kRopeLeanMaxSeq || f.tokens / seq > kRopeMaxHeadGroups) return false;
  return (f.half / kRopeLeanVec) * f.heads <= kRopeLeanMaxThreads;
}

bool rope_lean_long_run_block(const RopeLeanFacts& f) {
  return (f.half / kRopeLeanVec) * f.heads <= kRopeLeanLongRunThreads;
}

int64_t rope_lean_max_tokens(const RopeLeanFacts& f) {
  return rope_lean_long_run_block(f) ? INT64_MAX : kRopeLeanMaxTokens;
}

RopePlan plan_rope_lean(const RopeLeanFacts& f, int sm_count) {
  const int64_t seq = f.seq > 0 ? f.seq : f.tokens;
  const int64_t lanes = std::max<int64_t>(1, f.half / kRopeLeanVec);
  const int64_t heads = std::max<int64_t>(1, f.heads);
  int64_t z = 1;
  if (sm_count > 0 && lanes * heads > kRopeLeanSplitMinThreads) {
    const int64_t least = blocks_for_rows(heads, lanes, kRopeLeanSplitMinThreads);
    const int64_t aim = blocks_for_rows(heads, lanes, kRopeLeanSplitThreads);
    const int64_t fit =
        int64_t{kRopeLeanSplitBlocksPerSm} * sm_count / std::max<int64_t>(1, f.tokens);
    z = std::max(least, std::min(aim, fit));
  }
  const int64_t by = ceil_div(heads, z);
  RopePlan p;
  p.vec = kRopeLeanVec;
  p.bx = static_cast<int>(lanes);
  p.by = static_cast<int>(by);
  p.head_split = static_cast<int>(ceil_div(heads, by));
  p.bz = 1;
  p.grid = seq;
  p.head_groups = static_cast<int>(f.tokens / seq);
  p.single = true;
  p.lean = true;
  return p;
}

RopePlan plan_rope_lean_run(const RopeLeanFacts& f, int max_threads, int min_blocks, int sm_count,
                            int64_t unknown_grid) {
  const int64_t lanes = f.half / kRopeLeanVec;
  const int64_t heads = std::max<int64_t>(1, f.heads);
  const int64_t groups = blocks_for_rows(heads, lanes, max_threads);
  RopePlan p;
  p.vec = kRopeLeanVec;
  p.bx = static_cast<int>(lanes);
  p.by = static_cast<int>(ceil_div(heads, groups));
  p.bz = 1;
  p.head_groups = static_cast<int>(groups);
  const int64_t warp_threads = (lanes * p.by + 31) / 32 * 32;
  const int64_t per_sm = std::max<int64_t>(1, int64_t{min_blocks} * max_threads / warp_threads);
  const int64_t blocks = sm_count > 0 ? per_sm * sm_count : unknown_grid;
  p.grid = std::min(f.tokens, std::max<int64_t>(1, blocks / groups));
  p.lean_run = true;
  p.smem_bytes = rope_lean_run_ring_bytes(f.elem_size, f.cs_elem_size, lanes * p.by);
  return p;
}

bool lean_run_shape(const RopeLeanFacts& f, int64_t min_tokens) {
  const int64_t lanes = f.half / kRopeLeanVec;
  return rope_lean_shape(f) && f.tokens >= min_tokens && (lanes == 8 || lanes == 16);
}

bool rope_lean_run(const RopeLeanFacts& f) {
  const int64_t min_tokens = rope_lean_long_run_block(f) && f.cos_sin_rows
                                 ? kRopeLeanRunMinTokens
                                 : kRopeLeanRunShortMinTokens;
  return lean_run_shape(f, min_tokens);
}

bool flat_tokens(int64_t batch, int64_t seq, const TokenStrides* ops, int count) {
  if (batch * seq > kFlatMaxTokens) return false;
  for (int i = 0; i < count; ++i) {
    const TokenStrides& o = ops[i];
    if (batch > 1 && o.sb != seq * o.ss) return false;
    if (o.ss < 0 || o.ss > kFlatMaxStrideBytes / o.elem_size) return false;
  }
  return true;
}

bool lean_run_full_warps(const RopePlan& p, int64_t heads) {
  return p.lean_run && (int64_t{p.bx} * p.by) % 32 == 0 && int64_t{p.by} * p.head_groups == heads;
}

RopeLeanRunInstance rope_lean_run_instance(bool cos_sin_rows, int explicit_position_bits,
                                           bool flat) {
  if (!cos_sin_rows) return flat ? RopeLeanRunInstance::kTokensFlat : RopeLeanRunInstance::kAny;
  return explicit_position_bits == 64 && flat ? RopeLeanRunInstance::kRowsFlatI64
                                              : RopeLeanRunInstance::kRows;
}

RopePlan plan_rope_call(const RopeLeanFacts& f, bool allow_lean, int sm_count) {
  if (allow_lean && rope_lean_run(f)) {
    return plan_rope_lean_run(f, kRopeLeanRunThreads, kRopeLeanRunMinBlocks, sm_count,
                              kRopeLeanRunMaxGrid);
  }
  if (allow_lean && rope_lean(f, rope_lean_max_tokens(f))) return plan_rope_lean(f, sm_count);
  return plan_rope(f.tokens, f.heads, f.half, f.vec);
}

}  // namespace ropenorm::core
