// The lean run: the lean layout (rope_lean_kernels.cuh: thread (x, y) owns pair vector x of head
// y) over a persistent grid, its tokens interleaved over the blocks, each thread fetching its
// next tokens' data and cos/sin into its own shared-memory ring while it computes the current
// one. The per-token work is the caller's (the QK-norm + RoPE lean-run kernel), so its bits are
// the lean kernel's.
// (RoPE on this loop measured no faster than its lean kernel: bench/experiments/rope_lean_run.cu.)
//
// Ownership (grid (gx, head groups), block (g, rows), S = core::kRopeLeanRunStages):
//  - Tokens: block bx owns the tokens bx, bx + G, bx + 2G, ... (G = gridDim.x; interleaved over
//    the grid, rope_block_tokens.cuh), one per round, in order; (b, s) advance without division.
//  - Head and pairs: thread row y of head group blockIdx.y owns head hh = blockIdx.y rows + y (q
//    heads first, then k; rows past Hq + Hk exit at once), lane x its pair vector x (two
//    V-vectors of channels, and the pairs' c_i, s_i), as in the lean kernel.
//  - Ring (ThreadRing, [stage][chunk][thread]): in round j a thread starts the cp.async of its
//    token j + S - 1's two vectors (L2 only for neox) and cos/sin chunks (through L1: every head
//    row of the block reads the same rows), then waits for its own copy of token j; it reads and
//    writes nothing but its own slots, so no barrier is needed. The position of token j + S - 1
//    was loaded in the previous round, so no round waits for a position before it can fetch.
// A thread reads a token's two vectors (from the ring) before it writes them, and fetches token
// t + G only from addresses token t does not write (R = D, one head per row), so in place is safe.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"
#include "cuda/common/thread_ring.cuh"
#include "cuda/rope/rope_args.h"
#include "cuda/rope/rope_block_tokens.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"

