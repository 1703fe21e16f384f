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
// <= 32, h = R / 2 a multiple of 8):
//  - Token: block blockIdx.x owns token t = blockIdx.x, then every gridDim.x-th token. Every
//    lane reads the token's position and its pairs' c_i, s_i once and reuses them for every head
//    it processes (a lane's channels are the same in every head).
//  - Head vector: group j of the block's gpb groups of G = D / 8 lanes owns heads j, j + gpb,
//    ... of the token's Hq + Hk heads (q first, then k), two at a time (both loaded before
//    either is computed).
//  - Channels: lane l of a group owns the 8 contiguous channels 8l .. 8l + 7 (one 16-byte load
//    and store). The weight factors (w + o) of wq and wk are staged once per block in shared
//    memory as fp32 (every thread writes a strided share, then one barrier). neox: the partner
//    of channel c < h is c + h, held by lane l + h / 8 (and back); the lanes exchange their
//    normalised values with __shfl_sync, so each lane rotates its own channels. gptj: pairs
//    (2i, 2i + 1) lie inside a lane. Channels >= R pass through.
//  - rms: lane's 8 squares in a fixed order, then a butterfly over the G lanes (every lane gets
//    the same bits). Lane 0 of the group stores r.
// Each lane writes exactly the channels it read, after the whole head was read (the shuffles
// carry values in registers), so in place is safe.
#pragma once

#include <cstdint>

#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_args.h"
#include "cuda/rms_norm/rms_norm_math.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_math.cuh"

namespace ropenorm::cuda {

/// Threads per block of the fused kernel at most.
constexpr int kQkNormRopeMaxThreads = 256;
/// Channels per lane of the vector kernel (one 16-byte access of a 16-bit type).
constexpr int kQkVecChannels = 8;
/// Threads per block of the vector kernel at most.
constexpr int kQkVecThreads = 256;
/// Largest head_dim of the vector kernel (32 lanes of 8 channels).
constexpr int kQkVecMaxDim = 32 * kQkVecChannels;

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
__global__ void __launch_bounds__(kQkNormRopeMaxThreads)
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
    const int64_t b = t / a.seq;
    const int64_t s = t - b * a.seq;
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
      for (int off = g >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
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
        if (sub == 0) {
          float* rs = is_q ? args.q_rstd : args.k_rstd;
          const int nh = is_q ? a.hq : a.hk;
          if (rs != nullptr) rs[t * nh + local] = r;
        }
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kQkVecThreads) qk_norm_rope_vec_kernel(const QkNormRopeArgs args) {
  constexpr int E = kQkVecChannels;
  constexpr unsigned kFull = 0xffffffffu;
  const RopeKernelArgs& a = args.rope;
  const int g = args.group;  // D / 8 lanes per head vector
  const int lane = threadIdx.x & 31;
  const int sub = lane & (g - 1);
  const int c0 = sub * E;
  const bool rotary = c0 < 2 * a.half;
  const bool first = c0 < a.half;
  const int hl = a.half / E;
  const int partner = a.gptj || !rotary ? lane : (lane & ~(g - 1)) | (first ? sub + hl : sub - hl);
  const int i0 = a.gptj ? c0 / 2 : (first ? c0 : c0 - a.half);
  const int heads = a.hq + a.hk;
  const int gpb = blockDim.x / g;
  const int gi = threadIdx.x / g;

  __shared__ __align__(16) float w_smem[2][kQkVecMaxDim];
  griddep_wait();
  for (int j = threadIdx.x; j < a.head_dim; j += blockDim.x) {
    w_smem[0][j] = load_dyn(args.wq, args.wq_dtype, j) + args.weight_offset;
    w_smem[1][j] = load_dyn(args.wk, args.wk_dtype, j) + args.weight_offset;
  }
  __syncthreads();

  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const int64_t b = t / a.seq;
    const int64_t s = t - b * a.seq;
    // This lane's c_i and s_i, once per token (pass-through lanes keep 1 and 0, unused).
    float cc[E], sn[E];
#pragma unroll
    for (int i = 0; i < E; ++i) {
      cc[i] = 1.0f;
      sn[i] = 0.0f;
    }
    if (rotary) {
      const int64_t p = a.source == RopeSource::kGathered ? 0 : rope_position(a, b, s);
      if (a.gptj) {
        float c4[E / 2], s4[E / 2];
        rope_cos_sin<E / 2>(a, p, b, s, i0, c4, s4);
#pragma unroll
        for (int k = 0; k < E / 2; ++k) {
          cc[k] = c4[k];
          sn[k] = s4[k];
        }
      } else {
        rope_cos_sin<E>(a, p, b, s, i0, cc, sn);
      }
    }

    for (int h0 = gi; h0 < heads; h0 += 2 * gpb) {
      RawVec<T, E> xr[2];
      int hh[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        hh[u] = h0 + u * gpb;
#pragma unroll
        for (int i = 0; i < E; ++i) xr[u].v[i] = 0;
        if (hh[u] < heads) {
          const bool is_q = hh[u] < a.hq;
          const T* x = rope_head_ptr<T>(is_q ? a.q : a.k, b, s, is_q ? hh[u] : hh[u] - a.hq);
          load_raw<T, E>(x + c0, xr[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float x[E];
        widen<T, E>(xr[u], x);
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < E; ++i) ss = __fmaf_rn(x[i], x[i], ss);
        for (int off = g >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(kFull, ss, off);
        const float r = rms_rstd(ss, a.head_dim, args.eps);
        const bool is_q = hh[u] < a.hq;
        const float4* w4 = reinterpret_cast<const float4*>(&w_smem[is_q ? 0 : 1][c0]);
        const float4 wa = w4[0], wb = w4[1];
        const float w[E] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
        float n[E], y[E];
#pragma unroll
        for (int i = 0; i < E; ++i) n[i] = rms_apply_exact(x[i], r, w[i]);
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
            const float pn = __shfl_sync(kFull, n[i], partner);
            y[i] = first ? rope_diff_of_products(n[i], cc[i], pn, sn[i])
                         : rope_diff_of_products(pn, sn[i], -n[i], cc[i]);
            if (!rotary) y[i] = n[i];
          }
        }
        if (hh[u] < heads) {
          const int local = is_q ? hh[u] : hh[u] - a.hq;
          T* out = const_cast<T*>(rope_head_ptr<T>(is_q ? a.q_out : a.k_out, b, s, local));
          store_pack<T, E>(out + c0, y);
          float* rs = is_q ? args.q_rstd : args.k_rstd;
          if (sub == 0 && rs != nullptr) rs[t * (is_q ? a.hq : a.hk) + local] = r;
        }
      }
    }
  }
}

}  // namespace ropenorm::cuda
