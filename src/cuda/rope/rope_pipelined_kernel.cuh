// Software-pipelined RoPE forward / inverse kernel for long runs (plan.pipelined, see
// core::rope_pipelines), and the token loop it shares with the pipelined QK-norm + RoPE kernel.
//
// Ownership (block (bx, by, bz) of the plan, a persistent grid of gridDim.x token groups by the
// plan's head groups, V = the widest vector width, KH = kRopeHeadsPerThread):
//  - Token: slice threadIdx.z of block x owns token t = blockIdx.x * bz + threadIdx.z, then
//    every gridDim.x * bz-th token after it. One sequence: token t is (b, s) = (0, t).
//  - Pairs: threadIdx.x owns pair vector j = threadIdx.x (bx * V == h: every thread has one).
//  - Heads: thread row y = blockIdx.y * by + threadIdx.y owns the KH heads y * KH ..
//    y * KH + KH - 1 of q then k (one round: the plan is single-round).
//  - Pipeline: before it rotates and stores token t, a thread issues token t + step's head
//    loads and cos/sin loads (or computes them), and loads the position of token t + 2 step,
//    so a token's loads stay in flight through the previous token's arithmetic and the
//    cos/sin row never waits for its position.
// Every output element is written by exactly the thread that read the matching input element,
// after reading it, and a thread's loads of token t + step never touch token t's memory
// (distinct tokens never share memory, validated), so out == in (in place) is safe. Same
// helpers (loads, rotation, stores) as rope_kernel: the same bits. Launched with programmatic
// dependent launch: it waits for the previous kernel on the stream before its first global
// memory access.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/rope_plan.h"
#include "cuda/common/launch.h"
#include "cuda/rope/rope_kernels.cuh"

namespace ropenorm::cuda {

/// Position of token s of a one-sequence run, or 0 where the source needs none (gathered).
__device__ __forceinline__ int64_t rope_flat_position(const RopeKernelArgs& a, int64_t s) {
  return a.source == RopeSource::kGathered ? 0 : rope_position(a, 0, s);
}

/// The pipelined token loop of one thread, shared by the RoPE and the QK-norm + RoPE pipelined
/// kernels: for its tokens t (see the file header) and each of its heads hh < Hq + Hk,
/// head(tp, t, hh, oa, ob, regs, c, sn) with token t's pointers, the head's loaded elements and
/// the pairs' c_i, s_i, after token t + step's loads are issued.
template <typename T, int V, int KH, bool kGptj, typename HeadFn>
__device__ __forceinline__ void rope_pipelined_tokens(const RopeKernelArgs& a, HeadFn&& head) {
  const int heads = a.hq + a.hk;
  const int h0 = rope_first_head<KH>();
  const int i0 = static_cast<int>(threadIdx.x) * V;
  const int oa = kGptj ? 2 * i0 : i0;
  const int ob = kGptj ? 2 * i0 + V : a.half + i0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.z;
  int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
  if (t >= a.tokens) return;
  RopeHeadRegs<T, V> cur[KH], nxt[KH];
  float cc[V], cs[V], nc[V], ns[V];
  RopeTokenPtrs<T> tp = rope_token_ptrs<T>(a, 0, t);
  rope_load_heads<T, V, KH>(a, tp, h0, heads, oa, ob, cur);
  rope_cos_sin<V>(a, rope_flat_position(a, t), 0, t, i0, cc, cs);
  int64_t p_next = t + step < a.tokens ? rope_flat_position(a, t + step) : 0;
  while (true) {
    const int64_t tn = t + step;
    const bool more = tn < a.tokens;
    RopeTokenPtrs<T> tpn = tp;
    if (more) {
      tpn = rope_token_ptrs<T>(a, 0, tn);
      rope_load_heads<T, V, KH>(a, tpn, h0, heads, oa, ob, nxt);
      rope_cos_sin<V>(a, p_next, 0, tn, i0, nc, ns);
      p_next = tn + step < a.tokens ? rope_flat_position(a, tn + step) : 0;
    }
#pragma unroll
    for (int u = 0; u < KH; ++u) {
      if (h0 + u < heads) head(tp, t, h0 + u, oa, ob, cur[u], cc, cs);
    }
    if (!more) break;
    t = tn;
    tp = tpn;
#pragma unroll
    for (int u = 0; u < KH; ++u) cur[u] = nxt[u];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      cc[k] = nc[k];
      cs[k] = ns[k];
    }
  }
}

/// Pipelined kernel: y = rope(x) for every head of q and k, as rope_kernel, for the plans
/// core::rope_pipelines accepts; at least kMinBlocks blocks resident per multiprocessor.
template <typename T, int V, int KH, int kMinBlocks, bool kGptj>
__global__ void __launch_bounds__(core::kRopeBlockThreads, kMinBlocks)
    rope_pipelined_kernel(const RopeKernelArgs a) {
  griddep_wait();
  rope_pipelined_tokens<T, V, KH, kGptj>(
      a, [&](const RopeTokenPtrs<T>& tp, int64_t, int hh, int oa, int ob,
             const RopeHeadRegs<T, V>& regs, const float(&c)[V], const float(&sn)[V]) {
        rope_store_head<T, V, kGptj>(a, tp, hh, oa, ob, regs, c, sn);
      });
}

/// Persistent grid of a pipelined launch of `kernel` on plan p: as many token groups as fit on
/// the device at once next to the plan's head groups (at least one, at most the plan's).
template <typename Kernel>
dim3 rope_persistent_grid(Kernel kernel, const core::RopePlan& p) {
  const dim3 block = rope_launch_block(p);
  const int64_t resident =
      static_cast<int64_t>(blocks_per_sm(reinterpret_cast<const void*>(kernel),
                                         static_cast<int>(block.x * block.y * block.z), 0)) *
      device_sm_count() / p.head_groups;
  dim3 grid = rope_launch_grid(p);
  grid.x = static_cast<unsigned>(std::min<int64_t>(p.grid, std::max<int64_t>(1, resident)));
  return grid;
}

}  // namespace ropenorm::cuda
