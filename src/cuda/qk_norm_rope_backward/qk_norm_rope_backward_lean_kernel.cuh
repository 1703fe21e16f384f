// Lean fused QK-norm + RoPE backward kernel: the forward's lean layout (a head per thread row, 8
// pairs per lane) over a persistent grid of token chunks, with the dw partials in registers, in
// the instances core::qk_bwd_lean_instance picks (compile-time facts, cuda/rope/rope_lean_spec.h;
// every instance the same bits). Launched only as core::plan_qk_norm_rope_backward_lean describes.
//
// Ownership (grid (gx, head_groups), block (g, rows), g = h / 8 a power of two <= 32):
//  - Tokens: block (bx, by) owns tokens bx, bx + gx, bx + 2 gx, ... (interleaved over the grid,
//    cuda/rope/rope_block_tokens.cuh), one per round; each thread loads the next token's position
//    with the current token's data, so a round's cos/sin loads need not wait for its position.
//  - Head: thread row y owns head by rows + y (q heads first, then k) of each of those tokens;
//    rows past Hq + Hk have no head and only take part in the final reduction. A row's g lanes
//    are consecutive and aligned in their warp (row y is threads y g .. y g + g - 1).
//  - Channels: lane x owns the general kernel's slot x (KS = 1): neox channels 8x .. 8x + 7 and
//    h + 8x .. h + 8x + 7, gptj 16x .. 16x + 15, so a rotation pair never leaves its lane. The
//    block stages (w + o) of q and k in shared memory once (fp32, [2, D]; thread i stores
//    elements i, i + threads, ...), and each lane reads its 16 per token; its 16 fp32 dw
//    partials stay in registers across the tokens. (The weights in registers instead spilled
//    and measured slower: bench/experiments/qk_backward_lean.cu.)
//  - Reductions: the general kernel's (qk_norm_rope_backward_kernels.cuh) with G = g, KS = 1:
//    the same per-lane order of the sum of squares (when r is recomputed) and of sum(g * xh),
//    the same butterfly, over the row's lanes only. So dq and dk have that kernel's bits.
//  - dw: at the end each thread writes its 16 partials to shared memory [rows, D]; thread c <
//    2 D adds column c (c < D: over the block's q rows, else over its k rows) in row order and
//    writes the block's partial row (blockIdx.y gx + blockIdx.x of the [2, gx head_groups, D]
//    workspace); the column sum kernel adds the rows in block order. The order of the fp32
//    additions differs from the general kernel's, so dw may differ from it in the last bits.
// Every dq / dk element is written by exactly the lane that read the matching dout element, after
// the head's reductions (which follow all of its loads), so dq == dq_out (in place) is safe. The
// kernel waits for the previous kernel on the stream before its first global memory access.
#pragma once

#include <cstdint>

#include "core/qk_norm_rope_backward_plan.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_args.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_kernels.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_math.cuh"
#include "cuda/rms_norm/rms_norm_math.cuh"
#include "cuda/rope/rope_block_tokens.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "cuda/rope/rope_lean_spec.h"
#include "cuda/rope/rope_math.cuh"

