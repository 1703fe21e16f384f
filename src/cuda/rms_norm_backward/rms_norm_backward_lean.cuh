// RMSNorm backward lean kernel: rows that need none of the ring kernel's generality (a plan's
// core::RmsNormBwdPlan::lean), loaded straight into registers instead of through a shared-memory
// ring, in a fraction of the ring kernel's code (a few rows' launch waits on its instruction
// fetches).
//
// Ownership (the ring kernel's, so every row's dx and every partial row keep its bits):
//  - block (T) owns rows blockIdx.x, blockIdx.x + gridDim.x, ... on the grid the ring kernel
//    would have (the launcher sizes it from the ring kernel's residency); thread t owns vectors
//    t, t + T, ... (VPT of them) of each of its rows: columns (t + k * T) * V .. + V - 1, the same
//    in every row (rows start 16-byte aligned and N is a multiple of V: no edge elements).
//  - the thread loads its own dy, x (and ds) vectors of a row, its weight vectors once, sums
//    g * x (and x^2 when r is recomputed) in the ring kernel's order, reduces them over the block
//    (block_sum), then writes the dx (and dresidual) elements it read and adds their dy * xh into
//    its fp32 register partials; dx may alias dy (or ds) exactly.
//  - at the end the block writes its partial row, partials[blockIdx.x, :], each thread its own
//    columns.
#pragma once

#include <cstdint>

#include "core/rms_norm_backward_plan.h"
#include "core/row_layout.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_args.h"
#include "cuda/rms_norm_backward/rms_norm_backward_kernels.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_math.cuh"

namespace ropenorm::cuda {

/// The weight factors (w + o) of a vector held as stored.
template <typename T, int V>
__device__ __forceinline__ void lean_bwd_factors(const RawVec<T, V>& w, float offset,
                                                 float (&f)[V]) {
  widen<T, V>(w, f);
#pragma unroll
  for (int i = 0; i < V; ++i) f[i] += offset;
}

/// Lean backward kernel for rows of T (dy, x or s, the weight, dx and dresidual all of T),
/// 16-byte aligned, N a multiple of V, at most one leading dimension, a weight, dw wanted.
/// kPlain: the call is plain (core::bwd_plain_call: the rstd saved, no ds, no dresidual); else
/// the rstd, ds and dresidual are tested at run time (the fused add, and the plain op with r
/// recomputed). Per row:
///   g = dy * (w + o), c = r * sum(g * x) / N, dx = r * (g - x * r * c) (+ ds),
///   partials[blockIdx.x, col] += dy * x * r.
template <typename T, int V, int VPT, bool kPlain>
__global__ void __launch_bounds__(core::kBwdLeanMaxThreads)
    rms_norm_bwd_lean_kernel(const RmsNormBwdKernelArgs a) {
  __shared__ float scratch[32];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int nbody = static_cast<int>(a.n / V);
  const bool recompute = !BwdParts<kPlain>::rstd_saved(a);
  const bool has_ds = BwdParts<kPlain>::ds(a);
  const bool has_dres = BwdParts<kPlain>::dres(a);
  float acc[VPT][V];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
#pragma unroll
    for (int i = 0; i < V; ++i) acc[k][i] = 0.0f;
  }
  griddep_wait();
  griddep_launch_dependents();
  RawVec<T, V> w[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) load_raw<T, V>(static_cast<const T*>(a.weight) + j * V, w[k]);
  }

#pragma unroll 1
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const T* dy = static_cast<const T*>(a.dy) + a.dy_rows.lead_offset(row);
    const T* x = static_cast<const T*>(a.x) + a.x_rows.lead_offset(row);
    RawVec<T, V> dy_raw[VPT], x_raw[VPT], ds_raw[kPlain ? 1 : VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nbody) {
        load_raw<T, V>(dy + j * V, dy_raw[k]);
        load_raw<T, V>(x + j * V, x_raw[k]);
      }
    }
    if constexpr (!kPlain) {
      if (has_ds) {
        const T* ds = static_cast<const T*>(a.ds) + a.ds_rows.lead_offset(row);
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          const int j = tid + k * nthreads;
          if (j < nbody) load_raw<T, V>(ds + j * V, ds_raw[k]);
        }
      }
    }
    const float saved_r = recompute ? 0.0f : a.rstd[row];

    // First look: sum of g * x (and of x^2 when r is recomputed), in the ring kernel's order.
    float sum_gx = 0.0f, sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (tid + k * nthreads < nbody) {
        float dyv[V], xv[V], f[V];
        widen<T, V>(dy_raw[k], dyv);
        widen<T, V>(x_raw[k], xv);
        lean_bwd_factors<T, V>(w[k], a.w_offset, f);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          sum_gx += rms_bwd_g(dyv[i], f[i]) * xv[i];
          if (recompute) sum_sq += xv[i] * xv[i];
        }
      }
    }
    float r, c;
    bwd_row_scalars<false, kPlain>(a, sum_gx, sum_sq, saved_r, scratch, &r, &c);

    // Second look: dx (+ ds), and dy * xh into the partials.
    T* dx = static_cast<T*>(a.dx) + a.dx_rows.lead_offset(row);
    T* dres = has_dres ? static_cast<T*>(a.dres) + a.dres_rows.lead_offset(row) : nullptr;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nbody) {
        float dyv[V], xv[V], f[V], out[V];
        widen<T, V>(dy_raw[k], dyv);
        widen<T, V>(x_raw[k], xv);
        lean_bwd_factors<T, V>(w[k], a.w_offset, f);
        rms_bwd_vector_dx<V>(dyv, xv, f, r, c, out,
                             [&](int i, float xh) { acc[k][i] += rms_bwd_dw_term(dyv[i], xh); });
        if constexpr (!kPlain) {
          if (has_ds) {
            float dsv[V];
            widen<T, V>(ds_raw[k], dsv);
#pragma unroll
            for (int i = 0; i < V; ++i) out[i] += dsv[i];
          }
        }
        store_pack<T, V>(dx + j * V, out);
        if (has_dres) store_pack<T, V>(dres + j * V, out);
      }
    }
  }

  float* part = a.partials + static_cast<int64_t>(blockIdx.x) * a.n;
  bwd_store_partials<V, VPT>(part, false, static_cast<int>(a.lanes), 0, nbody, 0, tid, nthreads,
                             acc, 0.0f);
}

}  // namespace ropenorm::cuda
