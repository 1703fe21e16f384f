// RMSNorm forward kernels (plain and fused residual add).
//
// Ownership:
//  - rows kernel, kWarp: block (32, R); warp threadIdx.y owns rows blockIdx.x * R + threadIdx.y,
//    then every gridDim.x * R-th row (a persistent grid); lane l owns vectors l, l + 32, ...
//    (VPT of them) of each of its rows.
//  - rows kernel, block path (plan kBlockRing: the fused add on aligned rows, many rows per
//    SM): block (T); the block owns rows blockIdx.x, blockIdx.x + gridDim.x, ...; thread t owns
//    vectors t, t + T, ... (VPT of them, T x VPT <= core::kRingMaxVectors, so that chunk_sum's
//    partials fit the 32 floats of scratch); the row's sum is the direct kernel's chunk_sum.
//    Vectors are aligned per row: the first p elements (p = elements up to the row's first
//    16-byte boundary) and the last (n - p) % V elements are "edge" elements, one per thread
//    0 .. E-1, loaded and stored as scalars; vector j covers columns p + j*V ... p + j*V + V-1.
//    Rows stream through an S-stage ring in shared memory: a thread copies its own vectors of
//    the row S-1 rows ahead with cp.async into its own slots (and its edge element into a
//    register ring), waits for its oldest group, and reads its slots back; no thread reads
//    another's slots, so the ring needs no barrier. Each element of y (and s) is written by the
//    thread that read the matching x (and residual) element, after reading it, so y may alias x
//    and residual_out may alias residual exactly.
//  - Weight factors (w + o), fp32, are staged once per block in shared memory when they fit
//    (a.weight_in_smem); every thread writes a strided share, then the block synchronises once.
//  - direct kernel (block path): the block owns rows blockIdx.x, blockIdx.x + gridDim.x, ...;
//    thread t owns vectors t, t + T, ... (VPT of them) and edge element t of each row, loaded
//    straight from global memory into registers; the weight is read from global memory. The
//    row's sum of squares is reduced per chunk (vector j is chunk j, edge element e joins chunk
//    e) with chunk_sum, whose order does not depend on T x VPT, so the plan may pick the split
//    by the row count without changing a bit.
//  - lean direct kernel (plan.lean: rows of one leading dimension, 16-byte aligned, no edge
//    elements, a weight in x's dtype; for the fused add a residual and s of x's dtype laid out
//    likewise): the direct kernel's ownership without edge elements; thread t reads its vectors'
//    weight as 16-byte vectors in x's dtype (plan.early_weight: right after its x vectors, into
//    registers, before the reduction; else after it), and with the residual writes s where it
//    read x and the residual, before the reduction.
//  - two-pass kernel (rows too wide for registers): the block owns row blockIdx.x (then strides
//    by gridDim.x); thread t loops over vectors t, t + 512, ...; pass one sums squares (and
//    writes s), pass two re-reads its own elements and writes y.
// Thread 0 / lane 0 writes the row's rstd.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/rms_norm_plan.h"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
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
    const int p =
        static_cast<int>(((16u - (reinterpret_cast<uintptr_t>(row) & 15u)) & 15u) / sizeof(T));
    return p > n ? static_cast<int>(n) : p;
  }
}

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

/// The fused add's sum s = round_to(Tr, x + r) (rms_norm_math.cuh): fp32 sum, one rounding to the
/// residual's dtype, returned as fp32. Every kernel forms s through it, so all give the same s.
template <typename Tr>
__device__ __forceinline__ float residual_sum(float x, float r) {
  return round_through<Tr>(x + r);
}

/// residual_sum of V elements, in place in v.
template <typename Tr, int V>
__device__ __forceinline__ void add_residual(float (&v)[V], const float (&r)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = residual_sum<Tr>(v[i], r[i]);
}