namespace ropenorm::cuda {

/// Lean QK-norm + RoPE backward of style kGptj with cos/sin tables of dtype C and the facts Spec
/// fixes (rope_lean_spec.h: lanes per head, positions, cos/sin rows; the weights are always
/// staged, so a spec may not fix their dtype).
template <typename T, typename C, bool kGptj, typename Spec = LeanAny>
__global__ void __launch_bounds__(core::kQkBwdLeanThreads, core::kQkBwdLeanMinBlocks)
    qk_norm_rope_backward_lean_kernel(const QkNormRopeBackwardArgs args) {
  static_assert(!Spec::kWeightsAsData, "the backward stages the weights in any dtype");
  constexpr int V = core::kRopeLeanVec;
  __shared__ __align__(16) float part[core::kQkBwdLeanThreads * 2 * V];  // [rows, D] dw
  constexpr int kMaxHeadDim = 2 * 32 * V;                                // 32 lanes of 8 pairs
  __shared__ __align__(16) float wf[2 * kMaxHeadDim];                    // (w + o) of q, of k
  const RopeKernelArgs& a = args.rope;
  const int g = Spec::kLanes != 0 ? Spec::kLanes : static_cast<int>(blockDim.x);
  const int d_head = Spec::kLanes != 0 ? 2 * V * Spec::kLanes : a.head_dim;  // R = D
  const int lane = (threadIdx.y * g + threadIdx.x) & 31;
  const unsigned mask = g == 32 ? 0xffffffffu : ((1u << g) - 1u) << (lane & ~(g - 1));
  const int heads = a.hq + a.hk;
  const int hh = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  const bool is_q = hh < a.hq;
  const int local = is_q ? hh : hh - a.hq;
  const int i0 = static_cast<int>(threadIdx.x) * V;
  const int oa = kGptj ? 2 * i0 : i0;
  const int ob = kGptj ? 2 * i0 + V : d_head / 2 + i0;
  const float* rs = is_q ? args.q_rstd : args.k_rstd;
  const int64_t rs_heads = is_q ? a.hq : a.hk;
  float acc_a[V] = {}, acc_b[V] = {};

  griddep_wait();
  const int tid = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x * blockDim.y);
  qk_bwd_stage_weights(args, wf, tid, nthreads);
  __syncthreads();
  if (hh < heads) {
    const float* w = wf + (is_q ? 0 : d_head);
    const TokenStep st = block_token_step(a);
    TokenCursor cur = first_block_token(a);
    int64_t p_next = cur.valid(a) ? rope_lean_position<Spec>(a, cur.b, cur.s) : 0;
    while (cur.valid(a)) {
      const int64_t b = cur.b, s = cur.s;
      const int64_t p = p_next;
      const T* x = rope_head_ptr<T>(is_q ? a.q : a.k, b, s, local);
      const T* dy = rope_head_ptr<T>(is_q ? args.gq : args.gk, b, s, local);
      float r = rs != nullptr ? rs[cur.t(a) * rs_heads + local] : 0.0f;
      RawVec<T, V> rxa, rxb, rga, rgb;
      load_raw<T, V>(x + oa, rxa);
      load_raw<T, V>(x + ob, rxb);
      load_raw<T, V>(dy + oa, rga);
      load_raw<T, V>(dy + ob, rgb);
      int64_t co, so;
      rope_lean_cos_sin_rows<Spec>(a, p, b, s, co, so);
      float c[V], sn[V];
      load_pack<C, V>(static_cast<const C*>(a.cos) + co + i0, c);
      load_pack<C, V>(static_cast<const C*>(a.sin) + so + i0, sn);
      rope_apply_direction<V>(a, sn);
      T* dx = const_cast<T*>(rope_head_ptr<T>(is_q ? a.q_out : a.k_out, b, s, local));
      cur.next(st, a.seq);  // the block's next token: its position in flight with this one's loads
      if (cur.valid(a)) p_next = rope_lean_position<Spec>(a, cur.b, cur.s);
      float xa[V], xb[V], ga[V], gb[V];
      widen<T, V>(rxa, xa);
      widen<T, V>(rxb, xb);
      widen<T, V>(rga, ga);
      widen<T, V>(rgb, gb);

      if (rs == nullptr) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < V; ++j) ss = __fmaf_rn(xa[j], xa[j], ss);
#pragma unroll
        for (int j = 0; j < V; ++j) ss = __fmaf_rn(xb[j], xb[j], ss);
        r = rms_rstd(lane_group_sum(ss, mask, g), d_head, args.eps);
      }
      rope_rotate_regs<V, kGptj>(ga, gb, c, sn);  // g_n = rope_inverse(dout)

      float wa[V], wb[V];
      load_pack<float, V>(w + oa, wa);
      load_pack<float, V>(w + ob, wb);
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        xa[j] *= r;
        xb[j] *= r;
        dot = __fmaf_rn(ga[j] * wa[j], xa[j], dot);
        dot = __fmaf_rn(gb[j] * wb[j], xb[j], dot);
      }
      const float mean = qk_bwd_mean(lane_group_sum(dot, mask, g), d_head);
      float da[V], db[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        da[j] = qk_bwd_dx(ga[j] * wa[j], xa[j], mean, r);
        db[j] = qk_bwd_dx(gb[j] * wb[j], xb[j], mean, r);
        acc_a[j] = qk_bwd_dw_add(acc_a[j], ga[j], xa[j]);
        acc_b[j] = qk_bwd_dw_add(acc_b[j], gb[j], xb[j]);
      }
      store_pack<T, V>(dx + oa, da);
      store_pack<T, V>(dx + ob, db);
    }
  }

  if (args.partials == nullptr) return;  // uniform: no dw wanted
  float* row = part + threadIdx.y * d_head;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    row[oa + j] = acc_a[j];
    row[ob + j] = acc_b[j];
  }
  __syncthreads();
  const int64_t blocks = static_cast<int64_t>(gridDim.x) * gridDim.y;
  const int64_t blk = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  for (int cc = tid; cc < 2 * d_head; cc += nthreads) {
    const int which = cc < d_head ? 0 : 1;
    const int ch = cc - which * d_head;
    float sum = 0.0f;
    for (int y = 0; y < static_cast<int>(blockDim.y); ++y) {
      const int h2 = static_cast<int>(blockIdx.y * blockDim.y) + y;
      if (h2 < heads && (h2 < a.hq) == (which == 0)) sum += part[y * d_head + ch];
    }
    args.partials[(which * blocks + blk) * d_head + ch] = sum;
  }
}

}  // namespace ropenorm::cuda
