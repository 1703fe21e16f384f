// RoPE forward / inverse kernel.
//
// Ownership (block (bx, by, bz), grid over token groups, V = the plan's vector width,
// KH = kRopeHeadsPerThread):
//  - Token: threadIdx.z picks token t = blockIdx.x * bz + threadIdx.z, then every
//    gridDim.x * bz-th token after it (grid-stride loop). Every thread of that (z) slice reads
//    the token's position itself (one broadcast load; explicit, or arange + offset + the
//    sequence's offset).
//  - Pairs: threadIdx.x owns the pair vectors j = threadIdx.x, threadIdx.x + bx, ... (pair
//    indices i0 = j * V .. i0 + V - 1). For each j it loads (or computes) c_i and s_i of its V
//    pairs ONCE and keeps them in registers for all the heads it rotates.
//  - Heads: thread row y = blockIdx.y * by + threadIdx.y owns the KH consecutive heads
//    y * KH .. y * KH + KH - 1 of the Hq + Hk heads of q then k, then the KH heads
//    gridDim.y * by * KH further on, and so on (the planner's head groups cover every head, so
//    the further rounds exist only past CUDA's grid limit). All KH heads' loads
//    are issued before the position and cos/sin loads and before any rotation, so a thread has
//    2 * KH independent vector loads in flight. A thread rotates the same pairs in each of its
//    heads: neox reads the V-vectors at channels i0 and h + i0, gptj the V-vectors at channels
//    2 * i0 and 2 * i0 + V (V pairs interleaved).
//  - Pass-through channels R .. D - 1 (out of place only): the block slice's bx * by threads
//    share those of the block's head group, flat index over (head, tail vector), copied as raw
//    bits.
// Every output element is written by exactly the thread that read the matching input element,
// after reading it, so out == in (in place) is safe; distinct heads never share memory
// (validated), so a thread may read its other heads before storing its first.
// Vector width V > 1 is used only when the launcher checked that every base and stride is
// aligned for it; V = 1 is the scalar path (any alignment, e.g. a storage offset of 1 element).
// The kernel is launched with programmatic dependent launch: it waits for the previous kernel
// on the stream before its first global memory access.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_args.h"
#include "cuda/rope/rope_math.cuh"

namespace ropenorm::cuda {

/// Grid of a launch on the RoPE layout: token groups (x) by head groups (y); a lean plan's
/// sequences (y) and head splits (z).
inline dim3 rope_launch_grid(const core::RopePlan& p) {
  return dim3(static_cast<unsigned>(p.grid), static_cast<unsigned>(p.head_groups),
              static_cast<unsigned>(p.head_split));
}

/// Block of a launch on the RoPE layout: pair vectors (x), rows of heads (y), tokens (z).
inline dim3 rope_launch_block(const core::RopePlan& p) {
  return dim3(static_cast<unsigned>(p.bx), static_cast<unsigned>(p.by),
              static_cast<unsigned>(p.bz));
}

/// Token t's batch index b and index s in its sequence; one sequence (seq == tokens, the
/// flat [T, H, D] layout) needs no division.
__device__ __forceinline__ void rope_token_coords(const RopeKernelArgs& a, int64_t t, int64_t& b,
                                                  int64_t& s) {
  if (a.seq == a.tokens) {
    b = 0;
    s = t;
  } else {
    b = t / a.seq;
    s = t - b * a.seq;
  }
}

/// First of the KH heads of thread row threadIdx.y in head group blockIdx.y (rows of KH heads,
/// blockDim.y rows per group).
template <int KH>
__device__ __forceinline__ int rope_first_head() {
  return static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y) * KH;
}

/// Heads between a thread's rounds: every head group's rows once.
template <int KH>
__device__ __forceinline__ int rope_head_step() {
  return static_cast<int>(gridDim.y * blockDim.y) * KH;
}

