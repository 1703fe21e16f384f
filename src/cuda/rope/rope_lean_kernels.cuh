// Lean RoPE kernel for short runs (decode steps): the launch core::plan_rope_lean describes.
//
// Ownership (grid T, block (h / V, Hq + Hk), V = core::kRopeLeanVec):
//  - Token: block blockIdx.x owns token t = blockIdx.x (no loop). Every thread reads the
//    token's position itself (one broadcast load).
//  - Head: thread row threadIdx.y owns head threadIdx.y of the Hq + Hk heads (q first, then k).
//  - Pairs: threadIdx.x owns pair vector x, pairs i0 = x V .. i0 + V - 1 (neox: the V-vectors at
//    channels i0 and h + i0; gptj: the V pairs interleaved at channels 2 i0 .. 2 i0 + 2V - 1),
//    loads their c_i, s_i once and rotates them with rope_rotate_regs, as the RoPE kernel does,
//    so the bits are the same as that kernel's.
// There are no pass-through channels (R = D) and no loops: one thread, one head, one token. A
// thread reads its two vectors before it writes them, so in place is safe. The kernel waits for
// the previous kernel on the stream (programmatic dependent launch) before its first global
// memory access, then at once lets the next kernel begin launching.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_args.h"
#include "cuda/rope/rope_kernels.cuh"

namespace ropenorm::cuda {

/// One lean-launch thread's token, head, channels, inputs and c_i, s_i.
template <typename T>
struct RopeLeanItem {
  static constexpr int V = core::kRopeLeanVec;
  int64_t t;
  int hh, oa, ob;
  RopeTokenPtrs<T> tp;
  RopeHeadRegs<T, V> regs;
  float c[V], sn[V];
};

/// Thread (x, y) of lean block blockIdx.x: loads its head's two vectors, then the position
/// and its pairs' c_i, s_i (the data loads in flight first).
template <typename T, bool kGptj>
__device__ __forceinline__ void rope_lean_load(const RopeKernelArgs& a, RopeLeanItem<T>& it) {
  constexpr int V = core::kRopeLeanVec;
  it.t = blockIdx.x;
  it.hh = threadIdx.y;
  const int i0 = static_cast<int>(threadIdx.x) * V;
  it.oa = kGptj ? 2 * i0 : i0;
  it.ob = kGptj ? 2 * i0 + V : a.half + i0;
  int64_t b, s;
  rope_token_coords(a, it.t, b, s);
  it.tp = rope_token_ptrs<T>(a, b, s);
  rope_load_head<T, V>(a, it.tp, it.hh, it.oa, it.ob, it.regs);
  const int64_t p = a.source == RopeSource::kGathered ? 0 : rope_position(a, b, s);
  rope_cos_sin_loaded<V>(a, p, b, s, i0, it.c, it.sn);
}

/// Lean RoPE (forward or inverse, a.inverse) of style kGptj; launched only as rope_lean allows.
template <typename T, bool kGptj>
__global__ void __launch_bounds__(core::kRopeLeanMaxThreads)
    rope_lean_kernel(const RopeKernelArgs a) {
  griddep_wait();
  griddep_launch_dependents();
  RopeLeanItem<T> it;
  rope_lean_load<T, kGptj>(a, it);
  rope_store_head<T, core::kRopeLeanVec, kGptj>(a, it.tp, it.hh, it.oa, it.ob, it.regs, it.c,
                                                it.sn);
}

}  // namespace ropenorm::cuda
