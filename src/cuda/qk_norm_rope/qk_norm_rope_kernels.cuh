// Fused QK-norm + RoPE forward kernel.
//
// Ownership:
//  - Token: block blockIdx.x owns token t = blockIdx.x, then every gridDim.x-th token after it.
//    Every thread reads the token's position (one broadcast load) and, for the rotary pairs it
//    owns, that token's c_i and s_i ONCE; it reuses them for every head it processes.
//  - Head vector: a group of G lanes of one warp (G = a power of two, min(32, D / 2 rounded up);
//    G is fixed by D alone) owns one head vector of q or k; a warp holds 32 / G groups, so it
//    processes 32 / G heads at a time and loops over the Hq + Hk heads (q first, then k) with the
//    block's other warps.
//  - Channels: the D channels form D / 2 slots of two channels. Slot m < h = R / 2 is rotary pair
//    m: channels (m, m + h) for neox, (2m, 2m + 1) for gptj, so a pair's partner always sits in
//    the same lane and no shuffle is needed for the rotation. Slot m >= h is the pass-through
//    pair (R + 2(m - h), R + 2(m - h) + 1). Lane l of a group owns slots l, l + G, ..., at most
//    KS of them (KS = ceil(D / 2 / G), up to 8: 16 values of the head in registers per lane).
//    Consecutive lanes own consecutive slots, so each load and store instruction of a group is
//    coalesced.
//  - rms: each lane sums its squares in a fixed order, then a butterfly over the group's lanes
//    (__shfl_xor_sync): every lane of the group obtains the same bits (fp32 addition is
//    commutative), independent of the data, T and the other heads. Lane 0 of the group stores r.
// Every output element is written by exactly the lane that read the matching input element,
// after all of that head's inputs were read (the reduction precedes every store), so in place
// is safe. Element accesses are scalar (any alignment).
//
// Vector kernel (16-bit q/k, every operand aligned for 8-element vectors, D / 8 a power of two
// <= 32, h = R / 2 a multiple of 8; KH heads per group):
//  - Groups: G = D / 8 consecutive lanes of one warp form a group (G divides 32, so a group never
//    straddles a warp); group j of the block serves token slot z = j / ng and head group
//    u = j % ng (ng = groups per token, args.groups_per_token). Token slot z of block bx owns
//    token t = bx * tpb + z, then every gridDim.x * tpb-th token (tpb = tokens per block).
//  - Heads: head group u owns the KH consecutive heads u * KH .. u * KH + KH - 1 of the token's
//    Hq + Hk heads (q first, then k), then the KH heads ng * KH further on, and so on. All KH
//    heads' loads are issued before the position and cos/sin loads and before any arithmetic.
//  - Channels: lane l of a group owns the 8 contiguous channels 8l .. 8l + 7 (one 16-byte load
//    and store). Each lane loads its 8 weight factors (w + o) of wq and wk once, into registers,
//    and reads its pairs' c_i, s_i once per token. neox: the partner of channel c < h is c + h,
//    held by lane l + h / 8 of the same group (and back); the lanes exchange their normalised
//    values with __shfl_sync, so each lane rotates its own channels. gptj: pairs (2i, 2i + 1)
//    lie inside a lane. Channels >= R pass through.
//  - rms: lane's 8 squares in a fixed order, then a butterfly over the G lanes (every lane gets
//    the same bits). Lane 0 of the group stores r. Every shuffle names only the group's lanes,
//    which take the same branches (same token, same heads).
// Each lane writes exactly the channels it read, after the whole head was read (the shuffles
// carry values in registers), so in place is safe.
//
// Pair kernel (16-bit q/k, every operand and both weights aligned for 8-element vectors,
// R = D, h / 8 a power of two <= 32): the RoPE kernel's layout (core::plan_rope) plus the norm.
//  - Token and heads as the RoPE kernel: threadIdx.z picks the token (grid-stride), thread row
//    blockIdx.y * by + threadIdx.y owns KH consecutive heads (head groups over grid y), all
//    loaded before the position and cos/sin loads.
//  - Channels: lane x of a head's bx = h / 8 lanes (consecutive, aligned in the warp) owns its
//    8 pairs: neox channels 8x .. 8x + 7 and h + 8x .. h + 8x + 7, gptj channels 16x .. 16x + 15
//    (two 16-byte loads and stores per head), so a pair never leaves its lane. Weight factors
//    are read from global memory (L1-resident) per head, as 16-byte vectors.
//  - rms: the lane's 16 squares in a fixed order, then a butterfly over the bx lanes (every lane
//    gets the same bits). Lane 0 stores r.
// Each lane writes exactly the channels it read, after the whole head was read.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/qk_norm_rope_plan.h"
#include "core/rope_plan.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_args.h"
#include "cuda/rms_norm/rms_norm_math.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_math.cuh"

