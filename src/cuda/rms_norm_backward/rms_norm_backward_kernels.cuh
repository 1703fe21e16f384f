// RMSNorm backward kernels (plain, and after the fused residual add).
//
// Ownership:
//  - rows kernel, kWarp: block (32, R); warp threadIdx.y owns rows blockIdx.x * R + threadIdx.y,
//    then every gridDim.x * R-th row (a persistent grid); lane l owns vectors l, l + 32, ...
//    (VPT of them) of each of its rows.
//  - rows kernel, block path: block (T); the block owns rows blockIdx.x, blockIdx.x + gridDim.x,
//    ...; thread t owns vectors t, t + T, ... (VPT of them).
//    Rows are split as in the forward (row_phase, edge_col): p leading and the tail's edge
//    elements, one per thread 0 .. E-1, and aligned V-element vectors; the phase is taken from
//    the input with the smaller elements (the reference; the launcher checked that every other
//    row tensor sits at the same phase). dy, x (and ds) stream through an S-stage ring in shared
//    memory: a thread copies its own vectors of the row S-1 rows ahead, and the row's rstd, with
//    cp.async into its own slots (edge elements into a register queue), so the ring needs no
//    barrier. In the kDsDirect instances (the plan's ds_direct: the ring without ds fits more
//    blocks per SM) a thread loads its own ds vectors of a row from global memory into registers
//    when that row's processing starts, before its two sums (an edge element's ds still goes
//    through the register queue). A row is read twice from the thread's slots: once for the
//    sums, once for dx and dw. Each element of dx (and dresidual) is written by the thread that
//    read the matching dy, x (and ds) elements, after reading them: dx may alias dy (or ds)
//    exactly.
//  - dw partials: when every row sits at the same 16-byte phase (uniform), a thread's columns
//    are the same in every row and it keeps their dy * xh sums in fp32 registers; otherwise
//    (kSmemAcc) each warp (warp path) or the block keeps an fp32 table in shared memory that the
//    owner of a column in the current row updates (the row's barriers, or __syncwarp, order the
//    updates of consecutive rows). At the end the block writes one partial row,
//    partials[blockIdx.x, :]; on the warp path its R warps' partials are first added in warp
//    order through shared memory. Rows are summed in the fixed order the block visits them.
//  - Weight factors (w + o), fp32: with a uniform phase each thread writes its own columns'
//    factors once to its own shared slots (and reads only those); otherwise (kSmemAcc) the
//    block stages all n of them once into a shared table (the threads take columns flat,
//    flat + block threads, ...; the barrier before the first row orders the writes before any
//    read) where the plan made room for it (a.w_table), else they are read per row from global
//    memory (the weight stays in L1). The partials and weight tables use slot
//    (c % V) * lanes + c / V: conflict-free for any phase.
//  - two-pass kernel (rows too wide for the ring, or scalar access): the block owns rows
//    blockIdx.x, blockIdx.x + gridDim.x, ...; thread t loops over vectors t, t + T, ...; pass one
//    sums g * x (and x^2), pass two re-reads its own elements, writes dx and adds dy * xh into
//    the block's partial row in the workspace (the row barriers order the updates).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/rms_norm_backward_plan.h"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_args.h"
#include "cuda/rms_norm_backward/rms_norm_backward_math.cuh"