/// Output values of V elements v (in place) from rstd and their weight factors w: hf_llama
/// (hf) or exact, before the final rounding.
template <typename Tnorm, int V>
__device__ __forceinline__ void row_output(bool hf, float rstd, const float (&w)[V],
                                           float (&v)[V]) {
  if (hf) {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = rms_apply_hf(round_through<Tnorm>(v[i] * rstd), w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = rms_apply_exact(v[i], rstd, w[i]);
  }
}

/// hf_llama or exact output value for one element, before the final rounding (row_output of
/// one element).
template <typename Tnorm>
__device__ __forceinline__ float rms_output(const RmsNormKernelArgs& a, float v, float rstd,
                                            float w) {
  float out[1] = {v};
  const float w1[1] = {w};
  row_output<Tnorm, 1>(a.rounding == Rounding::kHfLlama, rstd, w1, out);
  return out[0];
}

/// Stages (w + o) in shared memory as fp32; every thread of the block takes part, eight
/// independent loads in flight per thread per step.
__device__ __forceinline__ void stage_weight(const RmsNormKernelArgs& a, float* w_smem) {
  const int nthreads = blockDim.x * blockDim.y;
  const int flat = threadIdx.y * blockDim.x + threadIdx.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(a.weight) & 15u) == 0;
  const int64_t chunks = a.n / 8;
#pragma unroll 4
  for (int64_t c = flat; c < chunks; c += nthreads) {
    float w[8];
    if (aligned) {
      load_pack_dyn<8>(a.weight, a.w_dtype, c * 8, w);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = load_dyn(a.weight, a.w_dtype, c * 8 + i);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) w_smem[c * 8 + i] = w[i] + a.w_offset;
  }
  for (int64_t j = chunks * 8 + flat; j < a.n; j += nthreads) {
    w_smem[j] = load_dyn(a.weight, a.w_dtype, j) + a.w_offset;
  }
}

/// Shared-memory ring of one block: per stage, per vector slot k, per thread, V elements of x
/// (then, for the fused op, V elements of the residual in a second region).
template <typename Tx, typename Tr, int V, int VPT, int S>
struct Ring {
  static constexpr bool kFused = !std::is_same_v<Tr, NoResidual>;
  using TrStore = NormInputT<Tx, Tr>;
  static constexpr int kXBytes = V * sizeof(Tx);
  static constexpr int kRBytes = kFused ? V * sizeof(TrStore) : 0;
  unsigned char* x;  // this thread's warp/block slice
  unsigned char* r;
  int nthreads, tid;
  __device__ unsigned char* x_slot(int s, int k) const {
    return x + (static_cast<int64_t>(s * VPT + k) * nthreads + tid) * kXBytes;
  }
  __device__ unsigned char* r_slot(int s, int k) const {
    return r + (static_cast<int64_t>(s * VPT + k) * nthreads + tid) * kRBytes;
  }
};

/// Starts the copies of one row's share into stage s and loads its edge element.
template <typename Tx, typename Tr, int V, int VPT, int S>
__device__ __forceinline__ void issue_row(const RmsNormKernelArgs& a, int64_t row, int s,
                                          const Ring<Tx, Tr, V, VPT, S>& ring, Tx& ex,
                                          NormInputT<Tx, Tr>& er) {
  using R = Ring<Tx, Tr, V, VPT, S>;
  const Tx* x = static_cast<const Tx*>(a.x) + a.x_rows.offset(row);
  const int p = row_phase<Tx, V>(x, a.n);
  const int nbody = static_cast<int>((a.n - p) / V);
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = ring.tid + k * ring.nthreads;
    if (j < nbody) copy_to_smem<R::kXBytes>(ring.x_slot(s, k), x + p + static_cast<int64_t>(j) * V);
  }
  if (ring.tid < edges) ex = x[edge_col(ring.tid, p, nbody, V)];
  if constexpr (R::kFused) {
    const Tr* r = static_cast<const Tr*>(a.residual) + a.r_rows.offset(row);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = ring.tid + k * ring.nthreads;
      if (j < nbody) {
        copy_to_smem<R::kRBytes>(ring.r_slot(s, k), r + p + static_cast<int64_t>(j) * V);
      }
    }
    if (ring.tid < edges) er = r[edge_col(ring.tid, p, nbody, V)];
  }
}

/// Weight factors (w + o) of the V columns from col of a row of phase p: shared memory (16-byte
/// float4 reads when aligned there), global memory as one vector when the row's phase and the
/// weight's alignment allow, else per column (weight_factor).
template <int V>
__device__ __forceinline__ void row_weights(const RmsNormKernelArgs& a, const float* w_smem, int p,
                                            int64_t col, float (&w)[V]) {
  if (w_smem != nullptr) {
    if constexpr (V % 4 == 0) {
      if ((p & 3) == 0) {  // 16-byte aligned in shared memory: conflict-free float4 reads
#pragma unroll
        for (int c = 0; c < V / 4; ++c) {
          const float4 q = *reinterpret_cast<const float4*>(w_smem + col + 4 * c);
          w[4 * c] = q.x;
          w[4 * c + 1] = q.y;
          w[4 * c + 2] = q.z;
          w[4 * c + 3] = q.w;
        }
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) w[i] = w_smem[col + i];
  } else if (a.weight_vec && p == 0) {
    load_pack_dyn<V>(a.weight, a.w_dtype, col, w);
#pragma unroll
    for (int i = 0; i < V; ++i) w[i] += a.w_offset;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) w[i] = weight_factor(a, nullptr, col + i);
  }
}