namespace ropenorm::cuda {

// Block sizes and channels per lane come from the planner (core/qk_norm_rope_plan.h).
using core::kQkScalarMaxThreads;
using core::kQkVecChannels;
using core::kQkVecHeadsPerGroup;
using core::kQkVecThreads;
/// Blocks per multiprocessor the vector kernel's register budget is set for.
constexpr int kQkVecMinBlocks = 4;
/// Blocks per multiprocessor the pair kernel's register budget is set for.
constexpr int kQkPairMinBlocks = 3;

/// Where head hh's rstd goes (q heads first, then k): token t's value at base[t * step] of
/// q_rstd or k_rstd (token-major); base is null when that output is not saved.
struct QkRstdSlot {
  float* base;
  int step;
  __device__ __forceinline__ void store(int64_t t, float r) const {
    if (base != nullptr) base[t * step] = r;
  }
  /// The same for a 32-bit token index (the lean run's flat walk): one wide multiply-add.
  __device__ __forceinline__ void store(uint32_t t, float r) const {
    const uint32_t step_bytes = static_cast<uint32_t>(step) * uint32_t{sizeof(float)};
    if (base != nullptr) {
      *reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(base) +
                                static_cast<uint64_t>(t) * step_bytes) = r;
    }
  }
};

/// Head hh's rstd slot (QkRstdSlot).
__device__ __forceinline__ QkRstdSlot qk_rstd_slot(const QkNormRopeArgs& args, int hh) {
  const RopeKernelArgs& a = args.rope;
  const bool is_q = hh < a.hq;
  float* rs = is_q ? args.q_rstd : args.k_rstd;
  return {rs != nullptr ? rs + (is_q ? hh : hh - a.hq) : nullptr, is_q ? a.hq : a.hk};
}

/// Stores r as the rstd of head hh of token t, when that output is saved (QkRstdSlot).
__device__ __forceinline__ void qk_store_rstd(const QkNormRopeArgs& args, int64_t t, int hh,
                                              float r) {
  qk_rstd_slot(args, hh).store(t, r);
}

/// Channel pair (ia, ib) of slot m.
__device__ __forceinline__ void qk_slot_channels(const RopeKernelArgs& a, int m, int* ia, int* ib) {
  if (m < a.half) {
    *ia = a.gptj ? 2 * m : m;
    *ib = a.gptj ? 2 * m + 1 : m + a.half;
  } else {
    *ia = 2 * m;  // = R + 2 (m - h)
    *ib = 2 * m + 1;
  }
}

