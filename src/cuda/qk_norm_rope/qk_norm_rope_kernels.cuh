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

}  // namespace ropenorm::cuda