/// The position of token (b, s).
__device__ __forceinline__ int64_t rope_position(const RopeKernelArgs& a, int64_t b, int64_t s) {
  if (a.pos != nullptr) {
    const int64_t off = b * a.pos_sb + s * a.pos_ss;
    return a.pos_i64 ? static_cast<const int64_t*>(a.pos)[off]
                     : static_cast<int64_t>(static_cast<const int32_t*>(a.pos)[off]);
  }
  int64_t p = s + a.offset;
  if (a.seq_off != nullptr) {
    const int64_t off = b * a.seq_off_stride;
    p += a.seq_off_i64 ? static_cast<const int64_t*>(a.seq_off)[off]
                       : static_cast<int64_t>(static_cast<const int32_t*>(a.seq_off)[off]);
  }
  return p;
}

/// Negates s_i for the inverse rotation.
template <int V>
__device__ __forceinline__ void rope_apply_direction(const RopeKernelArgs& a, float (&sn)[V]) {
  if (a.inverse) {
#pragma unroll
    for (int k = 0; k < V; ++k) sn[k] = -sn[k];
  }
}

/// kInvFreq source: c_i and s_i of pairs i0 .. i0 + V - 1 at position p, computed in fp32
/// (s_i negated for the inverse rotation).
template <int V>
__device__ __forceinline__ void rope_cos_sin_computed(const RopeKernelArgs& a, int64_t p, int i0,
                                                      float (&c)[V], float (&sn)[V]) {
  const float pf = static_cast<float>(p);  // round to nearest, as torch's position.float()
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float angle = __fmul_rn(pf, a.inv_freq[i0 + k]);
    float sv, cv;
    sincosf(angle, &sv, &cv);
    c[k] = cv * a.scaling;
    sn[k] = sv * a.scaling;
  }
  rope_apply_direction<V>(a, sn);
}

/// Table sources (kCache, kTable, kGathered): where token (b, s)'s cos and sin rows start (co,
/// so, in elements of the tables), its position being p.
__device__ __forceinline__ void rope_cos_sin_rows(const RopeKernelArgs& a, int64_t p, int64_t b,
                                                  int64_t s, int64_t& co, int64_t& so) {
  if (a.source == RopeSource::kGathered) {
    co = b * a.cos_sb + s * a.cos_ss;
    so = b * a.sin_sb + s * a.sin_ss;
  } else {
    co = p * a.cos_row;
    so = p * a.sin_row;
  }
}

/// Table sources (kCache, kTable, kGathered): c_i and s_i of pairs i0 .. i0 + V - 1 of token
/// (b, s) at position p, loaded (s_i negated for the inverse rotation).
template <int V>
__device__ __forceinline__ void rope_cos_sin_loaded(const RopeKernelArgs& a, int64_t p, int64_t b,
                                                    int64_t s, int i0, float (&c)[V],
                                                    float (&sn)[V]) {
  int64_t co, so;
  rope_cos_sin_rows(a, p, b, s, co, so);
  load_pack_dyn<V>(a.cos, a.cs_dtype, co + i0, c);
  load_pack_dyn<V>(a.sin, a.cs_dtype, so + i0, sn);
  rope_apply_direction<V>(a, sn);
}

/// c_i and s_i (s_i negated for the inverse rotation) of pairs i0 .. i0 + V - 1 of token (b, s)
/// at position p, from whichever source the arguments name.
template <int V>
__device__ __forceinline__ void rope_cos_sin(const RopeKernelArgs& a, int64_t p, int64_t b,
                                             int64_t s, int i0, float (&c)[V], float (&sn)[V]) {
  if (a.source == RopeSource::kInvFreq) {
    rope_cos_sin_computed<V>(a, p, i0, c, sn);
  } else {
    rope_cos_sin_loaded<V>(a, p, b, s, i0, c, sn);
  }
}

/// One head's 2V input elements of a thread's V pairs, as stored.
template <typename T, int V>
struct RopeHeadRegs {
  RawVec<T, V> x0, x1;
};

template <typename T>
__device__ __forceinline__ const T* rope_head_ptr(const RopeOperand& op, int64_t b, int64_t s,
                                                  int head) {
  return static_cast<const T*>(op.data) + b * op.sb + s * op.ss + head * op.sh;
}

/// Token (b, s)'s base pointers of q, k, q_out and k_out (head 0, channel 0); k's are null
/// when k is absent.
template <typename T>
struct RopeTokenPtrs {
  const T* q;
  const T* k;
  T* q_out;
  T* k_out;
};