namespace ropenorm::cuda {

/// The input whose elements are smaller (x on a tie): its row pointer gives the phase.
template <typename Tin, typename Tdy>
using BwdRefT = std::conditional_t<(sizeof(Tdy) < sizeof(Tin)), Tdy, Tin>;

template <typename Tin, typename Tdy, int V>
__device__ __forceinline__ int bwd_row_phase(const RmsNormBwdKernelArgs& a, int64_t row) {
  if constexpr (sizeof(Tdy) < sizeof(Tin)) {
    return row_phase<Tdy, V>(static_cast<const Tdy*>(a.dy) + a.dy_rows.offset(row), a.n);
  } else {
    return row_phase<Tin, V>(static_cast<const Tin*>(a.x) + a.x_rows.offset(row), a.n);
  }
}

/// Column c's slot in the shared tables (ring kernels: n and the table fit in 32 bits).
template <int V>
__device__ __forceinline__ int bwd_slot(int c, int lanes) {
  return (c % V) * lanes + c / V;
}

/// One element as stored (no widening).
template <typename T>
__device__ __forceinline__ typename Storage<T>::type load_elem(const T* p, int64_t i) {
  return reinterpret_cast<const typename Storage<T>::type*>(p)[i];
}

/// (w + o) of column col read from global memory (a weight given).
__device__ __forceinline__ float bwd_weight_factor(const RmsNormBwdKernelArgs& a, int64_t col) {
  return load_dyn(a.weight, a.w_dtype, col) + a.w_offset;
}

/// (w + o) read from global memory (two-pass kernel), or 1 without a weight.
__device__ __forceinline__ float bwd_weight_global(const RmsNormBwdKernelArgs& a, int64_t col) {
  return a.weight != nullptr ? bwd_weight_factor(a, col) : 1.0f;
}

/// Which parts a call has: tested at run time, or fixed when kPlain (the facts core::bwd_plain_call
/// accepts: a weight, the rstd saved, dw wanted, no ds, no dresidual).
template <bool kPlain>
struct BwdParts {
  __device__ __forceinline__ static bool weight(const RmsNormBwdKernelArgs& a) {
    return kPlain || a.weight != nullptr;
  }
  __device__ __forceinline__ static bool rstd_saved(const RmsNormBwdKernelArgs& a) {
    return kPlain || a.rstd != nullptr;
  }
  __device__ __forceinline__ static bool dw(const RmsNormBwdKernelArgs& a) {
    return kPlain || a.partials != nullptr;
  }
  __device__ __forceinline__ static bool ds(const RmsNormBwdKernelArgs& a) {
    return !kPlain && a.ds != nullptr;
  }
  __device__ __forceinline__ static bool dres(const RmsNormBwdKernelArgs& a) {
    return !kPlain && a.dres != nullptr;
  }
};

/// Points of a thread's run through the ring kernel that a probe can record: entry, after the
/// wait for the previous kernel, after the weight staging's barrier, after its first row, after
/// its last row, after its share of the partial row is stored.
enum class BwdPoint : int { kEntry, kWaited, kStaged, kFirstRow, kRowsDone, kStored, kCount };

/// The rows a ring kernel's unit (the block, or on the warp path the warp) visits: first,
/// first + step, ... below end.
struct BwdRowSpan {
  int64_t first, step, end;
};

/// The ring kernel's probe: each thread calls mark(point) as it passes a BwdPoint (kFirstRow
/// only with a row; kStored only on the block path with register partials) and, on that path in
/// plain calls, after_partials(a) right after its share of the block's partial row is stored
/// (no barrier: a probe that reads the row synchronises first); a probe with kSplitsRows also
/// has rows(a, unit, units), the rows unit `unit` of `units` visits, in place of the library's
/// split (unit u: rows u, u + units, ... below a.m). The library's probe does nothing and
/// compiles to nothing; experiments pass their own to record a block's timeline, to add work
/// after the partial rows, or to split the rows another way (dw's partial rows then sum other
/// rows, so its bits may differ; dx's never do).
struct BwdNoProbe {
  static constexpr bool kSplitsRows = false;  // true: the probe's rows() replaces the split
  __device__ __forceinline__ static void mark(BwdPoint) {}
  __device__ __forceinline__ static void after_partials(const RmsNormBwdKernelArgs&) {}
};

/// The row's two sums, reduced over the warp (kWarp) or block: r (from rstd, or recomputed from
/// sum_sq with the forward's formula) and the mean term c.
template <bool kWarp, bool kPlain = false>
__device__ __forceinline__ void bwd_row_scalars(const RmsNormBwdKernelArgs& a, float sum_gx,
                                                float sum_sq, float saved_r, float* scratch,
                                                float* r, float* c) {
  float rr = saved_r;
  if (!BwdParts<kPlain>::rstd_saved(a)) {
    sum_sq = kWarp ? warp_sum(sum_sq) : block_sum(sum_sq, scratch);
    rr = rms_rstd(sum_sq, a.n, a.eps);
  }
  sum_gx = kWarp ? warp_sum(sum_gx) : block_sum(sum_gx, scratch);
  *r = rr;
  *c = rms_bwd_mean_term(sum_gx, rr, a.n);
}

/// Shared-memory ring of one warp (warp path) or block: per stage, per vector slot k, per
/// thread, V elements of dy, then (second region) of x, then (third, when ds is given and not
/// read directly: kDsDirect) of ds;
/// apart from those, per stage and thread, the row's saved rstd.
template <typename Tin, typename Tdy, int V, int VPT, int S>
struct BwdRing {
  static constexpr int kDyBytes = V * sizeof(Tdy);
  static constexpr int kXBytes = V * sizeof(Tin);
  unsigned char* dy;
  unsigned char* x;
  unsigned char* ds;
  float* rstd;
  int nthreads, tid;
  __device__ int64_t index(int s, int k) const {
    return static_cast<int64_t>(s * VPT + k) * nthreads + tid;
  }
  __device__ unsigned char* dy_slot(int s, int k) const { return dy + index(s, k) * kDyBytes; }
  __device__ unsigned char* x_slot(int s, int k) const { return x + index(s, k) * kXBytes; }
  __device__ unsigned char* ds_slot(int s, int k) const { return ds + index(s, k) * kXBytes; }
  __device__ float* rstd_slot(int s) const { return rstd + s * nthreads + tid; }
};

/// A row's edge element, held in registers from issue to consume.
template <typename Tin, typename Tdy>
struct BwdEdge {
  typename Storage<Tdy>::type dy;
  typename Storage<Tin>::type x, ds;
};

/// Starts the copies of one row's share (and its saved rstd) into stage s (ds not, when
/// kDsDirect); loads its edge element. kPlain: the call is plain (core::bwd_plain_call: no ds,
/// the rstd saved).
template <typename Tin, typename Tdy, int V, int VPT, int S, bool kPlain = false,
          bool kDsDirect = false>
__device__ __forceinline__ void bwd_issue_row(const RmsNormBwdKernelArgs& a, int64_t row, int s,
                                              const BwdRing<Tin, Tdy, V, VPT, S>& ring,
                                              BwdEdge<Tin, Tdy>& e) {
  using R = BwdRing<Tin, Tdy, V, VPT, S>;
  const Tdy* dy = static_cast<const Tdy*>(a.dy) + a.dy_rows.offset(row);
  const Tin* x = static_cast<const Tin*>(a.x) + a.x_rows.offset(row);
  const Tin* ds =
      BwdParts<kPlain>::ds(a) ? static_cast<const Tin*>(a.ds) + a.ds_rows.offset(row) : nullptr;
  const bool ds_ring = ds != nullptr && !kDsDirect;
  const int p = bwd_row_phase<Tin, Tdy, V>(a, row);
  const int nbody = static_cast<int>((a.n - p) / V);
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = ring.tid + k * ring.nthreads;
    if (j < nbody) {
      const int64_t col = p + static_cast<int64_t>(j) * V;
      copy_to_smem<R::kDyBytes>(ring.dy_slot(s, k), dy + col);
      copy_to_smem<R::kXBytes>(ring.x_slot(s, k), x + col);
      if (ds_ring) copy_to_smem<R::kXBytes>(ring.ds_slot(s, k), ds + col);
    }
  }
  if (ring.tid < edges) {
    const int64_t col = edge_col(ring.tid, p, nbody, V);
    e.dy = load_elem(dy, col);
    e.x = load_elem(x, col);
    if (ds != nullptr) e.ds = load_elem(ds, col);
  }
  if (BwdParts<kPlain>::rstd_saved(a)) cp_async_4(ring.rstd_slot(s), a.rstd + row);
}

