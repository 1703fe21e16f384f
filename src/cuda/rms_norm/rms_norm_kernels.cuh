// RMSNorm forward kernels (plain and fused residual add).
//
// Ownership:
//  - rows kernel, kWarp: block (32, R); warp threadIdx.y owns rows blockIdx.x * R + threadIdx.y,
//    then every gridDim.x * R-th row (a persistent grid); lane l owns vectors l, l + 32, ...
//    (VPT of them) of each of its rows.
//  - rows kernel, block path: block (T); the block owns rows blockIdx.x, blockIdx.x + gridDim.x,
//    ...; thread t owns vectors t, t + T, ... (VPT of them).
//    Vectors are aligned per row: the first p elements (p = elements up to the row's first
//    16-byte boundary) and the last (n - p) % V elements are "edge" elements, one per thread
//    0 .. E-1, loaded and stored as scalars; vector j covers columns p + j*V ... p + j*V + V-1.
//    In both, a thread's elements of the next row are loaded (raw, in registers) while the
//    current row is reduced and written, and each element of y (and s) is written by exactly
//    the thread that read the matching x (and residual) element, after reading it, so y may
//    alias x and residual_out may alias residual exactly.
//  - Weight factors (w + o), fp32, are staged once per block in shared memory when the row fits
//    (n <= kSmemWeightMax); every thread of the block writes a strided share, then the block
//    synchronises once.
//  - two-pass kernel (rows too wide for registers): the block owns row blockIdx.x (then strides
//    by gridDim.x); thread t loops over vectors t, t + 1024, ...; pass one sums squares (and
//    writes s), pass two re-reads its own elements and writes y.
// Thread 0 / lane 0 writes the row's rstd.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/rms_norm_plan.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm/rms_norm_args.h"
#include "cuda/rms_norm/rms_norm_math.cuh"

namespace ropenorm::cuda {

template <typename Tx, typename Tr>
using NormInputT = std::conditional_t<std::is_same_v<Tr, NoResidual>, Tx, Tr>;

/// Split of one row into p leading edge elements, nbody aligned vectors and the tail.
template <typename T, int V>
__device__ __forceinline__ int row_phase(const T* row, int64_t n) {
  if constexpr (V == 1) {
    return 0;
  } else {
    const int p = static_cast<int>(((16u - (reinterpret_cast<uintptr_t>(row) & 15u)) & 15u) /
                                   sizeof(T));
    return p > n ? static_cast<int>(n) : p;
  }
}

/// Raw registers of one row's share for one thread: x (and residual) vectors, one edge element,
/// and the row's alignment split (p leading edge elements, nbody aligned vectors).
template <typename Tx, typename Tr, int V, int VPT>
struct RowShare {
  using TrStore = std::conditional_t<std::is_same_v<Tr, NoResidual>, Tx, Tr>;
  static constexpr bool kFused = !std::is_same_v<Tr, NoResidual>;
  RawVec<Tx, V> x[VPT];
  RawVec<TrStore, V> r[kFused ? VPT : 1];
  Tx xe;
  TrStore re;
  int p;
  int nbody;
};

/// Column of edge element e (0 <= e < E): the p leading ones, then the tail after the body.
__device__ __forceinline__ int64_t edge_col(int e, int p, int nbody, int v) {
  return e < p ? e : static_cast<int64_t>(p) + static_cast<int64_t>(nbody) * v + (e - p);
}

/// Weight factor (w + o) for a column: shared memory, else global (scalar, L1-cached), else 1.
__device__ __forceinline__ float weight_factor(const RmsNormKernelArgs& a, const float* w_smem,
                                               int64_t col) {
  if (w_smem != nullptr) return w_smem[col];
  if (a.weight != nullptr) return load_dyn(a.weight, a.w_dtype, col) + a.w_offset;
  return 1.0f;
}

/// hf_llama or exact output value for one element, before the final rounding.
template <typename Tnorm>
__device__ __forceinline__ float rms_output(const RmsNormKernelArgs& a, float v, float rstd,
                                            float w) {
  return a.rounding == Rounding::kHfLlama ? rms_apply_hf(round_through<Tnorm>(v * rstd), w)
                                          : rms_apply_exact(v, rstd, w);
}

/// Issues the loads of one row's share: body vectors j = tid + k * nthreads < nbody, and edge
/// element tid when tid < E.
template <typename Tx, typename Tr, int V, int VPT>
__device__ __forceinline__ void load_share(const RmsNormKernelArgs& a, int64_t row, int tid,
                                           int nthreads, RowShare<Tx, Tr, V, VPT>& sh) {
  const Tx* x = static_cast<const Tx*>(a.x) + a.x_rows.offset(row);
  const int p = row_phase<Tx, V>(x, a.n);
  sh.p = p;
  sh.nbody = static_cast<int>((a.n - p) / V);
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(sh.nbody) * V);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < sh.nbody) load_raw<Tx, V>(x + p + static_cast<int64_t>(j) * V, sh.x[k]);
  }
  if (tid < edges) sh.xe = x[edge_col(tid, p, sh.nbody, V)];
  if constexpr (RowShare<Tx, Tr, V, VPT>::kFused) {
    const Tr* r = static_cast<const Tr*>(a.residual) + a.r_rows.offset(row);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < sh.nbody) load_raw<Tr, V>(r + p + static_cast<int64_t>(j) * V, sh.r[k]);
    }
    if (tid < edges) sh.re = r[edge_col(tid, p, sh.nbody, V)];
  }
}