template <typename T>
__device__ __forceinline__ RopeTokenPtrs<T> rope_token_ptrs(const RopeKernelArgs& a, int64_t b,
                                                            int64_t s) {
  RopeTokenPtrs<T> p;
  p.q = rope_head_ptr<T>(a.q, b, s, 0);
  p.q_out = const_cast<T*>(rope_head_ptr<T>(a.q_out, b, s, 0));
  p.k = a.hk > 0 ? rope_head_ptr<T>(a.k, b, s, 0) : nullptr;
  p.k_out = a.hk > 0 ? const_cast<T*>(rope_head_ptr<T>(a.k_out, b, s, 0)) : nullptr;
  return p;
}

/// Input pointer of head hh (q heads first, then k) of a token.
template <typename T>
__device__ __forceinline__ const T* rope_in_head(const RopeKernelArgs& a,
                                                 const RopeTokenPtrs<T>& tp, int hh) {
  return hh < a.hq ? tp.q + hh * a.q.sh : tp.k + (hh - a.hq) * a.k.sh;
}

template <typename T, int V>
__device__ __forceinline__ void rope_load_head(const RopeKernelArgs& a, const RopeTokenPtrs<T>& tp,
                                               int hh, int oa, int ob, RopeHeadRegs<T, V>& regs) {
  const T* x = rope_in_head<T>(a, tp, hh);
  load_raw<T, V>(x + oa, regs.x0);
  load_raw<T, V>(x + ob, regs.x1);
}

/// Element m of the concatenation (x0, x1) of two V-vectors (m < 2V, a compile-time index once
/// the callers' loops are unrolled).
template <int V>
__device__ __forceinline__ float& rope_pick(float (&x0)[V], float (&x1)[V], int m) {
  return m < V ? x0[m] : x1[m - V];
}

/// Rotates a thread's V pairs held as the two V-vectors x0 (channels oa ..) and x1 (channels
/// ob ..) in place: neox pairs (x0[k], x1[k]); gptj pairs are channels (2k, 2k + 1) of x0 ++ x1.
template <int V, bool kGptj>
__device__ __forceinline__ void rope_rotate_regs(float (&x0)[V], float (&x1)[V],
                                                 const float (&c)[V], const float (&sn)[V]) {
  if constexpr (kGptj) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float& ra = rope_pick<V>(x0, x1, 2 * k);
      float& rb = rope_pick<V>(x0, x1, 2 * k + 1);
      float ya, yb;
      rope_rotate_pair(ra, rb, c[k], sn[k], &ya, &yb);
      ra = ya;
      rb = yb;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float ya, yb;
      rope_rotate_pair(x0[k], x1[k], c[k], sn[k], &ya, &yb);
      x0[k] = ya;
      x1[k] = yb;
    }
  }
}

/// Output pointer of head hh (q heads first, then k) of a token.
template <typename T>
__device__ __forceinline__ T* rope_out_head(const RopeKernelArgs& a, const RopeTokenPtrs<T>& tp,
                                            int hh) {
  return hh < a.hq ? tp.q_out + hh * a.q_out.sh : tp.k_out + (hh - a.hq) * a.k_out.sh;
}

/// Rotates one head's loaded V-vectors (regs) by c, sn and stores them at y + oa and y + ob,
/// y = out() (asked for after the rotation: the general kernel's register allocation depends
/// on that order).
template <typename T, int V, bool kGptj, typename OutFn>
__device__ __forceinline__ void rope_rotate_store(OutFn&& out, int oa, int ob,
                                                  const RopeHeadRegs<T, V>& regs,
                                                  const float (&c)[V], const float (&sn)[V]) {
  float x0[V], x1[V];
  widen<T, V>(regs.x0, x0);
  widen<T, V>(regs.x1, x1);
  rope_rotate_regs<V, kGptj>(x0, x1, c, sn);
  T* y = out();
  store_pack<T, V>(y + oa, x0);
  store_pack<T, V>(y + ob, x1);
}