template <typename T, int KS>
__global__ void __launch_bounds__(kQkScalarMaxThreads)
    qk_norm_rope_kernel(const QkNormRopeArgs args) {
  griddep_wait();
  const RopeKernelArgs& a = args.rope;
  const int g = args.group;
  const int lane = threadIdx.x & 31;
  const int sub = lane & (g - 1);      // lane within the group
  const int groups_per_warp = 32 / g;  // heads processed by a warp at a time
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const int heads = a.hq + a.hk;

  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    int64_t b, s;
    rope_token_coords(a, t, b, s);
    const int64_t p = a.source == RopeSource::kGathered ? 0 : rope_position(a, b, s);

    // This lane's cos/sin, once per token.
    float cs_c[KS], cs_s[KS];
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      const int m = sub + k * g;
      cs_c[k] = 1.0f;
      cs_s[k] = 0.0f;
      if (m < a.half) {
        float c1[1], s1[1];
        rope_cos_sin<1>(a, p, b, s, m, c1, s1);
        cs_c[k] = c1[0];
        cs_s[k] = s1[0];
      }
    }

    for (int base = warp * groups_per_warp; base < heads; base += nwarps * groups_per_warp) {
      const int hh = base + lane / g;
      const bool active = hh < heads;
      const bool is_q = hh < a.hq;
      const int local = is_q ? hh : hh - a.hq;
      const RopeOperand& in_op = is_q ? a.q : a.k;
      const T* x = active ? rope_head_ptr<T>(in_op, b, s, local) : nullptr;

      // Load the head's values (all of them in flight before first use).
      float xa[KS], xb[KS];
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        const int m = sub + k * g;
        xa[k] = 0.0f;
        xb[k] = 0.0f;
        if (active && m < args.slots) {
          int ia, ib;
          qk_slot_channels(a, m, &ia, &ib);
          xa[k] = to_float(x[ia]);
          xb[k] = to_float(x[ib]);
        }
      }

      // Sum of squares: fixed order in the lane, butterfly over the group.
      float ss = 0.0f;
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        ss = __fmaf_rn(xa[k], xa[k], ss);
        ss = __fmaf_rn(xb[k], xb[k], ss);
      }
      ss = lane_group_sum(ss, 0xffffffffu, g);
      const float r = rms_rstd(ss, a.head_dim, args.eps);

      if (active) {
        const void* w = is_q ? args.wq : args.wk;
        const DType wdt = is_q ? args.wq_dtype : args.wk_dtype;
        const RopeOperand& out_op = is_q ? a.q_out : a.k_out;
        T* y = const_cast<T*>(rope_head_ptr<T>(out_op, b, s, local));
#pragma unroll
        for (int k = 0; k < KS; ++k) {
          const int m = sub + k * g;
          if (m < args.slots) {
            int ia, ib;
            qk_slot_channels(a, m, &ia, &ib);
            const float wa = load_dyn(w, wdt, ia) + args.weight_offset;
            const float wb = load_dyn(w, wdt, ib) + args.weight_offset;
            const float na = rms_apply_exact(xa[k], r, wa);
            const float nb = rms_apply_exact(xb[k], r, wb);
            float ya = na, yb = nb;
            if (m < a.half) rope_rotate_pair(na, nb, cs_c[k], cs_s[k], &ya, &yb);
            y[ia] = from_float<T>(ya);
            y[ib] = from_float<T>(yb);
          }
        }
        if (sub == 0) qk_store_rstd(args, t, hh, r);
      }
    }
  }
}

/// One lane's part of one head of the vector kernel: normalise with the group's rstd and the
/// weight factors wq (is_q) or wk, rotate, store; returns the group's rstd r.
template <typename T>
__device__ __forceinline__ float qk_vec_head(const QkNormRopeArgs& args, const RawVec<T, 8>& xr,
                                             bool is_q, const float (&wq)[8], const float (&wk)[8],
                                             const float (&cc)[8], const float (&sn)[8],
                                             unsigned mask, int g, int partner, bool rotary,
                                             bool first, T* out) {
  constexpr int E = kQkVecChannels;
  const RopeKernelArgs& a = args.rope;
  float x[E];
  widen<T, E>(xr, x);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < E; ++i) ss = __fmaf_rn(x[i], x[i], ss);
  ss = lane_group_sum(ss, mask, g);
  const float r = rms_rstd(ss, a.head_dim, args.eps);
  float n[E], y[E];
