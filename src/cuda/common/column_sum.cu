// Deterministic column sums of fp32 partials (see column_sum.h for who owns what).
#include <cstdint>
#include <string>

#include "core/dispatch.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"

namespace ropenorm::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kGroups = 8;                   // column groups per block
constexpr int kSlices = kThreads / kGroups;  // partial-row slices per group
constexpr int kWarps = kThreads / 32;        // a warp holds 32 / kGroups slices

template <int CV>
__device__ __forceinline__ void load_cols(const float* __restrict__ p, float (&v)[CV]) {
  if constexpr (CV == 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
    v[0] = __ldg(p);
  }
}

/// Sums the partial rows of this thread's slice in row order. 16-byte columns: batches of up to
/// 8 rows whose loads are written before their adds (rows past `parts` neither loaded nor added;
/// on sm_90 the compiler issues 5 of the loads before the first add and the other 3 as the first
/// return), so a slice of at most 8 rows (parts up to 512) needs no second batch. Scalar columns:
/// batches of 4 whole rows, then the rest one by one (the batched form of 8 took 50 registers
/// there, against 32, and ran slower at N = 4095). Either way each column's rows are added in the
/// same order.
template <int CV>
__device__ __forceinline__ void slice_sum(const float* __restrict__ col, int64_t parts,
                                          int64_t cols, int slice, float (&acc)[CV]) {
  constexpr int kBatch = CV == 4 ? 8 : 4;  // partial rows loaded before they are added
  int64_t p = slice;
  if constexpr (CV == 4) {
    for (; p < parts; p += kBatch * kSlices) {
      float v[kBatch][CV];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (p + u * kSlices < parts) load_cols<CV>(col + (p + u * kSlices) * cols, v[u]);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (p + u * kSlices < parts) {
#pragma unroll
          for (int i = 0; i < CV; ++i) acc[i] += v[u][i];
        }
      }
    }
  } else {
    for (; p + (kBatch - 1) * kSlices < parts; p += kBatch * kSlices) {
      float v[kBatch][CV];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) load_cols<CV>(col + (p + u * kSlices) * cols, v[u]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
#pragma unroll
        for (int i = 0; i < CV; ++i) acc[i] += v[u][i];
      }
    }
    for (; p < parts; p += kSlices) {
      float v[CV];
      load_cols<CV>(col + p * cols, v);
#pragma unroll
      for (int i = 0; i < CV; ++i) acc[i] += v[i];
    }
  }
}

/// Up to two column sums of the same shape in one launch (grid y picks the target).
template <typename OutT>
struct SumTargets {
  const float* partials[2];
  OutT* out[2];
};

template <typename OutT, int CV>
__global__ void __launch_bounds__(kThreads)
    column_sum_kernel(const SumTargets<OutT> targets, int64_t parts, int64_t cols) {
  const float* __restrict__ partials = targets.partials[blockIdx.y];
  OutT* __restrict__ out = targets.out[blockIdx.y];
  __shared__ float warp_sums[kWarps][kGroups * CV];
  const int group = threadIdx.x % kGroups;
  const int slice = threadIdx.x / kGroups;
  const int64_t block_col = static_cast<int64_t>(blockIdx.x) * kGroups * CV;
  const int64_t c = block_col + group * CV;
  float acc[CV];
#pragma unroll
  for (int i = 0; i < CV; ++i) acc[i] = 0.0f;
  griddep_wait();
  // CV = 4 only when cols % 4 == 0: a group is in range whole or not at all.
  if (c < cols && parts > 0) slice_sum<CV>(partials + c, parts, cols, slice, acc);
  griddep_launch_dependents();
#pragma unroll
  for (int i = 0; i < CV; ++i) {
    acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], kGroups);
    acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 2 * kGroups);
  }
  const int lane = threadIdx.x % 32;
  if (lane < kGroups) {
#pragma unroll
    for (int i = 0; i < CV; ++i) warp_sums[threadIdx.x / 32][lane * CV + i] = acc[i];
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < kGroups * CV && block_col + t < cols) {
    float total = warp_sums[0][t];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) total += warp_sums[w][t];
    out[block_col + t] = from_float<OutT>(total);
  }
}

static_assert(32 % kGroups == 0 && 32 / kGroups == 4, "the warp butterfly adds 4 slices");

}  // namespace

Status launch_column_sums(const char* op, const float* const* partials, void* const* out, int count,
                          int64_t parts, int64_t cols, DType out_dtype, cudaStream_t stream) {
  if (cols <= 0 || count <= 0) return Status::Ok();
  if (count > 2) {
    return Status(
        StatusCode::kUnsupported,
        std::string(op) + ": at most 2 column sums per launch, got " + std::to_string(count));
  }
  bool wide = cols % 4 == 0;
  for (int i = 0; i < count; ++i) wide = wide && reinterpret_cast<uintptr_t>(partials[i]) % 16 == 0;
  return core::dispatch_float_dtype<f16, bf16>(out_dtype, op, "dw", [&](auto tag) -> Status {
    using OutT = typename decltype(tag)::type;
    SumTargets<OutT> t{};
    for (int i = 0; i < count; ++i) {
      t.partials[i] = partials[i];
      t.out[i] = static_cast<OutT*>(out[i]);
    }
    const int cv = wide ? 4 : 1;
    const int64_t per_block = static_cast<int64_t>(kGroups) * cv;
    const dim3 grid(static_cast<unsigned>((cols + per_block - 1) / per_block),
                    static_cast<unsigned>(count));
    const cudaError_t err = wide ? launch_with_pdl(column_sum_kernel<OutT, 4>, grid, dim3(kThreads),
                                                   0, stream, t, parts, cols)
                                 : launch_with_pdl(column_sum_kernel<OutT, 1>, grid, dim3(kThreads),
                                                   0, stream, t, parts, cols);
    if (err != cudaSuccess) {
      return Status(StatusCode::kDeviceError,
                    std::string(op) + ": dw reduction launch failed: " + cudaGetErrorString(err));
    }
    return Status::Ok();
  });
}

Status launch_column_sum(const char* op, const float* partials, int64_t parts, int64_t cols,
                         DType out_dtype, void* out, cudaStream_t stream) {
  return launch_column_sums(op, &partials, &out, 1, parts, cols, out_dtype, stream);
}

}  // namespace ropenorm::cuda
