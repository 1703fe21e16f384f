// Unfused RMSNorm baseline kernels (see baseline_rms_norm.h).
//
// Ownership: rstd_kernel: block m owns row m, threads stride its columns; the elementwise
// kernels: thread i owns element i (grid-stride), row = i / N.
#include <string>

#include "baseline_rms_norm.h"
#include "core/dispatch.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/reduce.cuh"

namespace ropenorm::bench {

namespace {

using cuda::bf16;
using cuda::f16;
using cuda::from_float;
using cuda::to_float;

template <typename T>
__global__ void add_kernel(const T* x, const T* r, T* s, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    s[i] = from_float<T>(to_float(x[i]) + to_float(r[i]));
  }
}

template <typename T>
__global__ void rstd_kernel(const T* x, float* rstd, int64_t n, float eps) {
  __shared__ float scratch[32];
  const T* row = x + blockIdx.x * n;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = to_float(row[j]);
    sum += v * v;
  }
  sum = cuda::block_sum(sum, scratch);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rsqrtf(sum / static_cast<float>(n) + eps);
}

template <typename T>
__global__ void scale_kernel(const T* x, const float* rstd, T* t, int64_t n, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    t[i] = from_float<T>(to_float(x[i]) * rstd[i / n]);
  }
}

template <typename T>
__global__ void weight_kernel(const T* t, const T* w, T* y, int64_t n, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = from_float<T>(to_float(w[i % n]) * to_float(t[i]));
  }
}

}  // namespace

Status baseline_rms_norm(const BaselineBuffers& b, DType dtype, int64_t m, int64_t n, float eps,
                         cudaStream_t stream) {
  const int64_t total = m * n;
  const int threads = 256;
  const int64_t blocks64 = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(blocks64 < 65535 * 32 ? blocks64 : 65535 * 32);
  return core::dispatch_float_dtype<f16, bf16>(dtype, "baseline_rms_norm", "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(b.x);
    if (b.residual != nullptr) {
      add_kernel<T><<<blocks, threads, 0, stream>>>(in, static_cast<const T*>(b.residual),
                                                    static_cast<T*>(b.residual_out), total);
      in = static_cast<const T*>(b.residual_out);
    }
    rstd_kernel<T><<<static_cast<unsigned>(m), threads, 0, stream>>>(in, b.rstd, n, eps);
    scale_kernel<T><<<blocks, threads, 0, stream>>>(in, b.rstd, static_cast<T*>(b.tmp), n, total);
    weight_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<const T*>(b.tmp),
                                                     static_cast<const T*>(b.weight),
                                                     static_cast<T*>(b.y), n, total);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      return Status(StatusCode::kDeviceError,
                    std::string("baseline_rms_norm: launch failed: ") + cudaGetErrorString(e));
    }
    return Status::Ok();
  });
}

}  // namespace ropenorm::bench
