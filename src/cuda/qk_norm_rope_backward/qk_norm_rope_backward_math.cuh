// QK-norm + RoPE backward formulas of one head vector (host and device), fp32:
//
//   g_n  = rope_inverse(dout)   (the rotation with s negated: cuda/rope/rope_math.cuh)
//   xh   = x * r
//   g    = g_n * (w + o)
//   m    = sum_d(g * xh) / D
//   dx   = r * (g - xh * m)      with g - xh * m as one fma (one rounding)
//   dw  += g_n * xh             (one fma into the running fp32 partial)
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ROPENORM_QKB_HD __host__ __device__ __forceinline__
#else
#define ROPENORM_QKB_HD inline
#endif

namespace ropenorm::cuda {

ROPENORM_QKB_HD float qk_bwd_fma(float x, float y, float z) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(x, y, z);
#else
  return std::fmaf(x, y, z);
#endif
}

/// m = sum_d(g * xh) / D from the head vector's fp32 sum.
ROPENORM_QKB_HD float qk_bwd_mean(float dot, int64_t head_dim) {
  return dot / static_cast<float>(head_dim);
}

/// dx = r * (g - xh * m).
ROPENORM_QKB_HD float qk_bwd_dx(float g, float xh, float m, float r) {
  return r * qk_bwd_fma(-xh, m, g);
}

/// The running dw partial after one more head vector: acc + g_n * xh.
ROPENORM_QKB_HD float qk_bwd_dw_add(float acc, float gn, float xh) {
  return qk_bwd_fma(gn, xh, acc);
}

}  // namespace ropenorm::cuda