#pragma unroll
  for (int i = 0; i < E; ++i) n[i] = rms_apply_exact(x[i], r, is_q ? wq[i] : wk[i]);
  if (a.gptj) {
#pragma unroll
    for (int k = 0; k < E / 2; ++k) {
      y[2 * k] = n[2 * k];
      y[2 * k + 1] = n[2 * k + 1];
      if (rotary) {
        rope_rotate_pair(n[2 * k], n[2 * k + 1], cc[k], sn[k], &y[2 * k], &y[2 * k + 1]);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      // The lane's own output of rope_rotate_pair(a, b): a' = a c - b s (first half) or
      // b' = a s + b c (second half), with a, b the pair's values.
      const float pn = __shfl_sync(mask, n[i], partner);
      y[i] = first ? rope_diff_of_products(n[i], cc[i], pn, sn[i])
                   : rope_diff_of_products(pn, sn[i], -n[i], cc[i]);
      if (!rotary) y[i] = n[i];
    }
  }
  store_pack<T, E>(out, y);
  return r;
}

/// A vector-kernel lane's c_i, s_i of token (b, s) (kComputed: the kInvFreq source, else a
/// table): its 8 pairs from i0 for neox; for gptj its 4 pairs (channels 8l .. 8l + 7) in the
/// first 4 entries, the rest left as the caller set them.
template <bool kComputed>
__device__ __forceinline__ void qk_vec_cos_sin(const RopeKernelArgs& a, int64_t b, int64_t s,
                                               int i0, float (&cc)[kQkVecChannels],
                                               float (&sn)[kQkVecChannels]) {
  constexpr int E = kQkVecChannels;
  const int64_t p = !kComputed && a.source == RopeSource::kGathered ? 0 : rope_position(a, b, s);
  const auto fill = [&](auto& c, auto& sv) {
    if constexpr (kComputed) {
      rope_cos_sin_computed(a, p, i0, c, sv);
    } else {
      rope_cos_sin_loaded(a, p, b, s, i0, c, sv);
    }
  };
  if (a.gptj) {
    float c4[E / 2], s4[E / 2];
    fill(c4, s4);
#pragma unroll
    for (int k = 0; k < E / 2; ++k) {
      cc[k] = c4[k];
      sn[k] = s4[k];
    }
  } else {
    fill(cc, sn);
  }
}

/// KH heads per group; at least kMinBlocks blocks resident per multiprocessor.
template <typename T, int KH, int kMinBlocks>
__global__ void __launch_bounds__(kQkVecThreads, kMinBlocks)
    qk_norm_rope_vec_kernel(const QkNormRopeArgs args) {
  constexpr int E = kQkVecChannels;
  const RopeKernelArgs& a = args.rope;
  const int g = args.group;  // D / 8 lanes per head vector
  const int lane = threadIdx.x & 31;
  const int sub = lane & (g - 1);
  const unsigned mask = g == 32 ? 0xffffffffu : ((1u << g) - 1u) << (lane & ~(g - 1));
  const int c0 = sub * E;
  const bool rotary = c0 < 2 * a.half;
  const bool first = c0 < a.half;
  const int hl = a.half / E;
  const int partner = a.gptj || !rotary ? lane : (lane & ~(g - 1)) | (first ? sub + hl : sub - hl);
  const int i0 = a.gptj ? c0 / 2 : (first ? c0 : c0 - a.half);
  const int heads = a.hq + a.hk;
  const int ng = args.groups_per_token;
  const int gi = threadIdx.x / g;
  const int z = gi / ng;
  const int hfirst = (gi - z * ng) * KH;
  const int hstep = ng * KH;
  const int tpb = blockDim.x / (g * ng);

  griddep_wait();
  float wq[E], wk[E];  // element loads: the weights need no alignment
#pragma unroll
  for (int i = 0; i < E; ++i) {
    wq[i] = load_dyn(args.wq, args.wq_dtype, c0 + i) + args.weight_offset;
    wk[i] = load_dyn(args.wk, args.wk_dtype, c0 + i) + args.weight_offset;
  }

  for (int64_t t = static_cast<int64_t>(blockIdx.x) * tpb + z; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * tpb) {
    int64_t b, s;
    rope_token_coords(a, t, b, s);
    const RopeTokenPtrs<T> tp = rope_token_ptrs<T>(a, b, s);
    // This lane's c_i and s_i, once per token (pass-through lanes keep 1 and 0, unused);
    // computed ones before the head loads, loaded ones after them.
    float cc[E], sn[E];
#pragma unroll
    for (int i = 0; i < E; ++i) {
      cc[i] = 1.0f;
      sn[i] = 0.0f;
    }
    const bool computed = a.source == RopeSource::kInvFreq;
    if (rotary && computed) qk_vec_cos_sin<true>(a, b, s, i0, cc, sn);
    for (int h0 = hfirst; h0 < heads; h0 += hstep) {
      RawVec<T, E> xr[KH];
#pragma unroll
      for (int u = 0; u < KH; ++u) {
        const int hh = h0 + u;
        if (hh < heads) load_raw<T, E>(rope_in_head<T>(a, tp, hh) + c0, xr[u]);
      }
      if (h0 == hfirst && rotary && !computed) qk_vec_cos_sin<false>(a, b, s, i0, cc, sn);
#pragma unroll
      for (int u = 0; u < KH; ++u) {
        const int hh = h0 + u;
        if (hh < heads) {
          T* out = rope_out_head<T>(a, tp, hh);
          const float r = qk_vec_head<T>(args, xr[u], hh < a.hq, wq, wk, cc, sn, mask, g, partner,
                                         rotary, first, out + c0);
          if (sub == 0) qk_store_rstd(args, t, hh, r);
        }
      }
    }
  }
}