/// One row's share of a thread: takes its vectors through xsrc(k) / rsrc(k) (pointers to the V
/// elements of x / residual of the thread's k-th vector: a ring slot or global memory), all of
/// them loaded before any is used or s is stored; reduces the row and writes y (and s).
/// Each vector's weight factors are loaded just before its output (loading all of them before the
/// first store measured no faster at M = 1 and cost 47 registers at 128 x 4; H200, 16f10cf).
template <typename Tx, typename Tr, int V, int VPT, bool kWarp, typename XSrc, typename RSrc>
__device__ __forceinline__ void process_row(const RmsNormKernelArgs& a, int64_t row, int tid,
                                            int nthreads, XSrc xsrc, RSrc rsrc, const float* w_smem,
                                            float* scratch, Tx ex, NormInputT<Tx, Tr> er) {
  using Tnorm = NormInputT<Tx, Tr>;
  constexpr bool kFused = !std::is_same_v<Tr, NoResidual>;
  const Tx* x = static_cast<const Tx*>(a.x) + a.x_rows.offset(row);
  const int p = row_phase<Tx, V>(x, a.n);
  const int nbody = static_cast<int>((a.n - p) / V);
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
  const bool has_edge = tid < edges;
  const int64_t e_col = has_edge ? edge_col(tid, p, nbody, V) : 0;
  Tnorm* s_row = nullptr;
  if constexpr (kFused) s_row = static_cast<Tnorm*>(a.residual_out) + a.ro_rows.offset(row);
  float v[VPT][V];
  float rv[kFused ? VPT : 1][V];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) {
      load_pack<Tx, V>(xsrc(k), v[k]);
      if constexpr (kFused) load_pack<Tr, V>(rsrc(k), rv[k]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[k][i] = 0.0f;
    }
  }
  if constexpr (kFused) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nbody) {
        add_residual<Tr, V>(v[k], rv[k]);
        store_pack<Tr, V>(s_row + p + static_cast<int64_t>(j) * V, v[k]);
      }
    }
  }
  float ve = 0.0f;
  if (has_edge) {
    ve = to_float(ex);
    if constexpr (kFused) {
      ve = residual_sum<Tr>(ve, to_float(er));
      s_row[e_col] = from_float<Tr>(ve);
    }
  }
  float sum_sq;
  if constexpr (kWarp) {
    sum_sq = ve * ve;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
#pragma unroll
      for (int i = 0; i < V; ++i) sum_sq += v[k][i] * v[k][i];
    }
    sum_sq = warp_sum(sum_sq);
  } else {
    // Split-invariant: vector j = tid + k * nthreads is chunk j, the edge element tid belongs
    // to chunk tid (k = 0), so a row's sum has the same bits at every threads x VPT split.
    float part[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      part[k] = k == 0 ? ve * ve : 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) part[k] += v[k][i] * v[k][i];
    }
    sum_sq = chunk_sum<VPT, core::kRowsMaxThreads>(part, scratch);
  }
  const float rstd = rms_rstd(sum_sq, a.n, a.eps);
  if (a.rstd != nullptr && tid == 0) a.rstd[row] = rstd;
  const int64_t y_off = a.y_rows.offset(row);
  const bool hf = a.rounding == Rounding::kHfLlama;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) {
      const int64_t col = p + static_cast<int64_t>(j) * V;
      float w[V];
      row_weights<V>(a, w_smem, p, col, w);
      row_output<Tnorm, V>(hf, rstd, w, v[k]);
      store_pack_dyn<V>(a.y, a.y_dtype, y_off + col, v[k]);
    }
  }
  if (has_edge) {
    float out[1] = {rms_output<Tnorm>(a, ve, rstd, weight_factor(a, w_smem, e_col))};
    store_pack_dyn<1>(a.y, a.y_dtype, y_off + e_col, out);
  }
}