/// Index (in float4 units) of chunk c of vector k in a thread's own shared slots.
__device__ __forceinline__ int bwd_own_chunk(int k, int c, int chunks, int tid, int nthreads) {
  return (k * chunks + c) * nthreads + tid;
}

/// Stages a thread's own weight factors (w + o) for rows at phase p: every load issued before
/// the first shared-memory store (16-byte vectors where the weight's alignment at p allows), so
/// the block waits for one round trip, not one per vector. Returns the factor of the thread's
/// edge column (1 when it has none).
template <int V, int VPT>
__device__ __forceinline__ float bwd_stage_own_weights(const RmsNormBwdKernelArgs& a, float* own,
                                                       int p, int tid, int nthreads) {
  const int nbody = static_cast<int>((a.n - p) / V);
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
  const int wsize = a.w_dtype == DType::kFloat32 ? 4 : 2;
  const int align = V * wsize < 16 ? V * wsize : 16;
  // Column p + j * V sits at the alignment of column p: j * V * wsize is a multiple of align.
  const bool vec =
      (reinterpret_cast<uintptr_t>(a.weight) + static_cast<uintptr_t>(p) * wsize) % align == 0;
  float w[VPT][V];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t col = p + static_cast<int64_t>(tid + k * nthreads) * V;
    if (tid + k * nthreads < nbody) {
      if (vec) {
        load_pack_dyn<V>(a.weight, a.w_dtype, col, w[k]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) w[k][i] = load_dyn(a.weight, a.w_dtype, col + i);
      }
    }
  }
  const float wf_e = tid < edges ? bwd_weight_factor(a, edge_col(tid, p, nbody, V)) : 1.0f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (tid + k * nthreads < nbody) {
#pragma unroll
      for (int c = 0; c < V / 4; ++c) {
        reinterpret_cast<float4*>(own)[bwd_own_chunk(k, c, V / 4, tid, nthreads)] =
            make_float4(w[k][4 * c] + a.w_offset, w[k][4 * c + 1] + a.w_offset,
                        w[k][4 * c + 2] + a.w_offset, w[k][4 * c + 3] + a.w_offset);
      }
    }
  }
  return wf_e;
}

