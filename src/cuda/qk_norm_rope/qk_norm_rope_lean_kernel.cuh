// Lean fused QK-norm + RoPE kernel (decode steps, and every run length for blocks of up to
// core::kRopeLeanLongRunThreads threads): the lean RoPE launch (core::plan_rope_lean,
// cuda/rope/rope_lean_kernels.cuh) plus the norm of the pair kernel, in the instances
// core::qk_lean_instance picks (LeanAny, LeanLanesWeights, LeanDecode; every one the same bits).
//
// Ownership (grid (S, B, Z), block (g, rows), g = h / 8 a power of two <= 32; Z blocks share a
// token's heads, rows = ceil((Hq + Hk) / Z), as core::plan_rope_lean splits them):
//  - Token: block (blockIdx.x, blockIdx.y, *) owns token (b, s) = (blockIdx.y, blockIdx.x);
//    every thread reads its position.
//  - Head: thread row threadIdx.y of block z owns head z rows + threadIdx.y (q heads first, then
//    k; rows past the last head exit before the wait); its g lanes are consecutive and aligned
//    in their warp (row y is threads y g .. y g + g - 1), so a head's butterfly never leaves its
//    row and its bits do not depend on the split.
//  - Channels: lane x owns the pair kernel's 8 pairs (neox channels 8x .. 8x + 7 and
//    h + 8x .. h + 8x + 7, gptj 16x .. 16x + 15): two 16-byte loads and stores.
//  - rms: qk_pair_head, as the pair kernel runs it: the lane's 16 squares in a fixed order, a
//    butterfly over the row's g lanes (every lane the same bits), lane 0 stores r. So a head's
//    bits are the pair kernel's. The lane's weights are loaded right after its position
//    and cos/sin, before the butterfly (the pair kernel loads them after it).
// Each lane writes exactly the channels it read, after the whole head was read (the butterfly
// follows every load), so in place is safe. The kernel waits for the previous kernel on the
// stream (programmatic dependent launch) before its first global memory access and right after
// the wait lets the next kernel launch (kTrigger: 1.69 -> 1.64 us per launch at T = 1 in graphs
// of 20 launches, bench/experiments/lean_trigger.cu); the next kernel still waits for this one's
// completion in its own wait.
//
// Lean-run kernel (core::QkKernel::kLeanRun, long runs): the same thread layout over a
// persistent grid (grid (gx, head groups), block (g, rows), g = 8 or 16 fixed at compile time;
// thread row y of group blockIdx.y owns head blockIdx.y rows + y, rows past Hq + Hk exit) through
// rope_lean_run (cuda/rope/rope_lean_run.cuh): block bx owns tokens bx, bx + gx, bx + 2 gx, ...,
// one per round, each thread's next token's data and cos/sin in flight in its own shared-memory
// ring while it computes the current one; each thread forms its 16 factors w + o
// once, and per token runs qk_pair_head, so its bits are the lean kernel's. With flat tokens
// (Spec::kFlat) the walk keeps t alone and lane 0 stores r at its head's rstd slot of token 0
// plus t times the head count; with full warps (Spec::kFullWarps: no row exits, every warp
// full) the butterfly's shuffles name all 32 lanes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/qk_norm_rope_plan.h"
#include "core/rope_plan.h"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_args.h"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "cuda/rope/rope_lean_run.cuh"

namespace ropenorm::cuda {

/// core::QkLeanInstance::kLanesWeights: kLanes lanes per head (D = 16 kLanes), both weights in
/// q/k's dtype.
template <int kLanes>
using LeanLanesWeights = LeanSpec<kLanes, LeanPositions::kAny, false, true>;
/// core::QkLeanInstance::kDecodeI64 / kDecodeI32: 8 lanes, weights in q/k's dtype, explicit
/// positions kPos, cos/sin rows, the launch bound core::kQkLeanDecodeThreads.
template <LeanPositions kPos>
using LeanDecode = LeanSpec<8, kPos, true, true, core::kQkLeanDecodeThreads>;

/// Thread (x, y) of lean block (s, b), after the wait: loads its head's two vectors, the
/// position, its c_i, s_i and weights (rope_lean_load, qk_head_weights), then normalises,
/// rotates and stores them (qk_pair_head: butterfly over the g lanes in mask, lane 0 storing r).
template <typename T, typename C, bool kGptj, typename Spec>
__device__ __forceinline__ void qk_norm_rope_lean_thread(const QkNormRopeArgs& args, int g,
                                                         unsigned mask) {
  constexpr int V = core::kRopeLeanVec;
  RopeLeanItem<T> it;
  rope_lean_load<T, C, kGptj, Spec>(args.rope, it);
  float w0[V], w1[V];
  qk_head_weights<V, std::conditional_t<Spec::kWeightsAsData, T, void>>(args, it.hh, it.oa, it.ob,
                                                                        w0, w1);
  qk_pair_head<T, V, kGptj, 2 * Spec::kLanes * V>(
      args, [&] { return it.y; }, [&](float r) { qk_store_rstd(args, it.t, it.hh, r); }, it.oa,
      it.ob, it.regs, it.c, it.sn, mask, g,
      [&](float(&f0)[V], float(&f1)[V]) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          f0[i] = w0[i];
          f1[i] = w1[i];
        }
      });
}

