// Launch planning for the RoPE kernel: vector width and block shape, decided on the host from the
// head geometry, the pointers and the strides.
//
// A thread owns V consecutive pairs (pair indices i0 .. i0 + V - 1, i0 a multiple of V) of one
// token and loads their cos/sin once; it then rotates those pairs in every head it owns. For
// neox the pairs' a and b halves are two V-element vectors at channels i0 and h + i0; for gptj
// the 2V channels 2 * i0 .. 2 * i0 + 2V - 1 are two V-element vectors holding the V pairs
// interleaved. Both need h % V == 0 and every vector aligned.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace ropenorm::core {

/// One strided operand's alignment facts: base pointer, element size, and the strides (in
/// elements) of the dims addressed in steps of whole vectors (token, batch, head, table row).
struct RopeAccess {
  const void* data;  ///< nullptr: not used
  int elem_size;
  std::initializer_list<int64_t> strides;
};

/// Widest V (elements per vector access of the q/k dtype, elem_size bytes) in
/// {16 / elem_size, ..., 2} with h % V == 0 and D % V == 0 such that every used operand's base
/// is aligned to min(16, V * its elem_size) bytes and all its listed strides are multiples of V;
/// otherwise the scalar width 1. (The cos/sin tables are read V values at a time too.)
int rope_vector_width(int64_t half, int64_t head_dim, int elem_size,
                      std::initializer_list<RopeAccess> operands);

/// Block of (bx, by, bz) threads: bx over the h / V pair vectors of a head (looping when there
/// are more), by over the heads of q and k in groups of kRopeHeadsPerThread, bz over tokens.
/// Grid (grid, head_groups): x over token groups (looping when there are more), y over groups
/// of by * kRopeHeadsPerThread heads, so that every head has its thread whatever the head count.
struct RopePlan {
  int vec = 1;
  int bx = 1, by = 1, bz = 1;
  int64_t grid = 1;
  int head_groups = 1;
  /// Every thread has one token, one pair vector and one round of heads (the kernel compiles
  /// no loops): grid * bz >= T, bx >= h / V and head_groups * by * kRopeHeadsPerThread >=
  /// Hq + Hk.
  bool single = false;
  /// A single-round plan for at least kRopeLongRunTokens tokens: the RoPE launcher runs the
  /// single-round kernel at the register budget of kRopeLongRunMinBlocks blocks per
  /// multiprocessor (more warps in flight). The QK-norm + RoPE kernels do not use it.
  bool long_run = false;
  /// The lean short-run kernel (rope_lean / plan_rope_lean): a token's heads in head_split
  /// blocks of by rows, thread (x, y) of block z owning pair vector x of head z by + y, no
  /// loops, no pass-through channels. Its grid is (S, B, head_split), so for a lean plan
  /// grid = S (tokens of a sequence), head_groups = B (sequences, not head groups), by the
  /// head rows of a block (one head per thread row, not kRopeHeadsPerThread) and bz = 1.
  bool lean = false;
  /// Grid z of a lean plan (the blocks a token's heads are split over; 1 for every other plan).
  int head_split = 1;
  /// The lean run (plan_rope_lean_run; cuda/rope/rope_lean_run.cuh): the lean layout, block
  /// (h / kRopeLeanVec, by head rows), over a persistent grid of `grid` blocks per head group
  /// (head_groups groups of by rows), block bx taking tokens bx, bx + grid, ...; smem_bytes of
  /// dynamic shared memory for the threads' rings.
  bool lean_run = false;
  int64_t smem_bytes = 0;
};

/// Threads per block the planner aims for.
constexpr int kRopeBlockThreads = 256;
/// Heads a thread loads before it rotates any of them (its loads in flight at once).
constexpr int kRopeHeadsPerThread = 2;
/// Blocks per multiprocessor the RoPE kernel's register budget is set for.
constexpr int kRopeMinBlocks = 3;
/// Fewest tokens of a long run (H200, bf16 D 128, 32 + 8 heads, single-round kernel at 64
/// registers against 80: 25% slower at T = 1024, 11% faster at T = 16384, 12% at T = 65536).
constexpr int64_t kRopeLongRunTokens = 4096;
/// Blocks per multiprocessor the single-round kernel's register budget is set for on long runs.
constexpr int kRopeLongRunMinBlocks = 4;
/// Largest grid launched (the kernel loops over the remaining token groups).
constexpr int64_t kRopeMaxGrid = int64_t{1} << 30;
/// Most head groups (grid y) launched: CUDA's limit on gridDim.y.
constexpr int64_t kRopeMaxHeadGroups = 65535;

