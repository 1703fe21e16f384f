// Fused QK-norm + RoPE backward kernel: dq, dk and the per-block fp32 partials of dwq and dwk.
//
// Ownership (core/qk_norm_rope_backward_plan.h has the slot layout and the grid):
//  - Tokens: block b owns the contiguous tokens [b C, (b + 1) C); its head vectors are the items
//    (token, head) of those tokens in token-major order, q heads before k heads.
//  - Head vector: a group of G lanes of one warp (G a power of two, fixed by D and V alone) owns
//    one item at a time; group j of the block takes items j, j + groups, j + 2 groups, ... . All
//    lanes of a warp run the same number of rounds, so the group butterflies never diverge.
//  - Channels: lane l of a group owns slots l, l + G, ... (at most KS); a slot is two V-element
//    runs that hold whole rotary pairs (neox: runs i0 and h + i0; gptj: the V pairs interleaved
//    over runs 2 i0 and 2 i0 + V) or pass-through channels, so a rotation pair always sits in one
//    lane and no shuffle is needed for the inverse rotation. Each run is one vector access.
//  - Reductions: the sum of squares (when r is recomputed) and sum(g * xh) are summed by each lane
//    in a fixed order, then by a butterfly over the group's lanes (__shfl_xor_sync): every lane
//    gets the same bits, independent of the data, T and the other heads.
//  - dw: each group keeps fp32 partials of dwq and dwk for the channels of its lanes in shared
//    memory (a lane updates only its own channels, in item order: no races, no atomics); at the
//    end thread c adds column c of the block's groups in group order and writes the block's
//    partial row c of q (c < D) or of k to the workspace. The column sum kernel adds the blocks'
//    rows in block order.
// Every dq / dk element is written by exactly the lane that read the matching dq_out / dk_out
// element, after that head's reductions (which follow all of its loads), so dq == dq_out (in
// place) is safe; x is never written (dq may not alias it: validated).
#pragma once

#include <cstdint>

#include "core/qk_norm_rope_backward_plan.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_args.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_math.cuh"
#include "cuda/rms_norm/rms_norm_math.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_math.cuh"

namespace ropenorm::cuda {

/// Channel offsets of the two runs of slot m (the second is absent when *ob >= D).
template <int V>
__device__ __forceinline__ void qk_bwd_slot_runs(const RopeKernelArgs& a, int rot_slots, int m,
                                                 int* oa, int* ob) {
  if (m < rot_slots) {
    const int i0 = m * V;
    *oa = a.gptj ? 2 * i0 : i0;
    *ob = a.gptj ? 2 * i0 + V : a.half + i0;
  } else {
    *oa = 2 * a.half + 2 * (m - rot_slots) * V;
    *ob = *oa + V;
  }
}

/// a / b for non-negative a and b > 0: one 32-bit division when both fit (the common case), the
/// 64-bit one otherwise.
__device__ __forceinline__ int64_t qk_bwd_div(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  }
  return a / b;
}

/// Stores V consecutive floats to shared memory at p (a run's dw partials), as 16-byte accesses
/// when V is a multiple of 4 (runs start at multiples of V, tables at 16-byte aligned offsets).
/// (store_pack streams to global memory; runs are read back with load_pack<float, V>.)
template <int V>
__device__ __forceinline__ void smem_store_run(float* p, const float (&v)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int c = 0; c < V / 4; ++c) {
      reinterpret_cast<float4*>(p)[c] =
          make_float4(v[4 * c], v[4 * c + 1], v[4 * c + 2], v[4 * c + 3]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = v[i];
  }
}

/// Stages (w + o) of q (wf[0 .. D)) and of k (wf[D .. 2D)) in shared memory as fp32: thread tid
/// of nthreads stores elements tid, tid + nthreads, ... (the caller synchronises).
__device__ __forceinline__ void qk_bwd_stage_weights(const QkNormRopeBackwardArgs& args, float* wf,
                                                     int tid, int nthreads) {
  const int d_head = args.rope.head_dim;
  for (int i = tid; i < 2 * d_head; i += nthreads) {
    wf[i] = (i < d_head ? load_dyn(args.wq, args.wq_dtype, i)
                        : load_dyn(args.wk, args.wk_dtype, i - d_head)) +
            args.weight_offset;
  }
}