/// Lean QK-norm + RoPE of style kGptj with cos/sin tables of dtype C and the facts Spec fixes
/// (rope_lean_spec.h); launched only as core::plan_qk_norm_rope's kLean allows. kTrigger: let
/// the next kernel on the stream launch right after the wait (griddep_launch_dependents; the
/// launcher takes the default).
template <typename T, typename C, bool kGptj, typename Spec = LeanAny, bool kTrigger = true>
__global__ void __launch_bounds__(Spec::kMaxThreads)
    qk_norm_rope_lean_kernel(const QkNormRopeArgs args) {
  const int g = Spec::kLanes != 0 ? Spec::kLanes : static_cast<int>(blockDim.x);
  const int lane = (threadIdx.y * g + threadIdx.x) & 31;
  const unsigned mask = g == 32 ? 0xffffffffu : ((1u << g) - 1u) << (lane & ~(g - 1));
  if (lean_row_past_heads(args.rope)) return;
  griddep_wait();
  if constexpr (kTrigger) griddep_launch_dependents();
  qk_norm_rope_lean_thread<T, C, kGptj, Spec>(args, g, mask);
}

/// A lean-run QK-norm + RoPE round's work (rope_lean_run's body) for head hh of token t:
/// qk_pair_head over the Spec::kLanes lanes in mask with the factors w0, w1 (w + o, formed once
/// per run), storing through y() (the lane's output at channel oa) and, from lane 0, r at rs
/// (the flat walk's slot; the general walk's through qk_store_rstd).
template <typename T, bool kGptj, typename Spec, int V, typename Y>
__device__ __forceinline__ void qk_lean_run_head(const QkNormRopeArgs& args, int64_t t, const Y& y,
                                                 const QkRstdSlot& rs, int hh, int oa, int ob,
                                                 const RopeHeadRegs<T, V>& regs,
                                                 const float (&c)[V], const float (&sn)[V],
                                                 unsigned mask, const float (&w0)[V],
                                                 const float (&w1)[V]) {
  constexpr int g = Spec::kLanes;
  qk_pair_head<T, V, kGptj, 2 * g * V, true>(
      args, y,
      [&](float r) {
        if constexpr (Spec::kFlat) {
          rs.store(static_cast<uint32_t>(t), r);  // t < 2^31 (the flat walk's cursor)
        } else {
          qk_store_rstd(args, t, hh, r);
        }
      },
      0, ob - oa, regs, c, sn, mask, g,  // y() points at channel oa
      [&](float(&f0)[V], float(&f1)[V]) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          f0[i] = w0[i];
          f1[i] = w1[i];
        }
      });
}

/// Lean-run QK-norm + RoPE of style kGptj with cos/sin tables of dtype C, Spec::kLanes lanes per
/// head (8 or 16) and the other facts Spec fixes (Spec::kFlat: the flat walk; Spec::kFullWarps:
/// the butterfly's shuffles name all 32 lanes); the block's tokens interleaved over the grid
/// (rope_block_tokens.cuh), its ring in dynamic shared memory (core::RopePlan::smem_bytes);
/// kDataViaL1 and kStages as rope_lean_run's (the launcher takes the defaults). It lets the
/// next kernel launch only when it exits: on a persistent grid an earlier trigger measured no
/// gain (lean-trigger-ea00257-nvidia-h200.log).
template <typename T, typename C, bool kGptj, typename Spec, bool kDataViaL1 = kGptj,
          int kStages = core::kRopeLeanRunStages>
__global__ void __launch_bounds__(core::kQkLeanRunThreads, core::kQkLeanRunMinBlocks)
    qk_norm_rope_lean_run_kernel(const QkNormRopeArgs args) {
  static_assert(Spec::kLanes == 8 || Spec::kLanes == 16, "the lean run fixes the lanes");
  constexpr int g = Spec::kLanes;
  constexpr int V = core::kRopeLeanVec;
  constexpr int kD = 2 * g * V;
  extern __shared__ uint4 qk_lean_run_ring[];
  const RopeKernelArgs& a = args.rope;
  const int lane = (threadIdx.y * g + threadIdx.x) & 31;
  const unsigned mask =
      g == 32 || Spec::kFullWarps ? 0xffffffffu : ((1u << g) - 1u) << (lane & ~(g - 1));
  const LeanRunLane ln = lean_run_lane<kGptj>(a, kD / 2);
  if (ln.hh >= a.hq + a.hk) return;
  const int oa = ln.oa, ob = ln.ob;
  // Flat walk: the thread's rstd slot, kept; the general walk asks qk_store_rstd per token
  // (fewer live registers).
  const QkRstdSlot rs = Spec::kFlat ? qk_rstd_slot(args, ln.hh) : QkRstdSlot{nullptr, 0};
  griddep_wait();
  float w0[V], w1[V];  // the factors w + o, formed once
  qk_head_factors<V, std::conditional_t<Spec::kWeightsAsData, T, void>>(args, ln.hh, oa, ob, w0,
                                                                        w1);
  rope_lean_run<T, C, Spec, kDataViaL1, false, kStages>(
      a, qk_lean_run_ring, ln,
      [&](int64_t t, const auto& y, const RopeHeadRegs<T, V>& regs, const float(&c)[V],
          const float(&sn)[V], const auto&) {
        qk_lean_run_head<T, kGptj, Spec>(args, t, y, rs, ln.hh, oa, ob, regs, c, sn, mask, w0, w1);
      });
}

}  // namespace ropenorm::cuda