/// Reduces and writes one row whose share is in registers.
template <typename Tx, typename Tr, int V, int VPT, bool kWarp>
__device__ __forceinline__ void finish_row(const RmsNormKernelArgs& a, int64_t row, int tid,
                                           int nthreads, const float* w_smem, float* scratch,
                                           const RowShare<Tx, Tr, V, VPT>& sh) {
  using Tnorm = NormInputT<Tx, Tr>;
  constexpr bool kFused = RowShare<Tx, Tr, V, VPT>::kFused;
  const int p = sh.p, nbody = sh.nbody;
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
  const bool has_edge = tid < edges;
  const int64_t e_col = has_edge ? edge_col(tid, p, nbody, V) : 0;
  Tnorm* s_row = nullptr;
  if constexpr (kFused) s_row = static_cast<Tnorm*>(a.residual_out) + a.ro_rows.offset(row);
  float v[VPT][V];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) {
      widen<Tx, V>(sh.x[k], v[k]);
      if constexpr (kFused) {
        float r[V];
        widen<Tr, V>(sh.r[k], r);
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = round_through<Tr>(v[k][i] + r[i]);
        store_pack<Tr, V>(s_row + p + static_cast<int64_t>(j) * V, v[k]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[k][i] = 0.0f;
    }
  }
  float ve = 0.0f;
  if (has_edge) {
    ve = to_float(sh.xe);
    if constexpr (kFused) {
      ve = round_through<Tr>(ve + to_float(sh.re));
      s_row[e_col] = from_float<Tr>(ve);
    }
  }
  float sum_sq = ve * ve;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
#pragma unroll
    for (int i = 0; i < V; ++i) sum_sq += v[k][i] * v[k][i];
  }
  sum_sq = kWarp ? warp_sum(sum_sq) : block_sum(sum_sq, scratch);
  const float rstd = rms_rstd(sum_sq, a.n, a.eps);
  if (a.rstd != nullptr && tid == 0) a.rstd[row] = rstd;
  const int64_t y_off = a.y_rows.offset(row);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) {
      const int64_t col = p + static_cast<int64_t>(j) * V;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        v[k][i] = rms_output<Tnorm>(a, v[k][i], rstd, weight_factor(a, w_smem, col + i));
      }
      store_pack_dyn<V>(a.y, a.y_dtype, y_off + col, v[k]);
    }
  }
  if (has_edge) {
    float out[1] = {rms_output<Tnorm>(a, ve, rstd, weight_factor(a, w_smem, e_col))};
    store_pack_dyn<1>(a.y, a.y_dtype, y_off + e_col, out);
  }
}

/// Stages (w + o) in shared memory as fp32; every thread of the block takes part.
__device__ __forceinline__ void stage_weight(const RmsNormKernelArgs& a, float* w_smem) {
  const int nthreads = blockDim.x * blockDim.y;
  const int flat = threadIdx.y * blockDim.x + threadIdx.x;
  for (int64_t j = flat; j < a.n; j += nthreads) {
    w_smem[j] = load_dyn(a.weight, a.w_dtype, j) + a.w_offset;
  }
}