/// Stages the weight factors (w + o) of all n columns at their slots (bwd_slot) of the shared
/// table w_tab, for rows of varying phase (kSmemAcc): thread `first` of `stride` takes columns
/// first, first + stride, ..., the loads of up to 8 of them issued before their stores: one
/// round trip per 8 columns a thread stages. Each factor is the value the per-element form
/// computes.
template <int V>
__device__ __forceinline__ void bwd_stage_weight_table(const RmsNormBwdKernelArgs& a, float* w_tab,
                                                       int lanes, int first, int stride) {
  constexpr int kBatch = 8;
  for (int64_t base = first; base < a.n; base += int64_t{kBatch} * stride) {
    float w[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t c = base + int64_t{u} * stride;
      w[u] = c < a.n ? load_dyn(a.weight, a.w_dtype, c) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t c = base + int64_t{u} * stride;
      if (c < a.n) w_tab[bwd_slot<V>(static_cast<int>(c), lanes)] = w[u] + a.w_offset;
    }
  }
}

/// Weight factors (w + o) of a thread's vector k (the row's vector j), columns col .. col + V - 1
/// of the row: from its own shared slots `own` (uniform phase; V / 4 float4 chunks per vector,
/// consecutive threads in consecutive chunks); for kSmemAcc (the columns move with the row's
/// phase) from the block's staged table `own` at the columns' slots sbase[i] + j
/// (bwd_stage_weight_table) or, without one, from global memory (the weight stays in L1); or 1
/// without a weight (kPlain: a weight is given).
template <int V, bool kSmemAcc, bool kPlain = false>
__device__ __forceinline__ void bwd_weights(const RmsNormBwdKernelArgs& a, const float* own, int k,
                                            int j, int64_t col, const int (&sbase)[V], int tid,
                                            int nthreads, float (&f)[V]) {
  if (!BwdParts<kPlain>::weight(a)) {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = 1.0f;
  } else if constexpr (kSmemAcc) {
    if (own != nullptr) {
#pragma unroll
      for (int i = 0; i < V; ++i) f[i] = own[sbase[i] + j];
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) f[i] = bwd_weight_factor(a, col + i);
    }
  } else {
#pragma unroll
    for (int c = 0; c < V / 4; ++c) {
      const float4 q =
          reinterpret_cast<const float4*>(own)[bwd_own_chunk(k, c, V / 4, tid, nthreads)];
      f[4 * c] = q.x;
      f[4 * c + 1] = q.y;
      f[4 * c + 2] = q.z;
      f[4 * c + 3] = q.w;
    }
  }
}

/// Reads one row's share back from stage s (twice), writes dx (and dresidual) and adds the
/// row's dy * xh to the thread's partials (registers acc / acc_e, or the shared table acc_tab).
/// Weight factors: the thread's own slots `own` and its edge column's factor wf_e (uniform phase),
/// else (kSmemAcc) the block's staged table `own` at the columns' slots, or global memory where
/// `own` is null. kPlain: the facts core::bwd_plain_call fixes hold (a weight, the
/// rstd saved, dw wanted, no ds, no dresidual, dx in the input's dtype), so none is tested.
template <typename Tin, typename Tdy, int V, int VPT, int S, bool kWarp, bool kSmemAcc,
          bool kPlain = false, bool kDsDirect = false>
