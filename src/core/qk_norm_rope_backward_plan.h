// Launch planning of the fused QK-norm + RoPE backward kernel, decided on the host from the head
// geometry, the vector width and the device's multiprocessor count (never from the data), and
// the size of the dw workspace that plan needs.
//
// Slots: a head vector of D channels is cut into slots of two V-element runs (V = the vector
// width, rope_vector_width's). Slot m < h / V is rotary slot m (pairs i0 = m V .. i0 + V - 1: the
// runs at channels i0 and h + i0 for neox, 2 i0 and 2 i0 + V for gptj); slot m >= h / V holds the
// pass-through runs R + 2 (m - h / V) V and the run V after it (absent past D). With V = 1 this is
// the forward kernel's slot layout. G lanes (a power of two, at most 32) own one head vector and
// each lane KS slots (1, 2, 4 or 8).
//
// Grid: persistent, min(T, blocks per SM x SMs, kQkBwdMaxBlocks) blocks, with blocks per SM the
// kernel instance's occupancy capped at kQkBwdBlocksPerSm (so the workspace query, which knows
// neither the instance nor the dtypes, gives an upper bound for every call); block b owns the
// contiguous tokens [b C, (b + 1) C) with C = ceil(T / grid). Every block writes one fp32 partial
// row of D values for dwq and one for dwk, so the workspace is [2, grid, D] fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/rope_plan.h"

namespace ropenorm::core {

/// Threads per block of the backward kernel.
constexpr int kQkBwdThreads = 256;
/// Most blocks per multiprocessor the grid is sized for.
constexpr int64_t kQkBwdBlocksPerSm = 4;
/// Largest grid (also the bound used when the device cannot be queried).
constexpr int64_t kQkBwdMaxBlocks = 4096;

struct QkNormRopeBackwardPlan {
  bool lean = false;       ///< the lean kernel (plan_qk_norm_rope_backward_lean), else the general
  int vec = 1;             ///< V: elements per vector access
  int slots = 1;           ///< slots per head vector
  int group = 1;           ///< G: lanes per head vector
  int slots_per_lane = 1;  ///< KS
  int threads = kQkBwdThreads;
  int64_t grid = 1;              ///< blocks
  int64_t tokens_per_block = 1;  ///< general: C; lean: 1 (its tokens interleave over the grid)
  size_t smem_bytes = 0;         ///< dynamic shared memory: weights and per-group dw partials
  int rows = 1;                  ///< lean: heads per block (block (group, rows))
  int64_t head_groups = 1;       ///< lean: grid y; the grid is (grid, head_groups)
};

/// Blocks of the persistent grid for T tokens on a device with sm_count multiprocessors
/// (sm_count <= 0: unknown, the largest grid) and blocks_per_sm resident blocks of the kernel
/// (clamped to [1, kQkBwdBlocksPerSm]); 0 when T is 0.
int64_t qk_norm_rope_backward_grid(int64_t tokens, int sm_count,
                                   int blocks_per_sm = kQkBwdBlocksPerSm);

/// Bytes of fp32 dw partials the launch needs: 2 * grid * D * 4; 0 when T, Hq + Hk or D is 0.
size_t qk_norm_rope_backward_workspace_bytes(int64_t tokens, int64_t hq, int64_t hk,
                                             int64_t head_dim, int sm_count);

/// The plan for T tokens, rotary half h, head_dim D and vector width vec (which divides h and D),
/// for blocks_per_sm resident blocks of the planned instance (as qk_norm_rope_backward_grid).
QkNormRopeBackwardPlan plan_qk_norm_rope_backward(int64_t tokens, int64_t half, int64_t head_dim,
                                                  int vec, int sm_count,
                                                  int blocks_per_sm = kQkBwdBlocksPerSm);

/// Threads per block of the lean backward kernel at most (H200, bf16, D 128, 32 + 8 heads, T =
/// 32768, bench/experiments/qk_backward_lean.cu at 74a932b: 287.9 us at two resident blocks of
/// 320 threads and 96 registers, 523.4 at three blocks and 64 registers, 382.7 for the general
/// kernel).
constexpr int kQkBwdLeanThreads = 320;
/// Resident blocks per multiprocessor the lean kernel's register budget is set for.
constexpr int kQkBwdLeanMinBlocks = 2;

/// The lean backward kernel (the forward's lean layout over a persistent grid: a head per thread
/// row, kRopeLeanVec pairs per lane, the dw partials in registers) serves the call described by
/// f (vec: the widest vector every x, dout, dx and cos/sin operand allows; seq unused):
/// rope_lean_shape, h / kRopeLeanVec a power of two <= 32, both weights 16-byte aligned
/// (weights_aligned16), and at least as many tokens as head groups (a block holds one).
bool qk_norm_rope_backward_lean(const RopeLeanFacts& f, bool weights_aligned16, int sm_count);

/// The lean plan of a call qk_norm_rope_backward_lean accepts: block (g, rows) with g = h / 8 and
/// rows = ceil(heads / head_groups), head_groups = ceil(heads / (kQkBwdLeanThreads / g)); grid
/// (gx, head_groups) with gx = max(1, qk_norm_rope_backward_grid(T, sm_count, blocks_per_sm) /
/// head_groups), so the gx * head_groups partial rows fit the workspace the query reports; C =
/// ceil(T / gx) tokens per block.
QkNormRopeBackwardPlan plan_qk_norm_rope_backward_lean(const RopeLeanFacts& f, int sm_count,
                                                       int blocks_per_sm = kQkBwdLeanMinBlocks);

/// Instances of the lean backward kernel: the facts each fixes at compile time
/// (cuda/rope/rope_lean_spec.h); every instance gives the same bits.
enum class QkBwdLeanInstance {
  kAny,    ///< every fact read at run time
  kLanes,  ///< 8 or 16 lanes per head (D 128 or 256); the rest at run time
};

/// The instance for a lean call with `lanes` lanes per head (h / 8): kLanes for 8 and 16, else
/// kAny. (H200, bf16, D 128, 32 + 8 heads, T = 32768, bench/experiments/qk_backward_lean.cu:
/// kLanes without spills; fixing the weights in q/k's dtype in registers as well spilled 56
/// bytes and was slower.)
QkBwdLeanInstance qk_bwd_lean_instance(int64_t lanes);

}  // namespace ropenorm::core
