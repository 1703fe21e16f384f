// RMSNorm forward kernels (plain and fused residual add).
//
// Ownership:
//  - kWarpPerRow: block (32, R); warp threadIdx.y owns row blockIdx.x * R + threadIdx.y (then
//    strides by gridDim.x * R); lane l owns vectors l, l + 32, ... of that row (VPT of them).
//  - kBlockPerRow: block (T); the block owns row blockIdx.x (then strides by gridDim.x); thread t
//    owns vectors t, t + T, ... (VPT of them), held in registers between the reduction and the
//    store, so y may alias x and residual_out may alias residual exactly.
//  - kTwoPass: like kBlockPerRow but each thread loops over vectors t, t + 1024, ...; pass one
//    sums squares (and writes s), pass two re-reads its own elements and writes y.
// Thread 0 / lane 0 writes the row's rstd. Every element of y (and s) is written by exactly the
// thread that read the matching x (and residual) element.
#pragma once

#include <cstdint>

#include "cuda/rms_norm/rms_norm_args.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm/rms_norm_math.cuh"
#include "ropenorm/rms_norm.h"

namespace ropenorm::cuda {

/// Loads one vector of the norm input: x, or s = x + residual (then stores s).
template <typename Tx, typename Tr, int V>
__device__ __forceinline__ void load_norm_input(const RmsNormKernelArgs& a, int64_t x_off,
                                                int64_t r_off, int64_t ro_off, int64_t col,
                                                float (&v)[V]) {
  load_pack<Tx, V>(static_cast<const Tx*>(a.x) + x_off + col, v);
  if constexpr (!std::is_same_v<Tr, NoResidual>) {
    float r[V];
    load_pack<Tr, V>(static_cast<const Tr*>(a.residual) + r_off + col, r);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = round_through<Tr>(v[i] + r[i]);
    store_pack<Tr, V>(static_cast<Tr*>(a.residual_out) + ro_off + col, v);
  }
}

/// Scales one vector by rstd and the weight and stores it to y.
template <typename Tnorm, int V>
__device__ __forceinline__ void store_output(const RmsNormKernelArgs& a, int64_t y_off,
                                             int64_t col, float rstd, float (&v)[V]) {
  float w[V];
  if (a.weight != nullptr) {
    load_pack_dyn<V>(a.weight, a.w_dtype, col, w);
#pragma unroll
    for (int i = 0; i < V; ++i) w[i] += a.w_offset;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) w[i] = 1.0f;
  }
  if (a.rounding == Rounding::kHfLlama) {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = rms_apply_hf(round_through<Tnorm>(v[i] * rstd), w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = rms_apply_exact(v[i], rstd, w[i]);
  }
  store_pack_dyn<V>(a.y, a.y_dtype, y_off + col, v);
}

template <typename Tx, typename Tr>
using NormInputT = std::conditional_t<std::is_same_v<Tr, NoResidual>, Tx, Tr>;

/// Register-resident kernel: kWarpPerRow (kWarp) or kBlockPerRow.
template <typename Tx, typename Tr, int V, int VPT, bool kWarp>
__global__ void __launch_bounds__(1024)
    rms_norm_rows_kernel(const RmsNormKernelArgs a) {
  using Tnorm = NormInputT<Tx, Tr>;
  __shared__ float scratch[32];
  const int64_t nvec = a.n / V;
  const int tid = threadIdx.x;
  const int nthreads = kWarp ? 32 : blockDim.x;
  const int64_t row_step = kWarp ? static_cast<int64_t>(gridDim.x) * blockDim.y : gridDim.x;
  int64_t row = kWarp ? static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y : blockIdx.x;
  for (; row < a.m; row += row_step) {
    const int64_t x_off = a.x_rows.offset(row);
    const int64_t r_off = a.residual ? a.r_rows.offset(row) : 0;
    const int64_t ro_off = a.residual ? a.ro_rows.offset(row) : 0;
    const int64_t y_off = a.y_rows.offset(row);
    float v[VPT][V];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t j = tid + static_cast<int64_t>(k) * nthreads;
      if (j < nvec) {
        load_norm_input<Tx, Tr, V>(a, x_off, r_off, ro_off, j * V, v[k]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = 0.0f;
      }
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
#pragma unroll
      for (int i = 0; i < V; ++i) sum_sq += v[k][i] * v[k][i];
    }
    sum_sq = kWarp ? warp_sum(sum_sq) : block_sum(sum_sq, scratch);
    const float rstd = rms_rstd(sum_sq, a.n, a.eps);
    if (a.rstd != nullptr && tid == 0) a.rstd[row] = rstd;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t j = tid + static_cast<int64_t>(k) * nthreads;
      if (j < nvec) store_output<Tnorm, V>(a, y_off, j * V, rstd, v[k]);
    }
  }
}

/// Two-pass kernel for rows wider than the register budget.
template <typename Tx, typename Tr, int V>
__global__ void __launch_bounds__(1024) rms_norm_two_pass_kernel(const RmsNormKernelArgs a) {
  using Tnorm = NormInputT<Tx, Tr>;
  __shared__ float scratch[32];
  const int64_t nvec = a.n / V;
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const int64_t x_off = a.x_rows.offset(row);
    const int64_t r_off = a.residual ? a.r_rows.offset(row) : 0;
    const int64_t ro_off = a.residual ? a.ro_rows.offset(row) : 0;
    const int64_t y_off = a.y_rows.offset(row);
    float sum_sq = 0.0f;
    for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
      float v[V];
      load_norm_input<Tx, Tr, V>(a, x_off, r_off, ro_off, j * V, v);
#pragma unroll
      for (int i = 0; i < V; ++i) sum_sq += v[i] * v[i];
    }
    sum_sq = block_sum(sum_sq, scratch);
    const float rstd = rms_rstd(sum_sq, a.n, a.eps);
    if (a.rstd != nullptr && threadIdx.x == 0) a.rstd[row] = rstd;
    for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
      float v[V];
      if constexpr (std::is_same_v<Tr, NoResidual>) {
        load_pack<Tx, V>(static_cast<const Tx*>(a.x) + x_off + j * V, v);
      } else {
        load_pack<Tr, V>(static_cast<const Tr*>(a.residual_out) + ro_off + j * V, v);
      }
      store_output<Tnorm, V>(a, y_off, j * V, rstd, v);
    }
  }
}

}  // namespace ropenorm::cuda