template <typename T, int V, int KS>
__global__ void __launch_bounds__(core::kQkBwdThreads)
    qk_norm_rope_backward_kernel(const QkNormRopeBackwardArgs args) {
  extern __shared__ __align__(16) float qkb_smem[];
  const RopeKernelArgs& a = args.rope;
  const int d_head = a.head_dim;
  const int g = args.group;
  const int sub = threadIdx.x & (g - 1);
  const int ngroups = blockDim.x / g;
  const int gi = threadIdx.x / g;
  const bool want_dw = args.partials != nullptr;
  float* wf = qkb_smem;                // [2, D]: wq + o, then wk + o
  float* acc = qkb_smem + 2 * d_head;  // [groups, 2, D]
  float* my_acc = acc + gi * 2 * d_head;
  for (int i = threadIdx.x; i < ngroups * 2 * d_head; i += blockDim.x) acc[i] = 0.0f;

  griddep_wait();
  qk_bwd_stage_weights(args, wf, threadIdx.x, blockDim.x);
  __syncthreads();

  const int heads = a.hq + a.hk;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * args.tokens_per_block;
  const int64_t t_end =
      t0 + args.tokens_per_block < a.tokens ? t0 + args.tokens_per_block : a.tokens;
  const int64_t items = t_end > t0 ? (t_end - t0) * heads : 0;

  for (int64_t base = 0; base < items; base += ngroups) {
    const int64_t it = base + gi;
    const bool active = it < items;
    const int64_t tl = active ? qk_bwd_div(it, heads) : 0;
    const int hh = active ? static_cast<int>(it - tl * heads) : 0;
    const int64_t t = t0 + tl;
    const int64_t b = qk_bwd_div(t, a.seq);
    const int64_t s = t - b * a.seq;
    const bool is_q = hh < a.hq;
    const int local = is_q ? hh : hh - a.hq;

    // Loads: the saved rstd and the position first (they wait under the x and dout loads), then
    // x and dout of this lane's slots, all in flight before first use.
    const float* rs = is_q ? args.q_rstd : args.k_rstd;
    float r_saved = 0.0f;
    int64_t p = 0;
    if (active) {
      if (rs != nullptr) r_saved = rs[t * (is_q ? a.hq : a.hk) + local];
      if (a.source != RopeSource::kGathered) p = rope_position(a, b, s);
    }
    float xa[KS][V], xb[KS][V], ga[KS][V], gb[KS][V];
    if (active) {
      const T* x = rope_head_ptr<T>(is_q ? a.q : a.k, b, s, local);
      const T* dy = rope_head_ptr<T>(is_q ? args.gq : args.gk, b, s, local);
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        const int m = sub + k * g;
        RawVec<T, V> rxa{}, rxb{}, rga{}, rgb{};
        if (m < args.slots) {
          int oa, ob;
          qk_bwd_slot_runs<V>(a, args.rot_slots, m, &oa, &ob);
          load_raw<T, V>(x + oa, rxa);
          load_raw<T, V>(dy + oa, rga);
          if (ob < d_head) {
            load_raw<T, V>(x + ob, rxb);
            load_raw<T, V>(dy + ob, rgb);
          }
        }
        widen<T, V>(rxa, xa[k]);
        widen<T, V>(rxb, xb[k]);
        widen<T, V>(rga, ga[k]);
        widen<T, V>(rgb, gb[k]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < KS; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) xa[k][j] = xb[k][j] = ga[k][j] = gb[k][j] = 0.0f;
      }
    }

    // r: the saved value, or recomputed from the forward's formula (rms_rstd of the sum of
    // squares; per slot a lane adds run a's squares, then run b's: the order of the forward's
    // pair and lean kernels, whose lanes hold the same runs, so where the forward takes them the
    // recomputed r is the saved one bit for bit). The butterfly runs on every lane of the warp
    // whenever either saved rstd is absent.
    float r = r_saved;
    if (args.q_rstd == nullptr || args.k_rstd == nullptr) {
      float ss = 0.0f;
#pragma unroll
      for (int k = 0; k < KS; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) ss = __fmaf_rn(xa[k][j], xa[k][j], ss);
#pragma unroll
        for (int j = 0; j < V; ++j) ss = __fmaf_rn(xb[k][j], xb[k][j], ss);
      }
      ss = lane_group_sum(ss, 0xffffffffu, g);
      if (rs == nullptr) r = rms_rstd(ss, d_head, args.eps);
    }

    // g_n = rope_inverse(dout) on the rotary slots (a.inverse is set: s_i arrives negated).
    if (active) {
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        const int m = sub + k * g;
        if (m < args.rot_slots) {
          float c[V], sn[V];
          rope_cos_sin<V>(a, p, b, s, m * V, c, sn);
          if (a.gptj) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
              float& ra = rope_pick<V>(ga[k], gb[k], 2 * j);
              float& rb = rope_pick<V>(ga[k], gb[k], 2 * j + 1);
              float ya, yb;
              rope_rotate_pair(ra, rb, c[j], sn[j], &ya, &yb);
              ra = ya;
              rb = yb;
            }
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) {
              float ya, yb;
              rope_rotate_pair(ga[k][j], gb[k][j], c[j], sn[j], &ya, &yb);
              ga[k][j] = ya;
              gb[k][j] = yb;
            }
          }
        }
      }
    }

    // xh = x * r (in place of x), then sum(g * xh) with g = g_n * (w + o).
    const float* w = wf + (is_q ? 0 : d_head);
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      const int m = sub + k * g;
      int oa = 0, ob = 0;
      if (m < args.slots) qk_bwd_slot_runs<V>(a, args.rot_slots, m, &oa, &ob);
      const bool has_b = m < args.slots && ob < d_head;
      float wa[V] = {}, wb[V] = {};
      if (m < args.slots) load_pack<float, V>(w + oa, wa);
      if (has_b) load_pack<float, V>(w + ob, wb);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        xa[k][j] *= r;
        xb[k][j] *= r;
        if (m < args.slots) dot = __fmaf_rn(ga[k][j] * wa[j], xa[k][j], dot);
        if (has_b) dot = __fmaf_rn(gb[k][j] * wb[j], xb[k][j], dot);
      }
    }
    dot = lane_group_sum(dot, 0xffffffffu, g);
    const float mean = qk_bwd_mean(dot, d_head);

    if (active) {
      T* dx = const_cast<T*>(rope_head_ptr<T>(is_q ? a.q_out : a.k_out, b, s, local));
      float* wacc = my_acc + (is_q ? 0 : d_head);
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        const int m = sub + k * g;
        if (m < args.slots) {
          int oa, ob;
          qk_bwd_slot_runs<V>(a, args.rot_slots, m, &oa, &ob);
          const bool has_b = ob < d_head;
          float da[V], db[V], wa[V], wb[V] = {};
          load_pack<float, V>(w + oa, wa);
          if (has_b) load_pack<float, V>(w + ob, wb);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            da[j] = qk_bwd_dx(ga[k][j] * wa[j], xa[k][j], mean, r);
            db[j] = qk_bwd_dx(gb[k][j] * wb[j], xb[k][j], mean, r);
          }
          store_pack<T, V>(dx + oa, da);
          if (has_b) store_pack<T, V>(dx + ob, db);
          if (want_dw) {
            float pa[V], pb[V];
            load_pack<float, V>(wacc + oa, pa);
#pragma unroll
            for (int j = 0; j < V; ++j) pa[j] = qk_bwd_dw_add(pa[j], ga[k][j], xa[k][j]);
            smem_store_run<V>(wacc + oa, pa);
            if (has_b) {
              load_pack<float, V>(wacc + ob, pb);
#pragma unroll
              for (int j = 0; j < V; ++j) pb[j] = qk_bwd_dw_add(pb[j], gb[k][j], xb[k][j]);
              smem_store_run<V>(wacc + ob, pb);
            }
          }
        }
      }
    }
  }

  // The block's partial rows: column c of q (c < D) or k, summed over the groups in order.
  __syncthreads();
  if (want_dw) {
    for (int c = threadIdx.x; c < 2 * d_head; c += blockDim.x) {
      float sum = 0.0f;
      for (int j = 0; j < ngroups; ++j) sum += acc[j * 2 * d_head + c];
      const int which = c < d_head ? 0 : 1;
      const int64_t row = static_cast<int64_t>(which) * gridDim.x + blockIdx.x;
      args.partials[row * d_head + (c - which * d_head)] = sum;
    }
  }
}

}  // namespace ropenorm::cuda