__device__ __forceinline__ void bwd_consume_row(const RmsNormBwdKernelArgs& a, int64_t row, int s,
                                                const BwdRing<Tin, Tdy, V, VPT, S>& ring,
                                                const float* own, float wf_e, float* acc_tab,
                                                float* scratch, const BwdEdge<Tin, Tdy>& e,
                                                float (&acc)[VPT][V], float& acc_e) {
  const int tid = ring.tid, nthreads = ring.nthreads;
  const int p = bwd_row_phase<Tin, Tdy, V>(a, row);
  const int nbody = static_cast<int>((a.n - p) / V);
  const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
  const bool has_edge = tid < edges;
  const int64_t e_col = has_edge ? edge_col(tid, p, nbody, V) : 0;
  static_assert(!kPlain || !kSmemAcc, "a plain call has a uniform phase");
  const bool recompute = !BwdParts<kPlain>::rstd_saved(a);
  // Partials table slot of column p + j * V + i is sbase[i] + j.
  const int lanes = static_cast<int>(a.lanes);
  int sbase[V] = {};
  if constexpr (kSmemAcc) {
#pragma unroll
    for (int i = 0; i < V; ++i) sbase[i] = bwd_slot<V>(p + i, lanes);
  }

  // kDsDirect: ds read from global memory, its loads issued now, their latency under the row's
  // two sums; each thread reads the elements it writes.
  const bool has_ds = BwdParts<kPlain>::ds(a);
  RawVec<Tin, V> ds_raw[kDsDirect ? VPT : 1];
  if constexpr (kDsDirect) {
    if (has_ds) {
      const Tin* ds = static_cast<const Tin*>(a.ds) + a.ds_rows.offset(row);
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int j = tid + k * nthreads;
        if (j < nbody) load_raw<Tin, V>(ds + p + static_cast<int64_t>(j) * V, ds_raw[k]);
      }
    }
  }

  // First look: sum of g * x (and of x^2 when r is recomputed).
  float sum_gx = 0.0f, sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) {
      float dyv[V], xv[V], f[V];
      load_pack<Tdy, V>(reinterpret_cast<const Tdy*>(ring.dy_slot(s, k)), dyv);
      load_pack<Tin, V>(reinterpret_cast<const Tin*>(ring.x_slot(s, k)), xv);
      bwd_weights<V, kSmemAcc, kPlain>(a, own, k, j, p + static_cast<int64_t>(j) * V, sbase, tid,
                                       nthreads, f);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        sum_gx += rms_bwd_g(dyv[i], f[i]) * xv[i];
        if (recompute) sum_sq += xv[i] * xv[i];
      }
    }
  }
  float e_dy = 0.0f, e_x = 0.0f, e_wf = wf_e;
  if (has_edge) {
    e_dy = storage_to_float<Tdy>(e.dy);
    e_x = storage_to_float<Tin>(e.x);
    if (kSmemAcc && a.weight != nullptr) {
      e_wf = own != nullptr ? own[bwd_slot<V>(static_cast<int>(e_col), lanes)]
                            : bwd_weight_factor(a, e_col);
    }
    sum_gx += rms_bwd_g(e_dy, e_wf) * e_x;
    if (recompute) sum_sq += e_x * e_x;
  }
  float r, c;
  bwd_row_scalars<kWarp, kPlain>(a, sum_gx, sum_sq, recompute ? 0.0f : *ring.rstd_slot(s), scratch,
                                 &r, &c);

  // Second look: dx (+ ds), and dy * xh into the partials.
  const int64_t dx_off = a.dx_rows.offset(row);
  const bool has_dres = BwdParts<kPlain>::dres(a);
  const int64_t dres_off = has_dres ? a.dres_rows.offset(row) : 0;
  const bool want_dw = BwdParts<kPlain>::dw(a);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody) {
      const int64_t col = p + static_cast<int64_t>(j) * V;
      float dyv[V], xv[V], f[V], out[V];
      load_pack<Tdy, V>(reinterpret_cast<const Tdy*>(ring.dy_slot(s, k)), dyv);
      load_pack<Tin, V>(reinterpret_cast<const Tin*>(ring.x_slot(s, k)), xv);
      bwd_weights<V, kSmemAcc, kPlain>(a, own, k, j, p + static_cast<int64_t>(j) * V, sbase, tid,
                                       nthreads, f);
      rms_bwd_vector_dx<V>(dyv, xv, f, r, c, out, [&](int i, float xh) {
        if (want_dw) {
          const float t = rms_bwd_dw_term(dyv[i], xh);
          if constexpr (kSmemAcc) {
            acc_tab[sbase[i] + j] += t;
          } else {
            acc[k][i] += t;
          }
        }
      });
      if (has_ds) {
        float dsv[V];
        if constexpr (kDsDirect) {
          widen<Tin, V>(ds_raw[k], dsv);
        } else {
          load_pack<Tin, V>(reinterpret_cast<const Tin*>(ring.ds_slot(s, k)), dsv);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) out[i] += dsv[i];
      }
      if constexpr (kPlain) {
        store_pack<Tin, V>(static_cast<Tin*>(a.dx) + dx_off + col, out);
      } else {
        store_pack_dyn<V>(a.dx, a.dx_dtype, dx_off + col, out);
      }
      if (has_dres) store_pack_dyn<V>(a.dres, a.dres_dtype, dres_off + col, out);
    }
  }
  if (has_edge) {
    const float xh = e_x * r;
    float out[1] = {rms_bwd_dx(rms_bwd_g(e_dy, e_wf), xh, r, c)};
    if (want_dw) {
      const float t = rms_bwd_dw_term(e_dy, xh);
      if constexpr (kSmemAcc) {
        acc_tab[bwd_slot<V>(static_cast<int>(e_col), lanes)] += t;
      } else {
        acc_e += t;
      }
    }
    if (has_ds) out[0] += storage_to_float<Tin>(e.ds);
    if constexpr (kPlain) {
      store_pack<Tin, 1>(static_cast<Tin*>(a.dx) + dx_off + e_col, out);
    } else {
      store_pack_dyn<1>(a.dx, a.dx_dtype, dx_off + e_col, out);
    }
    if (has_dres) store_pack_dyn<1>(a.dres, a.dres_dtype, dres_off + e_col, out);
  }
  if constexpr (kWarp && kSmemAcc) __syncwarp();
}