/// Plan for T tokens with `heads` = Hq + Hk heads, rotary half h and vector width vec.
RopePlan plan_rope(int64_t tokens, int64_t heads, int64_t half, int vec);

/// Most tokens a lean RoPE launch serves (decode steps and short runs; decode.cu at 74a932b:
/// the general kernel is faster at T = 1024).
constexpr int64_t kRopeLeanMaxTokens = 64;
/// Pairs per thread of the lean kernel: one 16-byte vector of a 16-bit q/k per half.
constexpr int kRopeLeanVec = 8;
/// Threads per lean block at most: h / kRopeLeanVec pair vectors times Hq + Hk heads.
constexpr int kRopeLeanMaxThreads = 1024;

/// What the lean rule needs to know about a validated call.
struct RopeLeanFacts {
  int elem_size = 2;            ///< bytes per q/k element
  int cs_elem_size = 4;         ///< bytes per cos/sin table element (when loaded)
  int vec = 1;                  ///< rope_vector_width of the call's operands
  bool cos_sin_loaded = false;  ///< cos/sin read from a table (cache, HF table or gathered)
  bool cos_sin_rows = false;    ///< cos/sin rows indexed by position (cache or HF [P, R] table)
  int64_t tokens = 0;
  int64_t seq = 0;    ///< S, tokens per sequence (T for a 3-D q); 0: one sequence
  int64_t heads = 0;  ///< Hq + Hk
  int64_t half = 0;   ///< h = R / 2
  int64_t head_dim = 0;
};

/// v is a power of two in [1, 32] (a lane group's width).
inline bool power_of_two_upto_32(int64_t v) { return v >= 1 && v <= 32 && (v & (v - 1)) == 0; }

/// The call has the lean layout's shape: 16-bit q/k at vector width kRopeLeanVec, R = D (no
/// pass-through channels), h a multiple of kRopeLeanVec, cos/sin loaded (not computed from
/// inv_freq), T >= 1 and Hq + Hk >= 1. (No token, grid or thread bound: rope_lean's.)
bool rope_lean_shape(const RopeLeanFacts& f);

/// Most sequences S of a lean launch (its grid x): CUDA's limit on gridDim.x.
constexpr int64_t kRopeLeanMaxSeq = 2147483647;

/// The lean kernel serves the call: rope_lean_shape, T <= max_tokens, (h / kRopeLeanVec) *
/// (Hq + Hk) <= kRopeLeanMaxThreads, S <= kRopeLeanMaxSeq and B = T / S <= kRopeMaxHeadGroups
/// (the grid (S, B)).
bool rope_lean(const RopeLeanFacts& f, int64_t max_tokens = kRopeLeanMaxTokens);

/// Threads per lean block up to which the lean RoPE and QK-norm + RoPE kernels serve long runs.
/// Under the 64-register budget of their general launch bound a multiprocessor holds 2 blocks of
/// 512 threads (3 of 320), but 1 of 640: QK-norm + RoPE at D 256 with 32 + 8 heads ran 1479.9 us
/// at T = 65536 (main job, 27aacad) against the pair kernel's 1192.1. RoPE's LeanRows instance
/// (decode.cu at 512a762, H200, bf16 D 128, 32 + 8 heads): 349.8 us against the general
/// kernel's 390.8 at T = 65536, 89.3 against 101.4 at 16384.
constexpr int64_t kRopeLeanLongRunThreads = 512;

/// The lean block of f, (h / kRopeLeanVec) * (Hq + Hk) threads, has at most
/// kRopeLeanLongRunThreads.
bool rope_lean_long_run_block(const RopeLeanFacts& f);

