// Deterministic column sums of fp32 partials (see column_sum.h for who owns what).
#include <string>

#include "core/dispatch.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"

namespace ropenorm::cuda {
namespace {

constexpr int kLanes = 32;   // columns per block
constexpr int kSlices = 8;   // partial-row slices per column

template <typename OutT>
__global__ void __launch_bounds__(kLanes * kSlices)
    column_sum_kernel(const float* __restrict__ partials, int64_t parts, int64_t cols,
                      OutT* __restrict__ out) {
  __shared__ float slice_sum[kSlices][kLanes];
  const int lane = threadIdx.x % kLanes;
  const int slice = threadIdx.x / kLanes;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kLanes + lane;
  float acc = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t p = slice; p < parts; p += kSlices) acc += partials[p * cols + c];
  }
  slice_sum[slice][lane] = acc;
  __syncthreads();
  if (slice == 0 && c < cols) {
    float total = slice_sum[0][lane];
#pragma unroll
    for (int j = 1; j < kSlices; ++j) total += slice_sum[j][lane];
    out[c] = from_float<OutT>(total);
  }
}

}  // namespace

Status launch_column_sum(const char* op, const float* partials, int64_t parts, int64_t cols,
                         DType out_dtype, void* out, cudaStream_t stream) {
  if (cols <= 0) return Status::Ok();
  return core::dispatch_float_dtype<f16, bf16>(out_dtype, op, "dw", [&](auto tag) -> Status {
    using OutT = typename decltype(tag)::type;
    const int64_t blocks = (cols + kLanes - 1) / kLanes;
    column_sum_kernel<OutT><<<static_cast<unsigned>(blocks), kLanes * kSlices, 0, stream>>>(
        partials, parts, cols, static_cast<OutT*>(out));
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      return Status(StatusCode::kDeviceError,
                    std::string(op) + ": dw reduction launch failed: " + cudaGetErrorString(err));
    }
    return Status::Ok();
  });
}

}  // namespace ropenorm::cuda