/// Writes a thread's register partials of a row at phase p into the row `dst` at the columns
/// the thread owns (table: at their table slots instead of their column indices), as 16-byte
/// vectors where the row's column p is 16-byte aligned.
template <int V, int VPT>
__device__ __forceinline__ void bwd_store_partials(float* dst, bool table, int lanes, int p,
                                                   int nbody, int edges, int tid, int nthreads,
                                                   const float (&acc)[VPT][V], float acc_e) {
  const bool vec = !table && V % 4 == 0 && reinterpret_cast<uintptr_t>(dst + p) % 16 == 0;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = tid + k * nthreads;
    if (j < nbody && vec) {
#pragma unroll
      for (int c = 0; c < V / 4; ++c) {
        reinterpret_cast<float4*>(dst + p + j * V)[c] =
            make_float4(acc[k][4 * c], acc[k][4 * c + 1], acc[k][4 * c + 2], acc[k][4 * c + 3]);
      }
    } else if (j < nbody) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int col = p + j * V + i;
        dst[table ? bwd_slot<V>(col, lanes) : col] = acc[k][i];
      }
    }
  }
  if (tid < edges) {
    const int col = static_cast<int>(edge_col(tid, p, nbody, V));
    dst[table ? bwd_slot<V>(col, lanes) : col] = acc_e;
  }
}

/// Ring kernel, persistent, S-stage pipelined: warp per row (kWarp) or block per row; up to two
/// vectors per thread it is held to 64 registers (two 512-thread blocks per SM). Dynamic
/// shared memory: 32 floats of scratch; with a weight, every thread's own weight slots (VPT * V
/// floats each) or, for kSmemAcc, one partials table (lanes * V floats) per warp (warp path) or
/// for the block; per warp (or for the block) S rstd slots per thread; then per warp (or for the
/// block) the ring's dy, x and ds regions; then, for kSmemAcc where the plan made room
/// (a.w_table), the block's table of weight factors (lanes * V floats). kPlain: launched only for
/// calls core::bwd_plain_call accepts, whose facts it then takes as fixed (the same bits as the
/// general form). Probe: BwdNoProbe in the library (see there).
template <typename Tin, typename Tdy, int V, int VPT, int S, bool kWarp, bool kSmemAcc,
          bool kPlain = false, bool kDsDirect = false, typename Probe = BwdNoProbe>
__global__ void __launch_bounds__(core::kBwdMaxThreads, VPT <= 2 ? 2 : 1)
    rms_norm_bwd_rows_kernel(const RmsNormBwdKernelArgs a) {
  Probe::mark(BwdPoint::kEntry);
  using R = BwdRing<Tin, Tdy, V, VPT, S>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* scratch = reinterpret_cast<float*>(smem);
  const int lanes = static_cast<int>(a.lanes);
  const int table = lanes * V;
  const int nthreads = kWarp ? 32 : blockDim.x;
  const int slices = kWarp ? blockDim.y : 1;
  const int slice = kWarp ? threadIdx.y : 0;
  const bool has_w = BwdParts<kPlain>::weight(a);
  // Uniform phase: every thread's own weight slots; kSmemAcc: the partials tables.
  const int own = VPT * nthreads * V;
  float* w_own = !kSmemAcc && has_w ? scratch + 32 + slice * own : nullptr;
  float* acc_base = scratch + 32 + (!kSmemAcc && has_w ? slices * own : 0);
  float* acc_tab = kSmemAcc ? acc_base + slice * table : nullptr;
  float* rstd_base = acc_base + (kSmemAcc ? slices * table : 0);
  unsigned char* ring_base = reinterpret_cast<unsigned char*>(rstd_base + slices * S * nthreads);
  const int64_t dy_region = static_cast<int64_t>(S) * VPT * nthreads * R::kDyBytes;
  const int64_t x_region = static_cast<int64_t>(S) * VPT * nthreads * R::kXBytes;
  const int64_t slice_bytes =
      dy_region + x_region + (BwdParts<kPlain>::ds(a) && !kDsDirect ? x_region : 0);
  // Rows of varying phase: the block's weight factors in a table after the ring, when the plan
  // made room for it (a.w_table); they then travel in w_own's place.
  if constexpr (kSmemAcc) {
    if (a.w_table) w_own = reinterpret_cast<float*>(ring_base + slices * slice_bytes);
  }
  R ring;
  ring.nthreads = nthreads;
  ring.tid = threadIdx.x;
  ring.dy = ring_base + slice * slice_bytes;
  ring.x = ring.dy + dy_region;
  ring.ds = ring.x + x_region;
  ring.rstd = rstd_base + slice * S * nthreads;

  const int64_t units = kWarp ? static_cast<int64_t>(gridDim.x) * blockDim.y : gridDim.x;
  const int64_t unit =
      kWarp ? static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y : blockIdx.x;
  BwdRowSpan span{unit, units, 0};  // the library's split (its end is a.m, in in_span)
  if constexpr (Probe::kSplitsRows) span = Probe::rows(a, unit, units);
  const int64_t step = span.step, first_row = span.first;
  // Whether row r is one of this unit's (below a.m itself where the library splits the rows:
  // the bound copied into span.end changed the library's machine code throughout, compared with
  // cuobjdump -sass).
  auto in_span = [&](int64_t r) {
    if constexpr (Probe::kSplitsRows) {
      return r < span.end;
    } else {
      return r < a.m;
    }
  };
  const int flat = threadIdx.y * blockDim.x + threadIdx.x;
  const int block_threads = blockDim.x * blockDim.y;
  float acc[VPT][V];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
#pragma unroll
    for (int i = 0; i < V; ++i) acc[k][i] = 0.0f;
  }
  float acc_e = 0.0f;
  BwdEdge<Tin, Tdy> edge[S];

  griddep_wait();
  Probe::mark(BwdPoint::kWaited);
  griddep_launch_dependents();
  // Prologue: rows 0 .. S-2 of this thread's sequence into stages 0 .. S-2.
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    const int64_t r = first_row + s * step;
    if (in_span(r)) bwd_issue_row<Tin, Tdy, V, VPT, S, kPlain, kDsDirect>(a, r, s, ring, edge[s]);
    cp_async_commit();
  }
  // Weight factors. Uniform phase: a thread's columns are those of the block's first row in
  // every row; it writes their factors to its own slots (read back only by itself: no barrier)
  // and keeps its edge column's in a register.
  float wf_e = 1.0f;
  if constexpr (!kSmemAcc) {
    if (has_w) {
      const int p = bwd_row_phase<Tin, Tdy, V>(a, in_span(first_row) ? first_row : 0);
      wf_e = bwd_stage_own_weights<V, VPT>(a, w_own, p, ring.tid, nthreads);
    }
  }
  if constexpr (kSmemAcc) {
    for (int i = flat; i < slices * table; i += block_threads) acc_base[i] = 0.0f;
    if (w_own != nullptr) bwd_stage_weight_table<V>(a, w_own, lanes, flat, block_threads);
  }
  __syncthreads();
  Probe::mark(BwdPoint::kStaged);

  // Row it of this thread's sequence sits in stage it % S; its edge element in the register
  // queue edge[0 .. S-1] (edge[0]: the row consumed next), shifted once per row so every index
  // is static without unrolling the loop (the shift waits for the edge loads of the rows ahead;
  // aligned rows have none; the rstd goes through the ring so that nothing else has to wait).
  int64_t row = first_row;