/// Register-resident, persistent, one-row-ahead kernel: warp per row (kWarp) or block per row.
/// Dynamic shared memory: 32 floats of scratch, then n floats of weight when a.weight_in_smem.
template <typename Tx, typename Tr, int V, int VPT, bool kWarp>
__global__ void __launch_bounds__(core::kRowsMaxThreads) rms_norm_rows_kernel(const RmsNormKernelArgs a) {
  extern __shared__ float smem[];
  float* scratch = smem;
  float* w_smem = a.weight_in_smem ? smem + 32 : nullptr;
  const int tid = threadIdx.x;
  const int nthreads = kWarp ? 32 : blockDim.x;
  const int64_t step = kWarp ? static_cast<int64_t>(gridDim.x) * blockDim.y : gridDim.x;
  int64_t row = kWarp ? static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y : blockIdx.x;

  RowShare<Tx, Tr, V, VPT> sa, sb;
  if (row < a.m) load_share<Tx, Tr, V, VPT>(a, row, tid, nthreads, sa);
  if (w_smem != nullptr) {
    stage_weight(a, w_smem);
    __syncthreads();
  }
  // Two register sets alternate: while one row is reduced and stored, the next one loads.
  while (row < a.m) {
    int64_t next = row + step;
    if (next < a.m) load_share<Tx, Tr, V, VPT>(a, next, tid, nthreads, sb);
    finish_row<Tx, Tr, V, VPT, kWarp>(a, row, tid, nthreads, w_smem, scratch, sa);
    row = next;
    if (row >= a.m) break;
    next = row + step;
    if (next < a.m) load_share<Tx, Tr, V, VPT>(a, next, tid, nthreads, sa);
    finish_row<Tx, Tr, V, VPT, kWarp>(a, row, tid, nthreads, w_smem, scratch, sb);
    row = next;
  }
}

/// Two-pass kernel for rows wider than the register budget (weight read from global memory).
template <typename Tx, typename Tr, int V>
__global__ void __launch_bounds__(1024) rms_norm_two_pass_kernel(const RmsNormKernelArgs a) {
  using Tnorm = NormInputT<Tx, Tr>;
  constexpr bool kFused = !std::is_same_v<Tr, NoResidual>;
  __shared__ float scratch[32];
  const int tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const Tx* x = static_cast<const Tx*>(a.x) + a.x_rows.offset(row);
    const Tr* r = nullptr;
    Tnorm* s_row = nullptr;
    if constexpr (kFused) {
      r = static_cast<const Tr*>(a.residual) + a.r_rows.offset(row);
      s_row = static_cast<Tnorm*>(a.residual_out) + a.ro_rows.offset(row);
    }
    const int64_t y_off = a.y_rows.offset(row);
    const int p = row_phase<Tx, V>(x, a.n);
    const int nbody = static_cast<int>((a.n - p) / V);
    const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
    const int64_t e_col = tid < edges ? edge_col(tid, p, nbody, V) : 0;

    float sum_sq = 0.0f;
    for (int j = tid; j < nbody; j += blockDim.x) {
      const int64_t col = p + static_cast<int64_t>(j) * V;
      float v[V];
      load_pack<Tx, V>(x + col, v);
      if constexpr (kFused) {
        float rv[V];
        load_pack<Tr, V>(r + col, rv);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = round_through<Tr>(v[i] + rv[i]);
        store_pack<Tr, V>(s_row + col, v);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) sum_sq += v[i] * v[i];
    }
    float ve = 0.0f;
    if (tid < edges) {
      ve = to_float(x[e_col]);
      if constexpr (kFused) {
        ve = round_through<Tr>(ve + to_float(r[e_col]));
        s_row[e_col] = from_float<Tr>(ve);
      }
      sum_sq += ve * ve;
    }
    sum_sq = block_sum(sum_sq, scratch);
    const float rstd = rms_rstd(sum_sq, a.n, a.eps);
    if (a.rstd != nullptr && tid == 0) a.rstd[row] = rstd;

    // Pass two re-reads this thread's own elements: x, or the s it wrote.
    for (int j = tid; j < nbody; j += blockDim.x) {
      const int64_t col = p + static_cast<int64_t>(j) * V;
      float v[V];
      if constexpr (kFused) {
        load_pack<Tr, V>(s_row + col, v);
      } else {
        load_pack<Tx, V>(x + col, v);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        v[i] = rms_output<Tnorm>(a, v[i], rstd, weight_factor(a, nullptr, col + i));
      }
      store_pack_dyn<V>(a.y, a.y_dtype, y_off + col, v);
    }
    if (tid < edges) {
      float out[1] = {rms_output<Tnorm>(a, ve, rstd, weight_factor(a, nullptr, e_col))};
      store_pack_dyn<1>(a.y, a.y_dtype, y_off + e_col, out);
    }
  }
}

}  // namespace ropenorm::cuda
