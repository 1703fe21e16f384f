// Unfused RoPE baseline kernels (see baseline_rope.h).
//
// Ownership: every kernel is elementwise over its output: thread i owns element i (grid-stride);
// gather_kernel's element i is (token i / D, column i % D) of both tables, the others' is
// (token, head, column) of a [T, H, D] tensor.
#include <string>

#include "baseline_rope.h"
#include "core/dispatch.h"
#include "cuda/common/dtype.cuh"

namespace ropenorm::bench {

namespace {

using cuda::bf16;
using cuda::f16;
using cuda::from_float;
using cuda::to_float;

// The pair a column belongs to.
__device__ __forceinline__ int64_t pair_of(int64_t j, int64_t h, bool neox) {
  return neox ? (j < h ? j : j - h) : j / 2;
}

template <typename T, typename C>
__global__ void gather_kernel(const C* cache, const int64_t* positions, T* cos, T* sin, int64_t d,
                              bool neox, bool inverse, int64_t total) {
  const int64_t h = d / 2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i % d;
    const C* row = cache + positions[i / d] * d;
    const int64_t pair = pair_of(j, h, neox);
    cos[i] = from_float<T>(to_float(row[pair]));
    const float s = to_float(row[h + pair]);
    sin[i] = from_float<T>(inverse ? -s : s);
  }
}

template <typename T>
__global__ void rotate_kernel(const T* x, T* rot, int64_t d, bool neox, int64_t total) {
  const int64_t h = d / 2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i % d;
    float v;
    if (neox) {
      v = j < h ? -to_float(x[i + h]) : to_float(x[i - h]);
    } else {
      v = (j % 2 == 0) ? -to_float(x[i + 1]) : to_float(x[i - 1]);
    }
    rot[i] = from_float<T>(v);  // exact: a negation or a copy
  }
}

template <typename T>
__global__ void apply_kernel(const T* x, const T* rot, const T* cos, const T* sin, T* out,
                             int64_t d, int64_t heads, int64_t total) {
  const int64_t row = heads * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t cs = (i / row) * d + i % d;
    // Each eager op rounds its result to T; the _rn intrinsics keep the f32 case from being
    // contracted into an fma.
    const T a = from_float<T>(__fmul_rn(to_float(x[i]), to_float(cos[cs])));
    const T b = from_float<T>(__fmul_rn(to_float(rot[i]), to_float(sin[cs])));
    out[i] = from_float<T>(__fadd_rn(to_float(a), to_float(b)));
  }
}

unsigned grid_for(int64_t total, int threads) {
  const int64_t blocks = (total + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 32 ? (blocks > 0 ? blocks : 1) : 65535 * 32);
}

}  // namespace

Status baseline_rope(const RopeBaselineBuffers& b, DType dtype, RopeStyle style, bool inverse,
                     int64_t t, int64_t hq, int64_t hk, int64_t d, cudaStream_t stream) {
  if (t <= 0) return Status::Ok();
  const int threads = 256;
  const bool neox = style == RopeStyle::kNeox;
  return core::dispatch_float_dtype<f16, bf16>(dtype, "baseline_rope", "q", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* cos = static_cast<T*>(b.cos);
    T* sin = static_cast<T*>(b.sin);
    const Status st = core::dispatch_float_dtype<f16, bf16>(
        b.cache_dtype, "baseline_rope", "cache", [&](auto ctag) {
          using C = typename decltype(ctag)::type;
          gather_kernel<T, C><<<grid_for(t * d, threads), threads, 0, stream>>>(
              static_cast<const C*>(b.cache), b.positions, cos, sin, d, neox, inverse, t * d);
          return Status::Ok();
        });
    if (!st.ok()) return st;
    const void* ins[2] = {b.q, b.k};
    void* outs[2] = {b.q_out, b.k_out};
    const int64_t heads[2] = {hq, hk};
    for (int w = 0; w < 2; ++w) {
      const int64_t total = t * heads[w] * d;
      if (total == 0) continue;
      const T* x = static_cast<const T*>(ins[w]);
      T* rot = static_cast<T*>(b.rot);
      rotate_kernel<T><<<grid_for(total, threads), threads, 0, stream>>>(x, rot, d, neox, total);
      apply_kernel<T><<<grid_for(total, threads), threads, 0, stream>>>(
          x, rot, cos, sin, static_cast<T*>(outs[w]), d, heads[w], total);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      return Status(StatusCode::kDeviceError,
                    std::string("baseline_rope: launch failed: ") + cudaGetErrorString(e));
    }
    return Status::Ok();
  });
}

}  // namespace ropenorm::bench