template <typename T, int V, bool kGptj>
__device__ __forceinline__ void rope_store_head(const RopeKernelArgs& a, const RopeTokenPtrs<T>& tp,
                                                int hh, int oa, int ob,
                                                const RopeHeadRegs<T, V>& regs, const float (&c)[V],
                                                const float (&sn)[V]) {
  rope_rotate_store<T, V, kGptj>([&] { return rope_out_head<T>(a, tp, hh); }, oa, ob, regs, c, sn);
}

/// Copies V elements bit for bit (aligned as the launcher checked).
template <typename T, int V>
__device__ __forceinline__ void rope_copy_raw(const T* src, T* dst) {
  constexpr int kPerChunk = (16 / sizeof(T)) < V ? (16 / sizeof(T)) : V;
#pragma unroll
  for (int c = 0; c < V / kPerChunk; ++c) {
    const Pack<T, kPerChunk> pk = load_word<Pack<T, kPerChunk>>(src + c * kPerChunk);
    store_chunk<T, kPerChunk>(dst + c * kPerChunk, pk.v);
  }
}

/// Loads heads h0 .. h0 + KH - 1 (those < heads) of token (b, s): all loads in flight at once.
template <typename T, int V, int KH>
__device__ __forceinline__ void rope_load_heads(const RopeKernelArgs& a, const RopeTokenPtrs<T>& tp,
                                                int h0, int heads, int oa, int ob,
                                                RopeHeadRegs<T, V> (&regs)[KH]) {
#pragma unroll
  for (int u = 0; u < KH; ++u) {
    if (h0 + u < heads) rope_load_head<T, V>(a, tp, h0 + u, oa, ob, regs[u]);
  }
}

/// The rounds of heads of one thread's pair vector j of token (b, s), shared by the RoPE and
/// the QK-norm + RoPE pair kernels: the thread's c_i, s_i (computed ones before the head loads,
/// loaded ones after the first round's loads, so their latency overlaps), then heads hfirst,
/// hfirst + hstep, ... KH at a time, all of a round's loads issued before head(hh, regs[u], c,
/// sn) runs on any of them. kOneRound: the launcher checked that the first KH heads are all
/// there are for this thread (hstep >= heads), so no loop is compiled.
template <typename T, int V, int KH, bool kGptj, bool kOneRound, typename HeadFn>
__device__ __forceinline__ void rope_head_rounds(const RopeKernelArgs& a,
                                                 const RopeTokenPtrs<T>& tp, int64_t b, int64_t s,
                                                 int j, int hfirst, int hstep, HeadFn&& head) {
  const int heads = a.hq + a.hk;
  const int i0 = j * V;
  const int oa = kGptj ? 2 * i0 : i0;
  const int ob = kGptj ? 2 * i0 + V : a.half + i0;
  const bool computed = a.source == RopeSource::kInvFreq;
  float c[V], sn[V];
  if (computed) rope_cos_sin_computed<V>(a, rope_position(a, b, s), i0, c, sn);
  RopeHeadRegs<T, V> regs[KH];
  rope_load_heads<T, V, KH>(a, tp, hfirst, heads, oa, ob, regs);
  if (!computed) {
    const int64_t p = a.source == RopeSource::kGathered ? 0 : rope_position(a, b, s);
    rope_cos_sin_loaded<V>(a, p, b, s, i0, c, sn);
  }
#pragma unroll
  for (int u = 0; u < KH; ++u) {
    if (hfirst + u < heads) head(hfirst + u, oa, ob, regs[u], c, sn);
  }
  if constexpr (!kOneRound) {
    for (int h0 = hfirst + hstep; h0 < heads; h0 += hstep) {
      rope_load_heads<T, V, KH>(a, tp, h0, heads, oa, ob, regs);
#pragma unroll
      for (int u = 0; u < KH; ++u) {
        if (h0 + u < heads) head(h0 + u, oa, ob, regs[u], c, sn);
      }
    }
  }
}