/// The weights w of head hh's channels oa .. oa + V - 1 (w0) and ob .. (w1), from wq for q
/// heads, wk for k heads: of dtype W when W is given (the caller checked both weights' dtype),
/// else of the dtype the arguments name.
template <int V, typename W = void>
__device__ __forceinline__ void qk_head_weights(const QkNormRopeArgs& args, int hh, int oa, int ob,
                                                float (&w0)[V], float (&w1)[V]) {
  const bool is_q = hh < args.rope.hq;
  const void* w = is_q ? args.wq : args.wk;
  if constexpr (std::is_void_v<W>) {
    const DType wdt = is_q ? args.wq_dtype : args.wk_dtype;
    load_pack_dyn<V>(w, wdt, oa, w0);
    load_pack_dyn<V>(w, wdt, ob, w1);
  } else {
    load_pack<W, V>(static_cast<const W*>(w) + oa, w0);
    load_pack<W, V>(static_cast<const W*>(w) + ob, w1);
  }
}

/// The factors f = w + o of head hh's channels oa .. oa + V - 1 (f0) and ob .. (f1): its weights
/// (qk_head_weights, of dtype W as there) plus the weight offset, one fp32 rounding each.
template <int V, typename W = void>
__device__ __forceinline__ void qk_head_factors(const QkNormRopeArgs& args, int hh, int oa, int ob,
                                                float (&f0)[V], float (&f1)[V]) {
  qk_head_weights<V, W>(args, hh, oa, ob, f0, f1);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    f0[i] += args.weight_offset;
    f1[i] += args.weight_offset;
  }
}

/// One thread's part of a head of one token in the pair and lean kernels: rms over the head's D
/// channels (kD, or the argument block's D when kD is 0; butterfly over the g lanes in mask),
/// (w + o) scaling with the weights weights(w0, w1)
/// yields (called after the butterfly: the pair kernel loads them there, the lean kernel
/// hands over ones it loaded with the data; kFactors: they are the factors w + o already, which
/// the lean run forms once per run (qk_head_factors)), rotation, store at y = out() (the head's
/// output, asked for after the rotation: the pair kernel's register allocation depends on that
/// order); lane 0 hands r to store_r(r) (qk_store_rstd's slot).
template <typename T, int V, bool kGptj, int kD = 0, bool kFactors = false, typename OutFn,
          typename StoreRFn, typename WeightsFn>