#pragma unroll 1
  for (int it = 0; in_span(row); ++it) {
    const int s = it % S;
    const int64_t ahead = row + (S - 1) * step;
    if (in_span(ahead)) {
      bwd_issue_row<Tin, Tdy, V, VPT, S, kPlain, kDsDirect>(a, ahead, (it + S - 1) % S, ring,
                                                            edge[S - 1]);
    }
    cp_async_commit();
    cp_async_wait<S - 1>();
    bwd_consume_row<Tin, Tdy, V, VPT, S, kWarp, kSmemAcc, kPlain, kDsDirect>(
        a, row, s, ring, w_own, wf_e, acc_tab, scratch, edge[0], acc, acc_e);
    if (it == 0) Probe::mark(BwdPoint::kFirstRow);
#pragma unroll
    for (int q = 0; q + 1 < S; ++q) edge[q] = edge[q + 1];
    row += step;
  }
  Probe::mark(BwdPoint::kRowsDone);

  if (!BwdParts<kPlain>::dw(a)) return;
  float* part = a.partials + static_cast<int64_t>(blockIdx.x) * a.n;
  if constexpr (!kWarp) {
    if constexpr (kSmemAcc) {
      __syncthreads();
      for (int c = flat; c < a.n; c += block_threads) part[c] = acc_tab[bwd_slot<V>(c, lanes)];
    } else {
      // Every row sits at the phase of the block's first row.
      const int p = bwd_row_phase<Tin, Tdy, V>(a, blockIdx.x);
      const int nbody = static_cast<int>((a.n - p) / V);
      const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
      bwd_store_partials<V, VPT>(part, false, lanes, p, nbody, edges, ring.tid, nthreads, acc,
                                 acc_e);
      Probe::mark(BwdPoint::kStored);
      if constexpr (kPlain) Probe::after_partials(a);
    }
  } else {
    cp_async_wait<0>();
    __syncthreads();
    float* fold = kSmemAcc ? acc_base : reinterpret_cast<float*>(ring_base);
    if constexpr (!kSmemAcc) {
      // The ring is free now: each warp's register partials go to its table there.
      const int p = bwd_row_phase<Tin, Tdy, V>(a, static_cast<int64_t>(blockIdx.x) * blockDim.y);
      const int nbody = static_cast<int>((a.n - p) / V);
      const int edges = static_cast<int>(a.n - static_cast<int64_t>(nbody) * V);
      bwd_store_partials<V, VPT>(fold + slice * table, true, lanes, p, nbody, edges, ring.tid,
                                 nthreads, acc, acc_e);
      __syncthreads();
    }
    for (int c = flat; c < a.n; c += block_threads) {
      const int slot = bwd_slot<V>(c, lanes);
      float sum = 0.0f;
      for (int w = 0; w < slices; ++w) sum += fold[w * table + slot];
      part[c] = sum;
    }
  }
}