/// Thread's pair vector j of token (b, s): rotates it in every head the thread owns.
template <typename T, int V, int KH, bool kGptj, bool kOneRound>
__device__ __forceinline__ void rope_pairs_of_token(const RopeKernelArgs& a, int64_t b, int64_t s,
                                                    int j, int hfirst, int hstep) {
  const RopeTokenPtrs<T> tp = rope_token_ptrs<T>(a, b, s);
  rope_head_rounds<T, V, KH, kGptj, kOneRound>(
      a, tp, b, s, j, hfirst, hstep,
      [&](int hh, int oa, int ob, const RopeHeadRegs<T, V>& regs, const float(&c)[V],
          const float(&sn)[V]) { rope_store_head<T, V, kGptj>(a, tp, hh, oa, ob, regs, c, sn); });
}

/// Pass-through channels R .. D - 1 of token (b, s) in the heads of the block's head group
/// (rounds of blockDim.y * KH heads, blockIdx.y-th of every gridDim.y), shared by the (x, y)
/// threads of its slice.
template <typename T, int V, int KH>
__device__ __forceinline__ void rope_copy_tail(const RopeKernelArgs& a, int64_t b, int64_t s) {
  const int heads = a.hq + a.hk;
  const int rot = 2 * a.half;
  const int ntail = (a.head_dim - rot) / V;
  const int round = blockDim.y * KH;
  const int flat = threadIdx.y * blockDim.x + threadIdx.x;
  const int nflat = blockDim.x * blockDim.y;
  for (int h0 = blockIdx.y * round; h0 < heads; h0 += gridDim.y * round) {
    const int nh = heads - h0 < round ? heads - h0 : round;
    const int64_t total = static_cast<int64_t>(nh) * ntail;
    for (int64_t idx = flat; idx < total; idx += nflat) {
      const int hh = h0 + static_cast<int>(idx / ntail);
      const int col = rot + static_cast<int>(idx % ntail) * V;
      if (hh < a.hq) {
        if (a.copy_q_tail) {
          rope_copy_raw<T, V>(rope_head_ptr<T>(a.q, b, s, hh) + col,
                              const_cast<T*>(rope_head_ptr<T>(a.q_out, b, s, hh)) + col);
        }
      } else if (a.copy_k_tail) {
        rope_copy_raw<T, V>(rope_head_ptr<T>(a.k, b, s, hh - a.hq) + col,
                            const_cast<T*>(rope_head_ptr<T>(a.k_out, b, s, hh - a.hq)) + col);
      }
    }
  }
}

/// KH heads per thread; at least kMinBlocks blocks resident per multiprocessor (the register
/// budget); kGptj: the style (a.gptj), fixed at compile time. kSingle: the launcher checked
/// that the grid covers every token once (gridDim.x * bz >= T), that bx covers every pair
/// vector (bx >= h / V) and that gridDim.y * by * KH >= Hq + Hk, so each thread runs its token,
/// pair vector and heads once, with no loops (their loop-invariant state would cost registers).
template <typename T, int V, int KH, int kMinBlocks, bool kGptj, bool kSingle>
__global__ void __launch_bounds__(core::kRopeBlockThreads, kMinBlocks)
    rope_kernel(const RopeKernelArgs a) {
  const int nvp = a.half / V;
  const bool any_tail = a.head_dim > 2 * a.half && (a.copy_q_tail || a.copy_k_tail);
  const int hstep = rope_head_step<KH>();
  const int hfirst = rope_first_head<KH>();
  griddep_wait();
  if constexpr (kSingle) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
    if (t >= a.tokens) return;
    int64_t b, s;
    rope_token_coords(a, t, b, s);
    if (static_cast<int>(threadIdx.x) < nvp) {
      rope_pairs_of_token<T, V, KH, kGptj, true>(a, b, s, threadIdx.x, hfirst, hstep);
    }
    if (any_tail) rope_copy_tail<T, V, KH>(a, b, s);
  } else {
    const int64_t tstep = static_cast<int64_t>(gridDim.x) * blockDim.z;
    for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z; t < a.tokens;
         t += tstep) {
      int64_t b, s;
      rope_token_coords(a, t, b, s);
      for (int j = threadIdx.x; j < nvp; j += blockDim.x) {
        rope_pairs_of_token<T, V, KH, kGptj, false>(a, b, s, j, hfirst, hstep);
      }
      if (any_tail) rope_copy_tail<T, V, KH>(a, b, s);
    }
  }
}

}  // namespace ropenorm::cuda