/// The token bound rope_lean takes for a RoPE call: unbounded (INT64_MAX) for a block
/// rope_lean_long_run_block accepts, else kRopeLeanMaxTokens. (Loaded cos/sin of either kind:
/// on Hugging Face's gathered tables the lean kernel ran 5.38-5.60 us at T = 256 against the
/// general kernel's 6.11-6.46, rope-gathered-806c9ed-nvidia-h100.log.)
int64_t rope_lean_max_tokens(const RopeLeanFacts& f);

/// Stages of a lean-run thread's cp.async ring (cuda/rope/rope_lean_run.cuh): token t + 1 in
/// flight while token t is computed (H200, bf16, D 128, 32 + 8 heads, f32 cache, QK-norm + RoPE,
/// bench/experiments/qk_forward_persistent.cu: 367.5 us at T = 65536 with 2 stages, 375.0 with 3,
/// against 410.7 for the same kernel loading into registers).
constexpr int kRopeLeanRunStages = 2;

/// Threads whose ring slots the lean run lays out together (cuda/common/thread_ring.cuh): a
/// block's ring holds whole groups of them.
constexpr int64_t kRopeLeanRunRingGroup = 8;

/// Dynamic shared memory of a lean-run block of `threads` threads (rounded up to whole groups of
/// kRopeLeanRunRingGroup): kRopeLeanRunStages stages of each thread's two kRopeLeanVec-vectors of
/// q/k (elem_size bytes each) and of its cos and sin vectors (cs_elem_size bytes each).
constexpr int64_t rope_lean_run_ring_bytes(int elem_size, int cs_elem_size, int64_t threads) {
  const int64_t slots =
      (threads + kRopeLeanRunRingGroup - 1) / kRopeLeanRunRingGroup * kRopeLeanRunRingGroup;
  return int64_t{kRopeLeanRunStages} * slots * 2 * kRopeLeanVec * (elem_size + cs_elem_size);
}

/// Threads a split lean block aims at: (kRopeLeanSplitThreads / lanes) rows of lanes, at most 3
/// warps, one per scheduler of a multiprocessor with one idle, unless kRopeLeanSplitBlocksPerSm
/// allows fewer, larger blocks only (H200, bf16 D 128, 32 + 8 heads,
/// bench/experiments/lean_head_split.cu: T = 1 in graphs QK-norm + RoPE 1.63 us in one block of
/// 40 rows, 1.47 / 1.41 / 1.44 in blocks of 20 / 10 / 8; RoPE 1.45 -> 1.34 at 10).
constexpr int kRopeLeanSplitThreads = 96;
/// Blocks per multiprocessor up to which a lean launch splits its tokens' heads into blocks of
/// about kRopeLeanSplitThreads threads (the same run: T = 64 at 4 blocks of 10 rows per token, 2
/// per multiprocessor, QK 1.77 -> 1.69 us, RoPE 1.69 -> 1.63; at T = 256 blocks of 10 rows,
/// about 8 per multiprocessor, no faster (QK 2.59 against 2.53), blocks of 20, about 4 per
/// multiprocessor, 0.02-0.06 us faster: the floor that kRopeLeanSplitMinThreads sets takes
/// them).
constexpr int kRopeLeanSplitBlocksPerSm = 2;
/// Threads of a lean block up to which it stays whole, and, at any run length, the most a split
/// block has where one row of lanes fits: at 6 warps or fewer (1.5 per scheduler) the split did
/// not pay (main job at 434f5f2, RoPE D 64, 32 + 8 heads, blocks of 160 threads split in 2:
/// T = 1 1.29 us both ways, T = 64 1.52 against 1.41-1.44 whole in earlier runs and 1.48 whole
/// again at d6fc228), while a 320-thread block (D 128, 32 + 8 heads) split in 2 was as fast or
/// faster at every length from 128 to 65536 tokens but one, RoPE T = 512 (+0.04 us in one of two
/// passes) (bench/experiments/lean_head_split.cu, H200, at 2e780af: QK-norm + RoPE T = 1024
/// 11.30 / 11.55 us against 11.71 / 11.94 in two passes, 1536 14.62 / 14.78 against 15.23 /
/// 15.49; RoPE T = 1024 9.50 / 9.82 against 9.70 / 9.95, 65536 342.43 against 345.60; T = 512
/// RoPE 6.98 / 7.14 against 6.94 / 7.14).
constexpr int kRopeLeanSplitMinThreads = 192;