/// Two-pass kernel for rows wider than the ring (weight read from global memory), and for the
/// scalar width.
template <typename Tin, typename Tdy, int V>
__global__ void __launch_bounds__(core::kBwdTwoPassThreads)
    rms_norm_bwd_two_pass_kernel(const RmsNormBwdKernelArgs a) {
  __shared__ float scratch[32];
  const int tid = threadIdx.x;
  const bool recompute = a.rstd == nullptr;
  float* part =
      a.partials != nullptr ? a.partials + static_cast<int64_t>(blockIdx.x) * a.n : nullptr;
  griddep_wait();
  griddep_launch_dependents();
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const bool first = row == blockIdx.x;
    const Tdy* dy = static_cast<const Tdy*>(a.dy) + a.dy_rows.offset(row);
    const Tin* x = static_cast<const Tin*>(a.x) + a.x_rows.offset(row);
    const Tin* ds =
        a.ds != nullptr ? static_cast<const Tin*>(a.ds) + a.ds_rows.offset(row) : nullptr;
    const int64_t dx_off = a.dx_rows.offset(row);
    const int64_t dres_off = a.dres != nullptr ? a.dres_rows.offset(row) : 0;
    const int p = bwd_row_phase<Tin, Tdy, V>(a, row);
    const int64_t nbody = (a.n - p) / V;
    const int edges = static_cast<int>(a.n - nbody * V);
    const bool has_edge = tid < edges;
    const int64_t e_col = has_edge ? edge_col(tid, p, static_cast<int>(nbody), V) : 0;

    float sum_gx = 0.0f, sum_sq = 0.0f;
    for (int64_t j = tid; j < nbody; j += blockDim.x) {
      const int64_t col = p + j * V;
      float dyv[V], xv[V];
      load_pack<Tdy, V>(dy + col, dyv);
      load_pack<Tin, V>(x + col, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        sum_gx += rms_bwd_g(dyv[i], bwd_weight_global(a, col + i)) * xv[i];
        if (recompute) sum_sq += xv[i] * xv[i];
      }
    }
    float e_dy = 0.0f, e_x = 0.0f, e_wf = 1.0f;
    if (has_edge) {
      e_dy = to_float(dy[e_col]);
      e_x = to_float(x[e_col]);
      e_wf = bwd_weight_global(a, e_col);
      sum_gx += rms_bwd_g(e_dy, e_wf) * e_x;
      if (recompute) sum_sq += e_x * e_x;
    }
    float r, c;
    bwd_row_scalars<false>(a, sum_gx, sum_sq, recompute ? 0.0f : a.rstd[row], scratch, &r, &c);

    // Pass two re-reads this thread's own elements (the weight per element from global memory,
    // in the element's own expression: not rms_bwd_vector_dx, whose form changed this kernel's
    // machine code).
    for (int64_t j = tid; j < nbody; j += blockDim.x) {
      const int64_t col = p + j * V;
      float dyv[V], xv[V], out[V];
      load_pack<Tdy, V>(dy + col, dyv);
      load_pack<Tin, V>(x + col, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float xh = xv[i] * r;
        out[i] = rms_bwd_dx(rms_bwd_g(dyv[i], bwd_weight_global(a, col + i)), xh, r, c);
        if (part != nullptr) {
          const float t = rms_bwd_dw_term(dyv[i], xh);
          part[col + i] = first ? t : part[col + i] + t;
        }
      }
      if (ds != nullptr) {
        float dsv[V];
        load_pack<Tin, V>(ds + col, dsv);
#pragma unroll
        for (int i = 0; i < V; ++i) out[i] += dsv[i];
      }
      store_pack_dyn<V>(a.dx, a.dx_dtype, dx_off + col, out);
      if (a.dres != nullptr) store_pack_dyn<V>(a.dres, a.dres_dtype, dres_off + col, out);
    }
    if (has_edge) {
      const float xh = e_x * r;
      float out[1] = {rms_bwd_dx(rms_bwd_g(e_dy, e_wf), xh, r, c)};
      if (part != nullptr) {
        const float t = rms_bwd_dw_term(e_dy, xh);
        part[e_col] = first ? t : part[e_col] + t;
      }
      if (ds != nullptr) out[0] += to_float(ds[e_col]);
      store_pack_dyn<1>(a.dx, a.dx_dtype, dx_off + e_col, out);
      if (a.dres != nullptr) store_pack_dyn<1>(a.dres, a.dres_dtype, dres_off + e_col, out);
    }
  }
}

}  // namespace ropenorm::cuda
