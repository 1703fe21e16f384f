// Launch planning for the RMSNorm backward kernels: path, vector width, block shape, ring depth,
// where the weight-gradient partials accumulate, and the bound on the partial rows (the
// workspace). Decided on the host from N, the dtypes, the pointers and the strides; the thread
// layout that reduces a row never depends on the row count M, so a row's dx is the same whatever
// M (batch invariance).
//
// dw is reduced in two fixed-order stages: every block of a persistent grid keeps one fp32
// partial row (its rows' dy * xh, summed in row order) and writes it to workspace row
// blockIdx.x; the column sum (cuda/common/column_sum.h) then adds the partial rows in an order
// fixed by their count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/rms_norm_plan.h"
#include "ropenorm/tensor.h"

namespace ropenorm::core {

enum class RmsNormBwdPath : int {
  kWarpPerRow = 0,   ///< a warp per row, several warps (rows in flight) per block
  kBlockPerRow = 1,  ///< a block per row, the row's share per thread staged through a ring
  kTwoPass = 2,      ///< rows too wide for the ring (or scalar access): read twice
};

const char* rms_norm_bwd_path_name(RmsNormBwdPath path);

/// Largest block of the backward kernels (their launch bound).
constexpr int kBwdMaxThreads = 512;
/// Fewest threads per row the block path aims for before it takes fewer vectors per thread.
constexpr int kBwdMinThreads = 128;
/// Rows with edge elements (N not a multiple of the vector width): the most threads a row takes
/// at one vector per thread; wider rows take two (bench/experiments/rms_norm_backward_rows.cu
/// odd: at N = 4095, M = 32768, 256 x 2 ran 332.6 us against 408.5 at 512 x 1).
constexpr int kBwdEdgeRowThreads = 256;
/// Ring depth of the warp path and of the block path (measured on H200, bf16: a 4-stage block
/// ring was slower than a 2-stage one at every split at N = 4096 and 8192, and a 4-stage warp
/// ring at every rows-per-block count at N = 512 and 1024, where its shared memory halved the
/// rows per block: N = 1024, M = 32768 85.6 us at 4 rows x 4 stages, 63.0 us at 8 x 2).
constexpr int kBwdWarpStages = 2;
constexpr int kBwdBlockStages = 2;
/// The plain block-path kernel at kBwdPlainDeepVpt vectors per thread takes kBwdPlainDeepStages
/// stages where kBwdPlainDeepMinBlocks of its blocks fit per SM (bwd_plain_plan). H200, bf16,
/// N = 4096 (128 x 4, 96 registers at 2 stages, 110 at 3; rms-bwd-stages-5ca16f3-nvidia-h200.log):
/// M = 32768 210.6 -> 203.9 us (4 -> 3 blocks per SM), M = 1024 21.6 -> 19.7, M = 4096 35.6 ->
/// 35.9; at N = 8192 (256 x 4) three stages leave one block per SM (408.1 -> 480.1 us), and
/// at 2 vectors per thread (N = 2048) the 64-register bound spills (122.1 -> 148.9 us). 16-bit
/// rows only (f32 is not measured).
constexpr int kBwdPlainDeepStages = 3;
constexpr int kBwdPlainDeepVpt = 4;
constexpr int kBwdPlainDeepMinBlocks = 3;
/// Threads of a two-pass block.
constexpr int kBwdTwoPassThreads = 512;
/// Dynamic shared memory one ring-path block may use, so that two blocks fit on an sm_90 SM.
constexpr int64_t kBwdSmemBudget = 110 * 1024;
/// Wider rows get less: one block per SM, nearly all of its shared memory.
constexpr int64_t kBwdSmemBudgetWide = 200 * 1024;
/// The ring paths run up to four blocks (partial rows) per SM, as many as fit (a persistent grid
/// that leaves room for more blocks is placed unevenly when it launches early behind another
/// kernel), two-pass rows up to two, and two-pass rows wider than kBwdWideRow one.
constexpr int kBwdRingBlocksPerSm = 4;
constexpr int64_t kBwdWideRow = 16384;

struct RmsNormBwdPlan {
  RmsNormBwdPath path = RmsNormBwdPath::kBlockPerRow;
  int vec = 1;             ///< elements per vector access
  int vpt = 1;             ///< vectors per thread per row (ring paths)
  int threads = 32;        ///< threads per row (32 on the warp path)
  int rows_per_block = 1;  ///< warp path: warps per block, each with its own rows
  int stages = 4;          ///< ring depth (ring paths)
  bool smem_acc = false;   ///< dw partials in shared memory (rows whose 16-byte phase varies)
  /// smem_acc: the weight factors staged once per block in a shared table of
  /// bwd_table_lanes(n, vec) * vec floats (counted in smem_bytes), where it fits the plan's
  /// budget; else read per element from global memory. The same factors either way.
  bool stage_weights = false;
  /// The fused add's ds read from global memory into registers when a row's processing starts,
  /// not staged through the ring (plan_rms_norm_backward_ds: the ring without it fits more blocks
  /// per SM).
  bool ds_direct = false;
  int64_t smem_bytes = 0;  ///< dynamic shared memory per block
  /// The lean kernel instead of the ring kernel, on the ring kernel's grid and split (so the same
  /// bits): set by the launcher from bwd_lean_call, never by plan_rms_norm_backward.
  bool lean = false;
};

/// Column c's slot in the shared-memory tables of the ring kernels (weight factors, dw partials,
/// the warp path's fold): (c % vec) * lanes + c / vec with lanes = ceil(n / vec). A thread's
/// vector j of a row at phase p reads slots that consecutive threads find in consecutive words,
/// whatever p: bank-conflict free.
constexpr int64_t bwd_table_lanes(int64_t n, int vec) { return (n + vec - 1) / vec; }

/// Whether the ring kernels (both kinds of dw partials) are built for input dtype x_dtype (x or
/// s) and dy's dtype: for equal dtypes and for an f32 input with 16-bit dy (the f32 residual
/// stream), so rows of varying phase take the same ring (and split) as a single row; other pairs
/// take the two-pass kernel, which serves every pair. The launcher instantiates from this too.
constexpr bool bwd_ring_kernels(DType x_dtype, DType dy_dtype) {
  return x_dtype == dy_dtype || (x_dtype == DType::kFloat32 && dy_dtype != DType::kFloat32);
}

/// Plan for rows of width n at vector width vec (rms_norm_vector_width with the smaller-element
/// input as the reference; kScalarWidth takes the two-pass path). `uniform_phase`: every row sits
/// at the same 16-byte phase (so a thread's columns are the same in every row and its dw
/// partials stay in registers); `ring_kernels`: bwd_ring_kernels of the dtypes (false takes the
/// two-pass path). `ring_elem_bytes`: bytes per column staged through
/// the ring (dy + x, plus ds when it is staged there).
RmsNormBwdPlan plan_rms_norm_backward(int64_t n, int vec, bool uniform_phase, bool ring_kernels,
                                      int ring_elem_bytes, bool has_weight);

/// Vectors per thread at which the kernels are built to read ds directly (ds_direct).
constexpr bool bwd_ds_direct_vpt(int vpt) { return vpt == 4; }

/// Most threads of a block that reads ds directly: its instance takes 128 registers, so two such
/// blocks (the point of leaving ds out of the ring) fit an SM up to here.
constexpr int kBwdDsDirectMaxThreads = 256;

/// The plan of a call that gives ds (`ds_elem_bytes` per column; 0 without ds): that of
/// plan_rms_norm_backward with ds in the ring (`ring_elem_bytes` of dy + x, plus ds). Where the
/// measured case holds it is the same split with ds read from global memory instead
/// (ds_direct; the same values, so dx keeps its bits): dx alone written (no dresidual), 16-bit
/// dy, s and ds, a weight, rows without edge elements at a uniform phase, the ring with ds past
/// kBwdSmemBudget and without it within, the block path at 4 vectors per thread
/// (bwd_ds_direct_vpt) and at most kBwdDsDirectMaxThreads threads: 16-bit rows of 6152 ... 8192
/// columns (multiples of 8). At N = 8192 that is 133 KB (one block per SM) against 100 KB (two):
/// M = 32768 644.62 -> 601.71 us; with dresidual written too it was slower (681.71 -> 717.66).
RmsNormBwdPlan plan_rms_norm_backward_ds(int64_t n, int vec, bool uniform_phase, bool ring_kernels,
                                         int ring_elem_bytes, int ds_elem_bytes,
                                         bool writes_dresidual, bool has_weight);

/// Dynamic shared memory of one ring-path block of plan p (its path, vec, vpt, threads,
/// rows_per_block and stages): scratch, weight slots or partials table, rstd slots and the ring
/// (`ring_elem_bytes` per column and stage: dy + x, plus ds when it is staged there).
int64_t bwd_smem_bytes(const RmsNormBwdPlan& p, int ring_elem_bytes, bool has_weight);

/// Blocks per SM (= partial rows per SM) the grid may use for rows of width n.
int bwd_max_blocks_per_sm(int64_t n, RmsNormBwdPath path);

/// Most partial rows any plan launches for `rows` rows of width n on a device of `sm_count` SMs.
int64_t bwd_max_parts(int64_t rows, int64_t n, int sm_count);

/// Workspace bytes: bwd_max_parts * n fp32 values (0 when rows or n is 0).
size_t bwd_workspace_bytes(int64_t rows, int64_t n, int sm_count);

/// Grid (= partial rows) of a launch: one block per row (per rows_per_block rows on the warp
/// path), at most min(resident_per_sm, bwd_max_blocks_per_sm) blocks per SM. Never more than
/// bwd_max_parts(rows, n, sm_count).
int64_t bwd_grid(int64_t rows, int64_t n, const RmsNormBwdPlan& plan, int resident_per_sm,
                 int sm_count);

/// What the plain ring kernels fix about a call.
struct BwdPlainFacts {
  bool rstd_saved = false;   ///< the forward's rstd given (not recomputed)
  bool weight = false;       ///< a weight given
  bool dw = false;           ///< dw wanted (partials written)
  bool ds = false;           ///< the fused add's ds given
  bool dresidual = false;    ///< the fused add's dresidual written
  bool dx_as_input = false;  ///< dx in the input's dtype
  bool dy_as_input = false;  ///< dy in the input's dtype
};

/// The call takes a plain ring kernel (the same bits as the general one, its run-time switches
/// fixed): a ring path with register partials (uniform phase), the rstd saved, a weight, dw
/// wanted, no ds and no dresidual, dx and dy in the input's dtype.
bool bwd_plain_call(const RmsNormBwdPlan& p, const BwdPlainFacts& f);

/// The plan a plain call (bwd_plain_call) runs, for dy and x of elem_bytes bytes each: p at
/// kBwdPlainDeepStages stages when the rows are 16-bit, p is the block path at kBwdPlainDeepVpt
/// vectors per thread and kBwdPlainDeepMinBlocks blocks of the deeper ring fit in smem_per_sm
/// bytes of shared memory (each block charged its dynamic shared memory plus smem_reserved
/// bytes); else p. A row's split (and so its dx) is p's either way; the grid, and so the
/// grouping of dw's partial rows, follows the blocks that fit.
RmsNormBwdPlan bwd_plain_plan(const RmsNormBwdPlan& p, int elem_bytes, int64_t smem_per_sm,
                              int64_t smem_reserved);

/// What decides whether a call's rows can take the lean backward kernel (bwd_lean_call).
struct BwdLeanFacts {
  /// x (s) with dy, ds, dx and dresidual in core::lean_row_layout: n a multiple of a 16-byte
  /// vector width, rows of at most one leading dimension, each row 16-byte aligned.
  bool rows = false;
  bool same_dtype = false;      ///< dy, dx, dresidual (when written) and the weight in x's dtype
  bool weight_aligned = false;  ///< a weight given, 16-byte aligned
  bool dw = false;              ///< dw wanted
};

/// Largest block of the lean kernel (its launch bound, so up to 255 registers a thread: a thread
/// holds its dy, x, ds, weight and partials, 168 registers plain and 205 general for bf16 at 4
/// vectors per thread). The block path's splits of aligned rows stay within 256 threads up to
/// 8192 columns (16-bit or f32); wider rows are not lean.
constexpr int kBwdLeanMaxThreads = 256;

/// Rows per SM up to which lean rows take the lean kernel. H200, bf16, the call with its column
/// sum, cold L2 (bench/experiments/rms_norm_backward_lean.cu, rms-bwd-lean-nvidia-h200.log; dx,
/// dresidual and dw bit for bit the ring kernel's), N = 2048, 4096 and 8192, the plain call and
/// the fused add with and without dresidual: up to 528 rows the lean kernel was faster in 61 of
/// 63 cases (plain N = 4096: M = 1 10.24 -> 8.00 us, under graph replay 5.52 -> 3.69; M = 528
/// 15.36 -> 14.37; the fused add with dx alone, N = 4096, M = 32: 12.70 -> 8.90), as fast in one
/// (plain N = 2048, M = 132) and slower in one (plain N = 8192, M = 396: 18.59 -> 19.07). Past
/// it, at 4096 and 8192 columns, the ring kernel won 12 of 18 cases (plain N = 8192 M = 4096:
/// 58.85 against 79.68; the lean kernel's 168-205 registers at 4 vectors per thread,
/// bench/results/lean-bwd-registers-sm90.log, fit fewer blocks per SM than the ring's
/// 96-128), the lean kernel 6 (the plain call at N = 4096 up to 4096 rows, the fused add at
/// N = 8192 at 1024 rows, with dx alone also at 2048); at N = 2048 the lean kernel still won at
/// 4096 rows. One bound for every width and form (not a rule per width).
constexpr int kBwdLeanMaxRowsPerSm = 4;

/// Whether the call takes the lean kernel: plan p (from plan_rms_norm_backward_ds) is the block
/// path with register partials on at most kBwdLeanMaxThreads threads, the facts all hold, and there
/// are at most kBwdLeanMaxRowsPerSm rows per SM. Depends on the layout and the row count; the split
/// is p's either way.
bool bwd_lean_call(const RmsNormBwdPlan& p, const BwdLeanFacts& f, int64_t rows, int sm_count);

}  // namespace ropenorm::core