__device__ __forceinline__ void qk_pair_head(const QkNormRopeArgs& args, OutFn&& out,
                                             StoreRFn&& store_r, int oa, int ob,
                                             const RopeHeadRegs<T, V>& regs, const float (&c)[V],
                                             const float (&sn)[V], unsigned mask, int g,
                                             WeightsFn&& weights) {
  float x0[V], x1[V];
  widen<T, V>(regs.x0, x0);
  widen<T, V>(regs.x1, x1);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) ss = __fmaf_rn(x0[i], x0[i], ss);
#pragma unroll
  for (int i = 0; i < V; ++i) ss = __fmaf_rn(x1[i], x1[i], ss);
  ss = lane_group_sum(ss, mask, g);
  const float r = rms_rstd(ss, kD != 0 ? kD : args.rope.head_dim, args.eps);
  float w0[V], w1[V];
  weights(w0, w1);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    x0[i] = rms_apply_exact(x0[i], r, kFactors ? w0[i] : w0[i] + args.weight_offset);
    x1[i] = rms_apply_exact(x1[i], r, kFactors ? w1[i] : w1[i] + args.weight_offset);
  }
  rope_rotate_regs<V, kGptj>(x0, x1, c, sn);
  T* y = out();
  store_pack<T, V>(y + oa, x0);
  store_pack<T, V>(y + ob, x1);
  if (threadIdx.x == 0) store_r(r);
}

/// Pair kernel, token t: normalises and rotates the thread's pairs in every head it owns.
template <typename T, int V, int KH, bool kGptj, bool kOneRound>
__device__ __forceinline__ void qk_pair_token(const QkNormRopeArgs& args, int64_t t, int hfirst,
                                              int hstep, unsigned mask) {
  const RopeKernelArgs& a = args.rope;
  int64_t b, s;
  rope_token_coords(a, t, b, s);
  const RopeTokenPtrs<T> tp = rope_token_ptrs<T>(a, b, s);
  rope_head_rounds<T, V, KH, kGptj, kOneRound>(
      a, tp, b, s, threadIdx.x, hfirst, hstep,
      [&](int hh, int oa, int ob, const RopeHeadRegs<T, V>& regs, const float(&c)[V],
          const float(&sn)[V]) {
        qk_pair_head<T, V, kGptj>(
            args, [&] { return rope_out_head<T>(a, tp, hh); },
            [&](float r) { qk_store_rstd(args, t, hh, r); }, oa, ob, regs, c, sn, mask, blockDim.x,
            [&](float(&f0)[V], float(&f1)[V]) { qk_head_weights<V>(args, hh, oa, ob, f0, f1); });
      });
}

/// Pair kernel: KH heads per thread; at least kMinBlocks blocks resident per multiprocessor;
/// kGptj: the style (a.gptj), fixed at compile time; kSingle as for rope_kernel (plan.single:
/// one token and one round of heads per thread, no loops). Block shape from core::plan_rope
/// (bx = h / V exactly, a power of two <= 32).
template <typename T, int V, int KH, int kMinBlocks, bool kGptj, bool kSingle>
__global__ void __launch_bounds__(core::kRopeBlockThreads, kMinBlocks)
    qk_norm_rope_pair_kernel(const QkNormRopeArgs args) {
  const RopeKernelArgs& a = args.rope;
  const int g = blockDim.x;  // lanes per head
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int lane = tid & 31;
  const unsigned mask = g == 32 ? 0xffffffffu : ((1u << g) - 1u) << (lane & ~(g - 1));
  const int hstep = rope_head_step<KH>();
  const int hfirst = rope_first_head<KH>();
  griddep_wait();
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
  if constexpr (kSingle) {
    if (t0 < a.tokens) qk_pair_token<T, V, KH, kGptj, true>(args, t0, hfirst, hstep, mask);
  } else {
    const int64_t tstep = static_cast<int64_t>(gridDim.x) * blockDim.z;
    for (int64_t t = t0; t < a.tokens; t += tstep) {
      qk_pair_token<T, V, KH, kGptj, false>(args, t, hfirst, hstep, mask);
    }
  }
}

}  // namespace ropenorm::cuda