/// Register-resident, persistent, S-stage pipelined kernel: warp per row (kWarp) or block per
/// row. Dynamic shared memory (core::ring_smem_bytes): kRingScratchFloats floats of scratch, n
/// floats of weight when a.weight_in_smem (rounded up to 16 bytes), then the ring (x region, then
/// residual region).
template <typename Tx, typename Tr, int V, int VPT, int S, bool kWarp>
__global__ void __launch_bounds__(core::kRowsMaxThreads)
    rms_norm_rows_kernel(const RmsNormKernelArgs a) {
  using R = Ring<Tx, Tr, V, VPT, S>;
  using Tnorm = NormInputT<Tx, Tr>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* scratch = reinterpret_cast<float*>(smem);
  float* w_smem = a.weight_in_smem ? scratch + core::kRingScratchFloats : nullptr;
  const int64_t w_floats = a.weight_in_smem ? (a.n + 3) / 4 * 4 : 0;
  unsigned char* ring_base = smem + (core::kRingScratchFloats + w_floats) * sizeof(float);
  const int nthreads = kWarp ? 32 : blockDim.x;
  const int slices = kWarp ? blockDim.y : 1;
  const int slice = kWarp ? threadIdx.y : 0;
  const int64_t x_region = core::ring_bytes(V, VPT, S, nthreads, sizeof(Tx), 0);
  R ring;
  ring.nthreads = nthreads;
  ring.tid = threadIdx.x;
  ring.x = ring_base + slice * x_region;
  ring.r = ring_base + slices * x_region +
           slice * core::ring_bytes(V, VPT, S, nthreads, 0, R::kFused ? sizeof(Tnorm) : 0);

  const int64_t step = kWarp ? static_cast<int64_t>(gridDim.x) * blockDim.y : gridDim.x;
  int64_t row = kWarp ? static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y : blockIdx.x;
  Tx ex[S];
  Tnorm er[S];
  griddep_wait();
  griddep_launch_dependents();
  // Prologue: rows 0 .. S-2 of this thread's sequence into stages 0 .. S-2.
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    const int64_t r = row + s * step;
    if (r < a.m) issue_row<Tx, Tr, V, VPT, S>(a, r, s, ring, ex[s], er[s]);
    cp_async_commit();
  }
  if (w_smem != nullptr) {
    stage_weight(a, w_smem);
    __syncthreads();
  }
  while (true) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (row >= a.m) return;
      constexpr int kAhead = S - 1;
      const int ns = (s + kAhead) % S;
      const int64_t ahead = row + kAhead * step;
      if (ahead < a.m) issue_row<Tx, Tr, V, VPT, S>(a, ahead, ns, ring, ex[ns], er[ns]);
      cp_async_commit();
      cp_async_wait<S - 1>();
      process_row<Tx, Tr, V, VPT, kWarp>(
          a, row, ring.tid, ring.nthreads,
          [&](int k) { return reinterpret_cast<const Tx*>(ring.x_slot(s, k)); },
          [&](int k) { return reinterpret_cast<const Tr*>(ring.r_slot(s, k)); }, w_smem, scratch,
          ex[s], er[s]);
      row += step;
    }
  }
}

/// Direct kernel (block per row, rows that fit in registers): block b owns rows b, b + gridDim.x,
/// ...; thread t owns vectors t, t + blockDim.x, ... (VPT of them) and the edge element t,
/// loaded straight from global memory into registers (all of them before the reduction); the
/// weight is read from global memory (L1/L2-resident), as 16-byte vectors when the row's phase
/// and the weight's alignment allow.
template <typename Tx, typename Tr, int V, int VPT>
__global__ void __launch_bounds__(core::kRowsMaxThreads)
    rms_norm_direct_kernel(const RmsNormKernelArgs a) {
  using Tnorm = NormInputT<Tx, Tr>;
  constexpr bool kFused = !std::is_same_v<Tr, NoResidual>;
  __shared__ float scratch[VPT * core::kRowsMaxThreads / 32];
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  griddep_wait();
  griddep_launch_dependents();
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const Tx* x = static_cast<const Tx*>(a.x) + a.x_rows.offset(row);
    const Tr* r = nullptr;
    if constexpr (kFused) r = static_cast<const Tr*>(a.residual) + a.r_rows.offset(row);
    const int p = row_phase<Tx, V>(x, a.n);
    const int nbody = static_cast<int>((a.n - p) / V);
    const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
    Tx ex{};
    Tnorm er{};
    if (tid < edges) {
      const int64_t e_col = edge_col(tid, p, nbody, V);
      ex = x[e_col];
      if constexpr (kFused) er = r[e_col];
    }
    process_row<Tx, Tr, V, VPT, false>(
        a, row, tid, nthreads,
        [&](int k) { return x + p + static_cast<int64_t>(tid + k * nthreads) * V; },
        [&](int k) { return r + p + static_cast<int64_t>(tid + k * nthreads) * V; }, nullptr,
        scratch, ex, er);
  }
}

