// Launch planning for the fused QK-norm + RoPE forward: which of its three kernels runs and with
// what shape, decided on the host from the head geometry and the alignment facts. Every kernel
// gives the same bits (same per-lane sums in a fixed order, same butterfly, same formulas), so
// the choice changes speed only.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"

namespace ropenorm::core {

/// Channels per lane of the vector and pair kernels (one 16-byte access of a 16-bit type).
constexpr int kQkVecChannels = 8;
/// Threads per block of the vector kernel at most.
constexpr int kQkVecThreads = 256;
/// Heads a lane group of the vector kernel loads before it computes any of them.
constexpr int kQkVecHeadsPerGroup = 1;
/// Threads per block of the scalar (generic) kernel at most.
constexpr int kQkScalarMaxThreads = 256;
/// Largest grid launched (the kernels loop over the remaining tokens).
constexpr int64_t kQkMaxGrid = int64_t{1} << 30;

/// What the planner needs to know about a validated call.
struct QkNormRopeFacts {
  /// The call's shape as the RoPE rules see it (cuda::rope_lean_facts): element size, the widest
  /// vector every q/k/out/cos-sin operand allows (vec), cos/sin loaded, T, S, Hq + Hk, h = R / 2
  /// and D.
  RopeLeanFacts rope;
  bool weights_aligned16 = false;  ///< wq and wk both 16-byte aligned
  bool allow_lean = true;          ///< false: never the lean kernel (tests comparing it with pair)
  int sm_count = 0;                ///< multiprocessors of the device (<= 0: unknown)
};

/// Most tokens a lean QK-norm + RoPE launch whose block rope_lean_long_run_block accepts
/// serves: every run (H200, bf16, D 128, 32 + 8 heads, bench/experiments/decode.cu at 74a932b:
/// 470.7 us against the pair kernel's 573.3 at T = 65536, 121.4 against 147.4 at 16384, 12.64
/// against 13.22 at 1024), within rope_lean's grid limits. Larger blocks: kRopeLeanMaxTokens.
constexpr int64_t kQkLeanMaxTokens = INT64_MAX;

/// Fewest tokens the lean-run kernel serves (H200, bf16, D 128, 32 + 8 heads, f32 cache,
/// random int64 positions, bench/experiments/qk_forward_persistent.cu: at 3653989 28.90 us
/// against the lean kernel's 32.29 at T = 4096, 106.2 against 118.5 at 16384, 405.1 against
/// 466.8 at 65536; with the ring and interleaved tokens at 94bfa0d 16.48 against 17.79 at
/// T = 2048 (gptj 17.38 against 19.23), but 11.36 against 11.20 at 1024; with the flat walk and
/// the ring's slots at immediate offsets, at 87cc491, 10.56 against the lean kernel's 11.33 at
/// 1024 and 13.25 against 14.85 at 1536; gptj, measured with the general walk only, 11.52
/// against 11.65 and 14.69 against 15.84).
constexpr int64_t kQkLeanRunMinTokens = 1024;
/// Threads per block of the lean-run kernel at most: its launch bound, with
/// kQkLeanRunMinBlocks resident blocks per multiprocessor (96 registers; 3 blocks and 64
/// registers spilled and measured slower). Smaller blocks run as many per multiprocessor as
/// fill the same threads.
constexpr int kQkLeanRunThreads = 320;
constexpr int kQkLeanRunMinBlocks = 2;
/// The lean-run grid when the multiprocessor count is unknown.
constexpr int64_t kQkLeanRunMaxGrid = 4096;

enum class QkKernel {
  kLeanRun,  ///< the lean layout over a persistent grid, its tokens interleaved over the blocks
  kLean,     ///< the lean RoPE launch (a token's heads in one block or split, a head per row)
  kPair,     ///< the RoPE kernel's layout plus the norm (16-bit, 16-byte accesses, R = D)
  kVector,   ///< 8 contiguous channels per lane, the NeoX partner by shuffle (16-bit)
  kScalar,   ///< any even D and alignment: a pair per lane slot, scalar accesses
};

/// Kernel and launch shape.
struct QkNormRopePlan {
  QkKernel kernel = QkKernel::kScalar;
  RopePlan rope;             ///< kLeanRun / kLean / kPair: block, grid, single-round, ring
  int group = 1;             ///< kVector / kScalar: lanes per head vector (a power of two <= 32)
  int groups_per_token = 1;  ///< kVector: lane groups serving one token
  int slots_per_lane = 1;    ///< kScalar: KS in {1, 2, 4, 8}
  int threads = 32;          ///< kVector / kScalar: threads per block
  int64_t grid = 1;          ///< kVector / kScalar: blocks (each loops over its tokens)
};

/// The first kernel that applies, in the order lean run, lean, pair, vector, scalar:
///  - lean run (when allow_lean): what lean needs but its grid bounds, at least
///    kQkLeanRunMinTokens tokens and 8 or 16 lanes per head (D 128 or 256: lean_run_shape); shape
///    from plan_rope_lean_run with blocks of at most kQkLeanRunThreads threads, kQkLeanRunMinBlocks
///    of them per multiprocessor (kQkLeanRunMaxGrid blocks when sm_count is unknown);
///  - lean (when allow_lean): what pair needs, cos/sin loaded and rope_lean's thread and grid
///    bounds with kQkLeanMaxTokens for blocks rope_lean_long_run_block accepts, else with
///    kRopeLeanMaxTokens (the norm's butterfly runs over the h / 8 lanes of a thread row);
///    shape from plan_rope_lean;
///  - pair: 16-bit q/k, access width 8, R = D, h / 8 a power of two <= 32, both weights 16-byte
///    aligned; shape from plan_rope(T, heads, h, 8);
///  - vector: 16-bit q/k, access width 8, D / 8 a power of two <= 32; groups of
///    kQkVecHeadsPerGroup heads, enough for all of a token's heads (at most a block), as many
///    tokens per block as fit in kQkVecThreads;
///  - scalar: group = the smallest power of two >= D / 2 (at most 32), KS = ceil(D / 2 / group)
///    rounded up to 1, 2, 4, 8, enough warps for the token's heads (at most kQkScalarMaxThreads).
QkNormRopePlan plan_qk_norm_rope(const QkNormRopeFacts& f);

/// Most tokens of a lean launch the decode instances serve (decode.cu at 512a762, H200, bf16,
/// D 128, 32 + 8 heads, graph replay up to 256 tokens: 1.57 / 1.68 / 2.28 / 10.94 us at T = 1 /
/// 64 / 256 / 1024 against 1.76 / 1.90 / 2.59 / 11.23 for the lanes-and-weights instance, but
/// 33.57 against 31.58 at 4096).
constexpr int64_t kQkLeanDecodeTokens = 1024;
/// Threads per block of the decode instances at most: their launch bound (80 registers, no
/// spills, against 64 and spills under the general bound of 1024).
constexpr int64_t kQkLeanDecodeThreads = 512;

/// Instances of the lean kernel: the facts each fixes at compile time
/// (cuda/rope/rope_lean_spec.h); every instance gives the same bits.
enum class QkLeanInstance {
  kAny,           ///< every fact read at run time
  kLanesWeights,  ///< 8 or 16 lanes per head (D 128 or 256), both weights in q/k's dtype
  kDecodeI64,     ///< 8 lanes, weights in q/k's dtype, int64 positions, cos/sin rows
  kDecodeI32,     ///< the same with int32 positions
};

/// What qk_lean_instance decides from, for a call the lean kernel serves.
struct QkLeanInstanceFacts {
  int64_t tokens = 0;
  int64_t lanes = 0;               ///< h / 8 (the lean block's x)
  int64_t threads = 0;             ///< the lean block's threads
  bool weights_as_data = false;    ///< wq and wk in q/k's dtype
  bool cos_sin_rows = false;       ///< cos/sin rows indexed by position (cache or [P, R] table)
  int explicit_position_bits = 0;  ///< 64 / 32: explicit positions of that width; 0: implicit
};

/// The instance for the call: kDecodeI64 / kDecodeI32 for 8 lanes, weights in the data dtype,
/// cos/sin rows, explicit positions, T <= kQkLeanDecodeTokens and at most kQkLeanDecodeThreads
/// threads; else kLanesWeights for 8 or 16 lanes and weights in the data dtype; else kAny.
QkLeanInstance qk_lean_instance(const QkLeanInstanceFacts& f);

/// Instances of the lean-run kernel (cuda/rope/rope_lean_spec.h); all give the same bits.
enum class QkLeanRunInstance {
  kLanes,         ///< 8 or 16 lanes per head; positions and the cos/sin source at run time
  kLanesRowsI64,  ///< also int64 explicit positions and cos/sin rows by position fixed
  kFlatI64,       ///< also flat tokens (rope_flat_tokens) and full warps (lean_run_full_warps)
  kFlatTokens,    ///< cos/sin gathered per token, flat tokens (theirs too) and full warps
};

/// kFlatI64 for cos/sin rows by position (a cache or a [P, R] table) with int64 explicit
/// positions (explicit_position_bits 64), flat tokens and full warps; kLanesRowsI64 for those
/// rows and positions otherwise; kFlatTokens for cos/sin not indexed by position (in a lean run
/// only tables gathered per token: the lean shape needs loaded cos/sin) with flat tokens and full
/// warps; else kLanes.
QkLeanRunInstance qk_lean_run_instance(bool cos_sin_rows, int explicit_position_bits, bool flat,
                                       bool full_warps);

}  // namespace ropenorm::core
