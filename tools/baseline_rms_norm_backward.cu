// Unfused RMSNorm backward baseline kernels (see baseline_rms_norm_backward.h).
//
// Ownership: the elementwise kernels: thread i owns element i (grid-stride), row = i / N;
// column_sum_kernel: thread c owns column c and loops over the rows; row_sum_kernel: block m owns
// row m, threads stride its columns.
#include <string>

#include "baseline_rms_norm_backward.h"
#include "core/dispatch.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/reduce.cuh"

namespace ropenorm::bench {

namespace {

using cuda::bf16;
using cuda::f16;
using cuda::from_float;
using cuda::to_float;

#define ROPENORM_GRID_STRIDE(i, total)                                          \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (total); \
       i += int64_t{gridDim.x} * blockDim.x)

// dt = dy * w[col] and pw = dy * t, each rounded to the dtype (the bf16 multiplies of eager).
template <typename T>
__global__ void grad_products_kernel(const T* dy, const T* w, const T* t, T* dt, T* pw, int64_t n,
                                     int64_t total) {
  ROPENORM_GRID_STRIDE(i, total) {
    const float g = to_float(dy[i]);
    dt[i] = from_float<T>(g * to_float(w[i % n]));
    pw[i] = from_float<T>(g * to_float(t[i]));
  }
}

template <typename T>
__global__ void column_sum_kernel(const T* pw, T* dw, int64_t m, int64_t n) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= n) return;
  float acc = 0.0f;
  for (int64_t r = 0; r < m; ++r) acc += to_float(pw[r * n + c]);
  dw[c] = from_float<T>(acc);
}

template <typename T>
__global__ void row_sum_kernel(const T* dt, const T* x, float* drs, int64_t n) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * n;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    sum += to_float(dt[base + j]) * to_float(x[base + j]);
  }
  sum = cuda::block_sum(sum, scratch);
  if (threadIdx.x == 0) drs[blockIdx.x] = sum;
}

template <typename T>
__global__ void scale_grad_kernel(const T* dt, const float* rstd, float* dxa, int64_t n,
                                  int64_t total) {
  ROPENORM_GRID_STRIDE(i, total) { dxa[i] = to_float(dt[i]) * rstd[i / n]; }
}

// dx = dxa + x * (-r^3 * drs / N): the rsqrt and mean backward.
template <typename T>
__global__ void mean_term_kernel(const float* dxa, const T* x, const float* rstd, const float* drs,
                                 T* dx, int64_t n, int64_t total) {
  ROPENORM_GRID_STRIDE(i, total) {
    const int64_t r = i / n;
    const float rs = rstd[r];
    const float coef = -rs * rs * rs * drs[r] / static_cast<float>(n);
    dx[i] = from_float<T>(dxa[i] + to_float(x[i]) * coef);
  }
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t total) {
  ROPENORM_GRID_STRIDE(i, total) { out[i] = from_float<T>(to_float(a[i]) + to_float(b[i])); }
}

#undef ROPENORM_GRID_STRIDE

}  // namespace

Status baseline_rms_norm_backward(const BaselineBackwardBuffers& b, DType dtype, int64_t m,
                                  int64_t n, cudaStream_t stream) {
  const int64_t total = m * n;
  const int threads = 256;
  const int64_t blocks64 = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(blocks64 < 65535 * 32 ? blocks64 : 65535 * 32);
  const unsigned col_blocks = static_cast<unsigned>((n + threads - 1) / threads);
  const char* op = "baseline_rms_norm_backward";
  return core::dispatch_float_dtype<f16, bf16>(dtype, op, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = static_cast<const T*>(b.dy);
    const T* x = static_cast<const T*>(b.x);
    T* dt = static_cast<T*>(b.dt);
    T* pw = static_cast<T*>(b.pw);
    grad_products_kernel<T><<<blocks, threads, 0, stream>>>(
        dy, static_cast<const T*>(b.weight), static_cast<const T*>(b.t), dt, pw, n, total);
    column_sum_kernel<T><<<col_blocks, threads, 0, stream>>>(pw, static_cast<T*>(b.dw), m, n);
    row_sum_kernel<T><<<static_cast<unsigned>(m), threads, 0, stream>>>(dt, x, b.drs, n);
    scale_grad_kernel<T><<<blocks, threads, 0, stream>>>(dt, b.rstd, b.dxa, n, total);
    T* dx_norm = static_cast<T*>(b.ds != nullptr ? b.dx_norm : b.dx);
    mean_term_kernel<T><<<blocks, threads, 0, stream>>>(b.dxa, x, b.rstd, b.drs, dx_norm, n, total);
    if (b.ds != nullptr) {
      add_kernel<T><<<blocks, threads, 0, stream>>>(dx_norm, static_cast<const T*>(b.ds),
                                                    static_cast<T*>(b.dx), total);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      return Status(StatusCode::kDeviceError,
                    std::string(op) + ": launch failed: " + cudaGetErrorString(e));
    }
    return Status::Ok();
  });
}

}  // namespace ropenorm::bench
