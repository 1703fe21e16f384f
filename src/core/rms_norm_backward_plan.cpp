// Launch planning for the RMSNorm backward kernels (see rms_norm_backward_plan.h).
#include "core/rms_norm_backward_plan.h"

#include <algorithm>

namespace ropenorm::core {

const char* rms_norm_bwd_path_name(RmsNormBwdPath path) {
  switch (path) {
    case RmsNormBwdPath::kWarpPerRow:
      return "warp_per_row";
    case RmsNormBwdPath::kBlockPerRow:
      return "block_per_row";
    case RmsNormBwdPath::kTwoPass:
      return "two_pass";
  }
  return "unknown-path";
}

static_assert(kBwdMaxThreads * kMaxRegElems == kBwdWideRow,
              "the ring paths' widest row is the wide-row threshold");

namespace {

RmsNormBwdPlan two_pass(int vec) {
  RmsNormBwdPlan p;
  p.path = RmsNormBwdPath::kTwoPass;
  p.vec = vec;
  p.vpt = 1;
  p.threads = kBwdTwoPassThreads;
  p.rows_per_block = 1;
  p.stages = 0;
  p.smem_acc = false;
  p.smem_bytes = 0;
  return p;
}

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// Rows of varying phase (smem_acc) take their weight factors from a shared table in the
// partials' slot layout (bank-conflict free at every phase) where it fits in `budget`: read per
// element from global memory, the columns a warp reads lie 16 bytes apart, 16 sectors for 32
// factors. The table does not change the path or the split (it can lower the blocks per SM, and
// so the grid that groups dw's partial rows).
RmsNormBwdPlan with_weight_table(RmsNormBwdPlan p, int64_t n, int64_t budget) {
  if (!p.smem_acc) return p;
  const int64_t bytes = bwd_table_lanes(n, p.vec) * p.vec * 4;
  if (p.smem_bytes + bytes <= budget) {
    p.smem_bytes += bytes;
    p.stage_weights = true;
  }
  return p;
}

}  // namespace

// Scratch, the weight slots (or, for rows of varying phase, the partials tables, never larger:
// vpt * threads >= lanes), the rstd slots (one float per stage and thread) and the ring of one
// block. Both kinds of rows are charged the same, so the path and the thread layout (and so dx)
// never depend on the rows' phases beyond the choice of partials.
int64_t bwd_smem_bytes(const RmsNormBwdPlan& p, int ring_elem_bytes, bool has_weight) {
  const int64_t ring = static_cast<int64_t>(p.stages) * p.vpt * p.threads * p.vec * ring_elem_bytes;
  const int64_t own = static_cast<int64_t>(p.vpt) * p.threads * p.vec * 4;
  const int64_t rstd = static_cast<int64_t>(p.stages) * p.threads * 4;
  return 32 * 4 + p.rows_per_block * ((has_weight ? own : 0) + rstd + ring);
}

RmsNormBwdPlan plan_rms_norm_backward(int64_t n, int vec, bool uniform_phase, bool ring_kernels,
                                      int ring_elem_bytes, bool has_weight) {
  if (vec == kScalarWidth || n <= 0 || !ring_kernels) return two_pass(vec);
  // Without a weight there is no dw: register partials (unused) serve every phase.
  const bool smem_acc = !uniform_phase && has_weight;
  RmsNormBwdPlan p;
  p.vec = vec;
  p.smem_acc = smem_acc;
  const int64_t lanes = bwd_table_lanes(n, vec);
  if (lanes <= kWarpMaxVectors) {
    p.path = RmsNormBwdPath::kWarpPerRow;
    p.threads = 32;
    p.vpt = lanes <= 32 ? 1 : (lanes <= 64 ? 2 : 4);
    p.stages = kBwdWarpStages;
    for (int r : {8, 4, 2, 1}) {
      p.rows_per_block = r;
      p.smem_bytes = bwd_smem_bytes(p, ring_elem_bytes, has_weight);
      if (p.smem_bytes <= kBwdSmemBudget) return with_weight_table(p, n, kBwdSmemBudget);
    }
    return two_pass(vec);
  }
  int max_vpt = kMaxRegElems / vec;
  if (max_vpt > kMaxVpt) max_vpt = kMaxVpt;
  int vpt = max_vpt;
  if (n % vec != 0) {
    // Rows with edge elements (in a contiguous batch their 16-byte phase varies: the weight
    // factors come from a shared table and the partials go through another): one vector per
    // thread up to kBwdEdgeRowThreads threads, else two (256 x 2 at N = 4095: three blocks per
    // SM, where 512 x 1 fits two), and more only where a row needs more than kBwdMaxThreads.
    // Decided from N, not from the rows' phases, so a row's split (and so its dx) is the same
    // whether it comes alone or in a batch.
    vpt = lanes > kBwdEdgeRowThreads && max_vpt >= 2 ? 2 : 1;
    while (vpt < max_vpt && lanes > static_cast<int64_t>(kBwdMaxThreads) * vpt) vpt *= 2;
  } else {
    // The most vectors per thread while at least kBwdMinThreads threads share the row: a row's
    // fixed work (its pointers, phase and block reduction) is paid per thread.
    while (vpt > 1 && (lanes + vpt - 1) / vpt < kBwdMinThreads) vpt /= 2;
  }
  if (lanes > static_cast<int64_t>(kBwdMaxThreads) * vpt) return two_pass(vec);
  p.path = RmsNormBwdPath::kBlockPerRow;
  p.vpt = vpt;
  p.threads = static_cast<int>(round_up((lanes + vpt - 1) / vpt, 32));
  p.rows_per_block = 1;
  p.stages = kBwdBlockStages;
  for (int64_t budget : {kBwdSmemBudget, kBwdSmemBudgetWide}) {
    p.smem_bytes = bwd_smem_bytes(p, ring_elem_bytes, has_weight);
    if (p.smem_bytes <= budget) return with_weight_table(p, n, budget);
  }
  return two_pass(vec);
}

RmsNormBwdPlan plan_rms_norm_backward_ds(int64_t n, int vec, bool uniform_phase, bool ring_kernels,
                                         int ring_elem_bytes, int ds_elem_bytes,
                                         bool writes_dresidual, bool has_weight) {
  const RmsNormBwdPlan p = plan_rms_norm_backward(n, vec, uniform_phase, ring_kernels,
                                                  ring_elem_bytes + ds_elem_bytes, has_weight);
  // The measured case: dx alone, 16-bit dy, s and ds, a weight, no edge elements.
  const bool measured = ds_elem_bytes == 2 && ring_elem_bytes == 4 && !writes_dresidual &&
                        has_weight && uniform_phase && n % vec == 0;
  if (!measured || p.path == RmsNormBwdPath::kTwoPass || p.smem_bytes <= kBwdSmemBudget) return p;
  RmsNormBwdPlan q =
      plan_rms_norm_backward(n, vec, uniform_phase, ring_kernels, ring_elem_bytes, has_weight);
  // The split depends on n and vec alone, so q has p's; register partials (a uniform phase).
  if (q.path != RmsNormBwdPath::kBlockPerRow || !bwd_ds_direct_vpt(q.vpt) ||
      q.threads > kBwdDsDirectMaxThreads || q.smem_bytes > kBwdSmemBudget) {
    return p;
  }
  q.ds_direct = true;
  return q;
}

int bwd_max_blocks_per_sm(int64_t n, RmsNormBwdPath path) {
  if (path == RmsNormBwdPath::kTwoPass) return n <= kBwdWideRow ? 2 : 1;
  return kBwdRingBlocksPerSm;
}

int64_t bwd_max_parts(int64_t rows, int64_t n, int sm_count) {
  if (rows <= 0 || n <= 0) return 0;
  // Ring paths serve at most 16384 columns (512 threads x 32 values).
  const int per_sm = n <= kBwdWideRow
                         ? std::max(bwd_max_blocks_per_sm(n, RmsNormBwdPath::kBlockPerRow),
                                    bwd_max_blocks_per_sm(n, RmsNormBwdPath::kTwoPass))
                         : bwd_max_blocks_per_sm(n, RmsNormBwdPath::kTwoPass);
  return std::min<int64_t>(rows, static_cast<int64_t>(std::max(sm_count, 1)) * per_sm);
}

size_t bwd_workspace_bytes(int64_t rows, int64_t n, int sm_count) {
  return static_cast<size_t>(bwd_max_parts(rows, n, sm_count)) * static_cast<size_t>(n) * 4u;
}

int64_t bwd_grid(int64_t rows, int64_t n, const RmsNormBwdPlan& plan, int resident_per_sm,
                 int sm_count) {
  if (rows <= 0) return 0;
  const int64_t per_block = plan.path == RmsNormBwdPath::kWarpPerRow ? plan.rows_per_block : 1;
  const int64_t units = (rows + per_block - 1) / per_block;
  const int per_sm = std::max(1, std::min(resident_per_sm, bwd_max_blocks_per_sm(n, plan.path)));
  return std::min<int64_t>(units, static_cast<int64_t>(std::max(sm_count, 1)) * per_sm);
}

bool bwd_plain_call(const RmsNormBwdPlan& p, const BwdPlainFacts& f) {
  return p.path != RmsNormBwdPath::kTwoPass && !p.smem_acc && f.rstd_saved && f.weight && f.dw &&
         !f.ds && !f.dresidual && f.dx_as_input && f.dy_as_input;
}

bool bwd_lean_call(const RmsNormBwdPlan& p, const BwdLeanFacts& f, int64_t rows, int sm_count) {
  return p.path == RmsNormBwdPath::kBlockPerRow && !p.smem_acc && p.threads <= kBwdLeanMaxThreads &&
         f.rows && f.same_dtype && f.weight_aligned && f.dw &&
         rows <= static_cast<int64_t>(kBwdLeanMaxRowsPerSm) * std::max(sm_count, 1);
}

RmsNormBwdPlan bwd_plain_plan(const RmsNormBwdPlan& p, int elem_bytes, int64_t smem_per_sm,
                              int64_t smem_reserved) {
  if (elem_bytes != 2 || p.path != RmsNormBwdPath::kBlockPerRow || p.vpt != kBwdPlainDeepVpt) {
    return p;
  }
  RmsNormBwdPlan deep = p;
  deep.stages = kBwdPlainDeepStages;
  deep.smem_bytes = bwd_smem_bytes(deep, 2 * elem_bytes, true);
  const bool fits = kBwdPlainDeepMinBlocks * (deep.smem_bytes + smem_reserved) <= smem_per_sm;
  return fits ? deep : p;
}

}  // namespace ropenorm::core