/// Lean direct kernel (plan.lean, rows that core::rms_norm_lean_rows accepts): the direct kernel
/// without its generality, y = x * r * (w + o) with r = 1 / sqrt(mean(x^2) + eps), rounded once
/// to x's dtype; kFused: the fused add, s = round(x + residual) written to residual_out and
/// normalised in x's place (residual and s in x's dtype). The same operations in the same order as
/// the direct kernel (the sum rounded before it is squared or stored, chunk_sum of the same
/// chunks, the same weight factor and output expression), so the same bits. kEarlyWeight: the
/// thread's weight vectors are loaded (as stored, 16 bits each) right after its x vectors, before
/// the reduction, instead of after it: the same bits, one dependent memory round trip less per
/// row, VPT * V / 2 more registers. Launched with at most kMaxThreads threads; kMinBlocks > 0
/// blocks of kMaxThreads per multiprocessor bound its registers (__launch_bounds__; 0: no bound
/// beyond kMaxThreads's).
template <typename Tx, int V, int VPT, bool kEarlyWeight = false, bool kFused = false,
          int kMaxThreads = core::kRowsMaxThreads, int kMinBlocks = 0>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    rms_norm_lean_kernel(const RmsNormKernelArgs a) {
  __shared__ float scratch[VPT * kMaxThreads / 32];
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  const int nvec = static_cast<int>(a.n / V);
  const Tx* w = static_cast<const Tx*>(a.weight);
  // Rows of one leading dimension (rms_norm_lean_rows): row m starts at m * its stride.
  const int64_t x_stride = a.x_rows.lead_offset(1), y_stride = a.y_rows.lead_offset(1);
  const int64_t r_stride = kFused ? a.r_rows.lead_offset(1) : 0;
  const int64_t s_stride = kFused ? a.ro_rows.lead_offset(1) : 0;
  griddep_wait();
  griddep_launch_dependents();
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const Tx* x = static_cast<const Tx*>(a.x) + row * x_stride;
    float v[VPT][V];
    float rv[kFused ? VPT : 1][V];
    float part[VPT];
    RawVec<Tx, V> w_raw[kEarlyWeight ? VPT : 1];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nvec) {
        load_pack<Tx, V>(x + static_cast<int64_t>(j) * V, v[k]);
        if constexpr (kFused) {
          load_pack<Tx, V>(
              static_cast<const Tx*>(a.residual) + row * r_stride + static_cast<int64_t>(j) * V,
              rv[k]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = 0.0f;
      }
    }
    if constexpr (kEarlyWeight) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int j = tid + k * nthreads;
        if (j < nvec) load_raw<Tx, V>(w + static_cast<int64_t>(j) * V, w_raw[k]);
      }
    }
    if constexpr (kFused) {
      Tx* s_row = static_cast<Tx*>(a.residual_out) + row * s_stride;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int j = tid + k * nthreads;
        if (j < nvec) {
          add_residual<Tx, V>(v[k], rv[k]);
          store_pack<Tx, V>(s_row + static_cast<int64_t>(j) * V, v[k]);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      part[k] = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) part[k] += v[k][i] * v[k][i];
    }
    const float rstd = rms_rstd(chunk_sum<VPT, kMaxThreads>(part, scratch), a.n, a.eps);
    if (a.rstd != nullptr && tid == 0) a.rstd[row] = rstd;
    Tx* y = static_cast<Tx*>(a.y) + row * y_stride;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nvec) {
        float wf[V];
        if constexpr (kEarlyWeight) {
          widen<Tx, V>(w_raw[k], wf);
        } else {
          load_pack<Tx, V>(w + static_cast<int64_t>(j) * V, wf);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = rms_apply_exact(v[k][i], rstd, wf[i] + a.w_offset);
        store_pack<Tx, V>(y + static_cast<int64_t>(j) * V, v[k]);
      }
    }
  }
}

/// Two-pass kernel for rows wider than the register budget (weight read from global memory).
template <typename Tx, typename Tr, int V>
__global__ void __launch_bounds__(core::kTwoPassThreads)
    rms_norm_two_pass_kernel(const RmsNormKernelArgs a) {
  using Tnorm = NormInputT<Tx, Tr>;
  constexpr bool kFused = !std::is_same_v<Tr, NoResidual>;
  __shared__ float scratch[32];
  const int tid = threadIdx.x;
  griddep_wait();
  griddep_launch_dependents();
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
        add_residual<Tr, V>(v, rv);
        store_pack<Tr, V>(s_row + col, v);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) sum_sq += v[i] * v[i];
    }
    float ve = 0.0f;
    if (tid < edges) {
      ve = to_float(x[e_col]);
      if constexpr (kFused) {
        ve = residual_sum<Tr>(ve, to_float(r[e_col]));
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
