// Deterministic column sums of fp32 partials (see column_sum.h). Thread c owns column c.
#include <string>

#include "core/dispatch.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"

namespace ropenorm::cuda {
namespace {

template <typename OutT>
__global__ void column_sum_kernel(const float* __restrict__ partials, int64_t parts, int64_t cols,
                                  OutT* __restrict__ out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t p = 0; p < parts; ++p) acc += partials[p * cols + c];
  out[c] = from_float<OutT>(acc);
}

}  // namespace

Status launch_column_sum(const char* op, const float* partials, int64_t parts, int64_t cols,
                         DType out_dtype, void* out, cudaStream_t stream) {
  if (cols <= 0) return Status::Ok();
  return core::dispatch_float_dtype<f16, bf16>(out_dtype, op, "dw", [&](auto tag) -> Status {
    using OutT = typename decltype(tag)::type;
    constexpr int kThreads = 256;
    const int64_t blocks = (cols + kThreads - 1) / kThreads;
    column_sum_kernel<OutT><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
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