/// The lean launch of a call rope_lean accepts (so T >= 1 and h >= kRopeLeanVec), B = T / S
/// sequences of S tokens, on a device of sm_count multiprocessors: grid (S, B, head_split),
/// block (h / kRopeLeanVec, by, 1), vec kRopeLeanVec, single and lean set. The Hq + Hk heads go
/// in one block (head_split 1, by = Hq + Hk) if that block has at most kRopeLeanSplitMinThreads
/// threads (or sm_count <= 0); otherwise z = max(the fewest splits that keep a block within
/// kRopeLeanSplitMinThreads threads, min(the splits that keep a block within
/// kRopeLeanSplitThreads threads, kRopeLeanSplitBlocksPerSm x sm_count / T)), where a block
/// holds at least one row of lanes even when that row alone passes the bound (more than
/// kRopeLeanSplitMinThreads lanes: one head per block), by = ceil((Hq + Hk) / z) and
/// head_split = ceil((Hq + Hk) / by), so that no block is without a head.
RopePlan plan_rope_lean(const RopeLeanFacts& f, int sm_count);

/// The lean-run launch of a call rope_lean_shape accepts whose lanes (h / kRopeLeanVec) are a
/// power of two up to 32 (the kernels' row barriers; the rules take 8 or 16), with blocks of at
/// most max_threads threads and min_blocks of them per multiprocessor: plan_rope_lean's block x
/// (the lanes); the Hq + Hk heads split into the fewest head groups (head_groups) of `by` rows
/// that keep a block within max_threads; per multiprocessor as many blocks (counted in whole
/// warps) as fill min_blocks x max_threads threads; grid min(T, per_sm x sm_count / groups)
/// (unknown_grid / groups when sm_count <= 0; at least 1); smem_bytes the ring's
/// (rope_lean_run_ring_bytes). vec kRopeLeanVec, lean_run set (not lean).
RopePlan plan_rope_lean_run(const RopeLeanFacts& f, int max_threads, int min_blocks, int sm_count,
                            int64_t unknown_grid);

/// Fewest tokens of a RoPE lean run (H200, bf16, 32 + 8 heads, f32 cache, random int64
/// positions, bench/experiments/rope_lean_run.cu).
constexpr int64_t kRopeLeanRunMinTokens = 4096;
/// Fewest tokens of a RoPE lean run for a call whose lean block rope_lean_long_run_block rejects
/// (the lean kernel then serves at most kRopeLeanMaxTokens tokens, the general kernel the rest),
/// and for Hugging Face's tables gathered per token (H100, bf16 D 128, 32 + 8 heads, one
/// sequence, [1, S, R] broadcast over 4 and [4, S, R] per token, both styles,
/// rope-gathered-806c9ed-nvidia-h100.log: at T = 1024 the lean run 9.25-10.43 us against the lean
/// kernel's 10.27-10.50 in five of six cases, 0.13 us behind in the sixth; at 2048 14.46-15.20
/// against 15.42-15.90 in all six). For rows by position:
/// the same experiment at 87cc491, D 256 with 32 + 8 heads (16 lanes x 40 rows), 13.47 us
/// against the general kernel's 15.49 at T = 1024 and 23.17 against 29.25 at 2048. (Where the
/// lean kernel serves, it stays up to kRopeLeanRunMinTokens: the lean run gains little for D 128
/// neox, 9.50 against 9.82 at 1024 and 14.14 against 14.24 at 2048, and for gptj at 1024, 9.82
/// against 9.95, but loses for gptj at 2048, 15.39 against 14.98, and for D 64 at every length.)
constexpr int64_t kRopeLeanRunShortMinTokens = 1024;
/// Threads per RoPE lean-run block at most (its launch bound) and the blocks of that size a
/// multiprocessor is filled with (smaller blocks: as many as fill the same threads).
constexpr int kRopeLeanRunThreads = 320;
constexpr int kRopeLeanRunMinBlocks = 2;
/// The RoPE lean-run blocks, over all head groups, when the multiprocessor count is unknown
/// (sm_count <= 0; the launchers pass the device's, which is always known).
constexpr int64_t kRopeLeanRunMaxGrid = 4096;