namespace ropenorm::cuda {

/// What thread (x, y) of head group blockIdx.y owns: head hh = blockIdx.y rows + y (q heads
/// first; hh >= Hq + Hk: none), its index in q or k, and pair vector x: pairs i0 .. i0 + V - 1 at
/// channels oa (the pairs' first halves) and ob (second halves) of the head.
struct LeanRunLane {
  int hh;
  bool is_q;
  int head;
  int i0, oa, ob;
};

/// The lane of the calling thread for style kGptj and rotary half h.
template <bool kGptj>
__device__ __forceinline__ LeanRunLane lean_run_lane(const RopeKernelArgs& a, int h) {
  constexpr int V = core::kRopeLeanVec;
  LeanRunLane ln;
  ln.hh = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  ln.is_q = ln.hh < a.hq;
  ln.head = ln.is_q ? ln.hh : ln.hh - a.hq;
  ln.i0 = static_cast<int>(threadIdx.x) * V;
  ln.oa = kGptj ? 2 * ln.i0 : ln.i0;
  ln.ob = kGptj ? 2 * ln.i0 + V : h + ln.i0;
  return ln;
}

/// The ring of a lean-run thread: its two V-vectors of T, then the cos and sin V-vectors of C,
/// per stage.
template <typename T, typename C>
struct LeanRunRing {
  static constexpr int V = core::kRopeLeanVec;
  static constexpr int kVecChunks = V * static_cast<int>(sizeof(T)) / 16;
  static constexpr int kCsChunks = V * static_cast<int>(sizeof(C)) / 16;
  static constexpr int kChunks = 2 * kVecChunks + 2 * kCsChunks;
  using Ring = ThreadRing<core::kRopeLeanRunStages, kChunks>;
  static_assert(kVecChunks >= 1 && kCsChunks >= 1, "whole 16-byte chunks per vector");
  static_assert(static_cast<int64_t>(Ring::bytes(1)) ==
                    core::rope_lean_run_ring_bytes(sizeof(T), sizeof(C), 1),
                "the planner's ring size");
};

/// Runs block blockIdx.x's tokens (block_tokens) for the thread of lane ln (lean_run_lane;
/// ln.hh < Hq + Hk): each round hands token t's data (regs), c_i, s_i of pairs i0 .. i0 + V - 1
/// (s_i negated for the inverse rotation) and (b, s) to body(t, b, s, regs, c, sn). Spec: the
/// facts fixed at compile time (rope_lean_spec.h); kDataViaL1: the data's copies go through L1
/// (gptj: a lane's two vectors are the two halves of one 32-byte sector, which the second copy
/// then finds in L1). `ring` is the block's dynamic shared memory, LeanRunRing<T, C>::Ring::bytes(
/// threads) of it.
template <typename T, typename C, typename Spec, bool kDataViaL1, typename Body>
__device__ __forceinline__ void rope_lean_run(const RopeKernelArgs& a, uint4* ring,
                                              const LeanRunLane& ln, Body&& body) {
  using R = LeanRunRing<T, C>;
  constexpr int V = R::V;
  constexpr int S = core::kRopeLeanRunStages;
  constexpr int kCos = 2 * R::kVecChunks, kSin = kCos + R::kCsChunks;
  constexpr int kVecBytes = 16 * R::kVecChunks, kCsBytes = 16 * R::kCsChunks;
  const int threads = static_cast<int>(blockDim.x * blockDim.y);
  const typename R::Ring rg{ring, static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x),
                            threads};
  const RopeOperand& in = ln.is_q ? a.q : a.k;
  const TokenStep st = block_token_step(a);
  // Token cursors: the one computed (round j), the one fetched (round j + S - 1).
  TokenCursor cur = first_block_token(a);
  if (!cur.valid(a)) return;
  TokenCursor fet = cur;
  auto fetch = [&](int stage, int64_t p) {
    const T* x = rope_head_ptr<T>(in, fet.b, fet.s, ln.head);
    rg.template fetch<kVecBytes, kDataViaL1>(stage, 0, x + ln.oa);
    rg.template fetch<kVecBytes, kDataViaL1>(stage, R::kVecChunks, x + ln.ob);
    int64_t co, so;
    rope_lean_cos_sin_rows<Spec>(a, p, fet.b, fet.s, co, so);
    rg.template fetch<kCsBytes, true>(stage, kCos, static_cast<const C*>(a.cos) + co + ln.i0);
    rg.template fetch<kCsBytes, true>(stage, kSin, static_cast<const C*>(a.sin) + so + ln.i0);
  };
#pragma unroll
  for (int k = 0; k < S - 1; ++k) {
    if (fet.valid(a)) fetch(k, rope_lean_position<Spec>(a, fet.b, fet.s));
    cp_async_commit();
    fet.next(st, a.seq);
  }
  // The position of the round's fetch, loaded a round earlier.
  int64_t p_ahead = fet.valid(a) ? rope_lean_position<Spec>(a, fet.b, fet.s) : 0;
  int stage = 0;
  while (cur.valid(a)) {
    const int ahead = stage == 0 ? S - 1 : stage - 1;  // (stage + S - 1) % S
    if (fet.valid(a)) fetch(ahead, p_ahead);
    cp_async_commit();
    fet.next(st, a.seq);
    if (fet.valid(a)) p_ahead = rope_lean_position<Spec>(a, fet.b, fet.s);
    cp_async_wait<S - 1>();
    RopeHeadRegs<T, V> regs;
    rg.template read_raw<T, V>(stage, 0, regs.x0);
    rg.template read_raw<T, V>(stage, R::kVecChunks, regs.x1);
    float c[V], sn[V];
    rg.template read_float<C, V>(stage, kCos, c);
    rg.template read_float<C, V>(stage, kSin, sn);
    rope_apply_direction<V>(a, sn);
    body(cur.t(a), cur.b, cur.s, regs, c, sn);
    cur.next(st, a.seq);
    stage = stage == S - 1 ? 0 : stage + 1;
  }
}

}  // namespace ropenorm::cuda
