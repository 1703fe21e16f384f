// Launch planning for the RMSNorm kernels: vector width and path, decided on the host from the
// row width, the pointers and the strides; on the block path also the split of a row over
// threads (threads x vectors per thread), chosen by the row count per multiprocessor. The
// path and the reduction order never depend on the row count: the block path reduces in a
// split-invariant order (chunk_sum), so a row's bits are the same whatever M (batch
// invariance) and whichever split the plan picks.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/row_layout.h"
#include "ropenorm/tensor.h"

namespace ropenorm::core {

enum class RmsNormPath : int {
  kWarpPerRow = 0,   ///< one warp per row, several rows per block, shuffle-only reduction
  kBlockPerRow = 1,  ///< one block per row, loaded straight into registers, block reduction
  kTwoPass = 2,      ///< rows too wide for registers: sum pass, then re-read and scale
  kBlockRing = 3,    ///< one block per row, rows streamed through a shared-memory ring (fused add)
};

const char* rms_norm_path_name(RmsNormPath path);

/// Vector and scalar access widths the kernels are built for.
constexpr int kScalarWidth = 1;

/// Widest vector the kernels use for an element of `elem_size` bytes: 16 bytes' worth.
constexpr int max_vector_width(int elem_size) { return 16 / elem_size; }

/// One tensor's alignment facts: base pointer, element size and its row layout.
struct AccessFacts {
  const void* data = nullptr;
  int elem_size = 0;
  RowLayout rows;
};

/// Width V (in elements) of the vector accesses: max_vector_width(x's element size), with each
/// row split at run time into p leading scalars, aligned vectors and a scalar tail (so any row
/// width), or the scalar width 1. V needs every other tensor's vectors to be aligned wherever
/// x's are: each row of the tensor starts at an element index congruent to that of x's row
/// modulo q = min(V, 16 / its element size) (bases congruent, and strides congruent per
/// dimension or all multiples of q elements), whatever the element sizes (its V-element vectors
/// then start at multiples of q elements: min(16, V * element size) bytes). The weight is not a
/// constraint (staged in shared memory or read as scalars).
int rms_norm_vector_width(const AccessFacts& x, std::initializer_list<AccessFacts> others);

/// The row layout the lean kernels (forward and backward) take at vector width vec: vec > 1 moves
/// 16 bytes of x's elements and divides n, and x and every tensor in `others` hold elements of x's
/// size in rows of at most one leading dimension (after collapsing), each row 16-byte aligned
/// (base aligned, row stride a multiple of vec elements).
bool lean_row_layout(const AccessFacts& x, int64_t n, int vec,
                     std::initializer_list<AccessFacts> others);

/// What decides whether rows can take the lean direct kernel (rms_norm_lean_rows).
struct LeanRowFacts {
  AccessFacts x;
  AccessFacts y;
  AccessFacts r;                 ///< fused: the residual
  AccessFacts ro;                ///< fused: residual_out (s)
  const void* weight = nullptr;  ///< null: no weight
  bool same_dtype = false;       ///< y, the weight (present) and, fused, r and ro in x's dtype
  bool exact = false;            ///< Rounding::kExact
  bool fused = false;            ///< with a residual
  int64_t n = 0;                 ///< row width
};

/// Whether the rows need none of the direct kernel's generality, so that its lean form serves
/// them with the same bits: a weight, exact rounding, y and the weight (and, for the fused add,
/// the residual and residual_out) in x's dtype, x and y (and r and ro) in lean_row_layout, the
/// weight 16-byte aligned. Depends on the tensors' layout, never on the row count.
bool rms_norm_lean_rows(const LeanRowFacts& f, int vec);

/// Whether the rows have no edge elements: vec > 1 divides n and every row of x starts on a
/// 16-byte boundary (so do the other tensors' rows, at x's element phase by
/// rms_norm_vector_width). Depends on the layout, never on the row count.
bool rms_norm_aligned_rows(const AccessFacts& x, int64_t n, int vec);

struct RmsNormPlan {
  RmsNormPath path = RmsNormPath::kBlockPerRow;
  int vec = 1;                  ///< elements per vector access
  int vpt = 1;                  ///< vectors per thread (register-resident paths)
  int threads = 32;             ///< threads per row (32 for kWarpPerRow)
  int rows_per_block = 1;       ///< kWarpPerRow: warps (rows in flight) per block
  int stages = 4;               ///< shared-memory ring depth (ring paths; 0 otherwise)
  bool weight_in_smem = false;  ///< (w + o) staged in shared memory as fp32 (ring paths)
  int64_t smem_bytes = 0;       ///< dynamic shared memory per block
  bool lean = false;            ///< kBlockPerRow: the lean direct kernel (rms_norm_lean_rows)
  bool early_weight = false;    ///< lean: the weight loaded with x, before the reduction
};

/// Largest number of vectors per thread the register-resident kernels are built for.
constexpr int kMaxVpt = 8;
/// Largest fp32 values per thread kept in registers (vec * vpt).
constexpr int kMaxRegElems = 32;
/// Warp path serves rows of at most this many vectors (4 per lane).
constexpr int kWarpMaxVectors = 128;
/// Largest block of the register-resident path (its launch bound: up to 128 registers/thread).
constexpr int kRowsMaxThreads = 512;
/// Fewest threads the register-resident path narrows a row to when raising vectors per thread.
constexpr int kRowsMinThreads = 128;
/// Vectors per thread the register-resident path aims for without a residual (half with one).
constexpr int kRowsAimVpt = 4;
/// Block path: at most this many rows per multiprocessor take the widest split (fewest vectors
/// per thread, up to kRowsMaxThreads threads): one block per SM pulls its row fastest.
constexpr int64_t kFewRowsPerSm = 1;
/// Block path: at most this many rows per multiprocessor take the middle split (at most
/// kMidThreads threads per row, and no fewer vectors per thread than the widest split); more
/// take the many-rows split (kRowsAimVpt vectors per thread).
constexpr int64_t kMidRowsPerSm = 8;
/// Threads per row of the middle split.
constexpr int kMidThreads = 256;
/// Rows the lean direct kernel serves take the widest split up to kLeanFewRowsPerSm rows per
/// multiprocessor when it has one vector per thread (kFewRowsPerSm otherwise) and the middle one
/// up to kLeanMidRowsPerSm, and the lean kernel runs at most kLeanMaxVpt vectors per thread.
/// Up to kLeanEarlyRowsPerSm rows per multiprocessor they take the many-rows split on the lean
/// kernel's early-weight form instead (the weight's loads issued with x's, before the
/// reduction: one dependent memory round trip less per row, 4 more registers per vector, so
/// fewer blocks per multiprocessor, which few rows do not need).
/// H200, bf16, graph replay below 4096 rows, cold L2 from 4096 (log
/// bench/results/rms-decode-108a33b-nvidia-h200.log, docs/performance.md): N = 4096, M = 1:
/// early 128 x 4 1.51 us against lean 512 x 1 1.63; M = 132: 1.89 against 2.03; M = 512: lean
/// 512 x 1 3.06, early 3.11-3.16; M = 4096: lean 256 x 2 20.00, 128 x 4 19.36. N = 8192,
/// M = 1: early 256 x 4 1.72 against lean 512 x 2 2.14; M = 264: 3.15 against 3.63 (the direct
/// kernel 4.22); M = 512: lean 256 x 4 4.68 against early 4.94 and the direct kernel 5.11;
/// M = 32768: lean 256 x 4 256.4 against the direct kernel's 268.3 and early 327.1 (89
/// registers: 2 blocks of 256 per multiprocessor).
constexpr int64_t kLeanFewRowsPerSm = 4;
constexpr int64_t kLeanMidRowsPerSm = 32;
constexpr int64_t kLeanEarlyRowsPerSm = 2;
constexpr int kLeanMaxVpt = 4;
/// The fused add on lean rows takes the lean kernel at its widest split (one vector per thread up
/// to 512 threads, else two; 16-bit rows of up to 1024 vectors: one on kLeanFusedWideThreads,
/// below) at every row count, never the block ring, on the early-weight form up to
/// kLeanEarlyRowsPerSm rows per multiprocessor (not the wide instance); rows that need more
/// keep the direct kernel. H200, bf16, out of place (log
/// bench/results/rms-fused-lean-87f1391-nvidia-h200.log, docs/performance.md), the lean kernel
/// against the plan before it: N = 4096 at 512 x 1, M = 1 1.72 us (early) against 2.41, M =
/// 512 3.66 against 4.74, M = 4096 34.05 against 36.93, M = 32768 258.98 against 292.06 (128 x 4:
/// 318.14, 256 x 2: 266.62). f32 rows of 2 vectors per thread (N = 2052 ... 4096) on the lean
/// kernel (31 registers: 4 to 6 blocks per multiprocessor) against the block ring
/// (bench/results/rms-fused-occupancy-wide-nvidia-h200.log): N = 4096, M = 4096 65.98 us against
/// 73.63, M = 32768 518.30 against 576.96; N = 2560, M = 32768 320.67 against 353.54.
constexpr int kLeanFusedMaxVpt = 2;
/// The fused add on lean rows of 16-bit elements (kLeanFusedWideElem bytes) wider than
/// kRowsMaxThreads vectors, up to kLeanFusedWideThreads, takes one vector per thread on the lean
/// kernel's wide instance (blocks of up to kLeanFusedWideThreads threads, registers bounded by
/// kLeanFusedWideMinBlocks such blocks per multiprocessor: 32 a thread, so that 2048 threads
/// fit), at every row count and without the early weight. The same chunks, so the same bits.
/// H200, bf16, out of place (bench/results/rms-fused-occupancy-1c00802-nvidia-h200.log,
/// docs/performance.md), against the plan before it (512 x 2 on the lean kernel, 50 registers:
/// two rows per multiprocessor, the early weight up to kLeanEarlyRowsPerSm rows per
/// multiprocessor; the block ring from kMidRowsPerSm): N = 8192, M = 1 2.48 us against 2.53,
/// M = 512 7.26 against 7.59, M = 4096 67.55 against 74.43, M = 32768 511.74 against 561.38
/// (97.9% of copy); N = 5120, M = 32768 317.82 against 346.85; N = 7168, M = 32768 455.62
/// against 486.30.
constexpr int kLeanFusedWideThreads = 1024;
constexpr int kLeanFusedWideMinBlocks = 2;
constexpr int kLeanFusedWideElem = 2;
/// Threads per row the block ring aims for (vectors per thread grow until the row fits them).
constexpr int kRingThreads = 256;
/// Ring depth of the block ring (H200, bf16 fused add, M = 32768: 2 stages, two blocks per SM,
/// ran N = 8192 in 562.9 us, 4 stages, one block per SM, 596.5; 2 was ahead at every N from
/// 2048 to 8192 and M from 2048 on; docs/performance.md).
constexpr int kBlockRingStages = 2;
/// Floats of reduction scratch at the start of a ring block's shared memory.
constexpr int kRingScratchFloats = 32;
/// Most vectors (threads x vectors per thread) a block-ring row may span: its reduction scratch
/// holds kRingScratchFloats partials of 32 chunks each (chunk_sum).
constexpr int kRingMaxVectors = 32 * kRingScratchFloats;
/// Row count that selects the many-rows split on any device (the planner's default).
constexpr int64_t kManyRows = int64_t{1} << 62;
/// Threads per row on the two-pass path.
constexpr int kTwoPassThreads = 512;
/// Dynamic shared memory a rows-path block may use (of the 227 KiB an sm_90 block can have).
constexpr int64_t kSmemBudget = 200 * 1024;

/// Bytes of the shared-memory ring for one warp (warp path) or block: `stages` rows of vpt
/// vectors of v elements per thread, x (x_elem bytes) and residual (r_elem bytes, 0 if none).
#if defined(__CUDACC__)
__host__ __device__
#endif
    constexpr int64_t
    ring_bytes(int v, int vpt, int stages, int threads, int x_elem, int r_elem) {
  return static_cast<int64_t>(stages) * vpt * threads * v * (x_elem + r_elem);
}

/// Dynamic shared memory of a ring block (both ring paths): the reduction scratch, the weight
/// factors of n columns as fp32 (rounded up to 16 bytes) when staged (w_smem), then `slices`
/// rings (ring_bytes).
constexpr int64_t ring_smem_bytes(int64_t n, bool w_smem, int64_t slices, int v, int vpt,
                                  int stages, int threads, int x_elem, int r_elem) {
  return int64_t{kRingScratchFloats} * 4 + (w_smem ? (n + 3) / 4 * 4 * 4 : 0) +
         slices * ring_bytes(v, vpt, stages, threads, x_elem, r_elem);
}

/// Plan for `rows` rows of width n at vector width vec (from rms_norm_vector_width), x elements
/// of x_elem bytes, a residual of r_elem bytes (0: plain op), with or without a weight, on a
/// device of sm_count multiprocessors. The path, vector width and staging depend on n and the
/// dtypes only; on the block path the split depends on rows / sm_count too (kFewRowsPerSm,
/// kMidRowsPerSm), which leaves the results unchanged (split-invariant reduction). lean_rows
/// (rms_norm_lean_rows) lets the block path take the lean direct kernel (kLeanFewRowsPerSm,
/// kLeanMidRowsPerSm, kLeanMaxVpt; the fused add: kLeanFusedMaxVpt, kLeanFusedWideThreads),
/// again with the same results. aligned_rows
/// (rms_norm_aligned_rows) lets the fused add's many-rows plan (more than kMidRowsPerSm rows per
/// multiprocessor) on rows the lean kernel does not take take the block ring: about kRingThreads
/// threads, at most kRingMaxVectors vectors, kBlockRingStages stages and the weight staged when it
/// fits kSmemBudget; the same row routine and reduction as the direct kernel, so again the same
/// results (H200, bf16, M = 32768: the ring ran the fused add at N = 4096 / 5120 / 7168 / 8192 in
/// 292.4 / 347.9 / 489.8 / 562.9 us, the direct kernel in 312.8 / 384.9 / 552.1 / 658.2;
/// docs/performance.md).
RmsNormPlan plan_rms_norm(int64_t n, int vec, int x_elem = 2, int r_elem = 0,
                          bool has_weight = true, int64_t rows = kManyRows, int sm_count = 1,
                          bool lean_rows = false, bool aligned_rows = false);

}  // namespace ropenorm::core