/// What every lean run needs (the RoPE and the QK-norm + RoPE launchers'): rope_lean_shape, at
/// least min_tokens tokens and 8 or 16 lanes per head (D 128 or 256; any head count, in head
/// groups).
bool lean_run_shape(const RopeLeanFacts& f, int64_t min_tokens);

/// The RoPE launcher's lean run serves the call: lean_run_shape with kRopeLeanRunMinTokens
/// (kRopeLeanRunShortMinTokens for blocks rope_lean_long_run_block rejects and for tables
/// gathered per token), for any loaded cos/sin: rows indexed by position (a cache or a [P, R]
/// table) or Hugging Face's tables gathered per token (rope_lean_run_instance's kAny and
/// kTokensFlat).
bool rope_lean_run(const RopeLeanFacts& f);

/// One operand's token strides in elements (token (b, s) at b * sb + s * ss) and its element
/// size in bytes.
struct TokenStrides {
  int64_t sb = 0, ss = 0;
  int64_t elem_size = 1;
};
/// Most tokens and largest token stride in bytes of a flat walk: its token index and byte
/// strides are 32-bit (one wide multiply-add per address).
constexpr int64_t kFlatMaxTokens = (int64_t{1} << 31) - 1;
constexpr int64_t kFlatMaxStrideBytes = (int64_t{1} << 32) - 1;

/// Token t = b S + s of each of the `count` operands sits at t * ss (one sequence, B = 1, or
/// sb = S * ss), with T <= kFlatMaxTokens and 0 <= ss * elem_size <= kFlatMaxStrideBytes: a
/// lean run may then address every operand from t alone (cuda/rope/rope_lean_run.cuh).
bool flat_tokens(int64_t batch, int64_t seq, const TokenStrides* ops, int count);

/// Every warp of a lean-run block is full and no thread row exits (lanes x rows a multiple of
/// 32 and the head groups' rows exactly the heads), so a row's butterfly may name all 32 lanes.
bool lean_run_full_warps(const RopePlan& p, int64_t heads);

/// Instances of the RoPE lean-run kernel (cuda/rope/rope_lean_spec.h); all give the same bits.
enum class RopeLeanRunInstance {
  kRows,         ///< cos/sin rows by position; positions at run time
  kRowsFlatI64,  ///< also int64 explicit positions and flat tokens (rope_flat_tokens)
  kAny,          ///< the source at run time (Hugging Face's tables gathered per token)
  kTokensFlat,   ///< tables gathered per token, flat tokens (theirs too: rope_flat_tokens)
};

/// For cos/sin not indexed by position (the gathered tables: the only such source a lean run
/// takes, since rope_lean_shape needs loaded cos/sin) kTokensFlat with flat tokens, else kAny;
/// for rows by position kRowsFlatI64 with int64 explicit positions (explicit_position_bits 64)
/// and flat tokens, else kRows.
RopeLeanRunInstance rope_lean_run_instance(bool cos_sin_rows, int explicit_position_bits,
                                           bool flat);

/// The RoPE launcher's plan for a call (f.vec its vector width) on a device of sm_count
/// multiprocessors: when allow_lean, the lean run for calls rope_lean_run accepts
/// (plan_rope_lean_run with kRopeLeanRunThreads, kRopeLeanRunMinBlocks, kRopeLeanRunMaxGrid),
/// else the lean kernel for calls rope_lean accepts under rope_lean_max_tokens
/// (plan_rope_lean); otherwise the general kernel, plan_rope(T, Hq + Hk, h, f.vec).
RopePlan plan_rope_call(const RopeLeanFacts& f, bool allow_lean, int sm_count);

}  // namespace ropenorm::core
