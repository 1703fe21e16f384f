// RoPE formulas shared by the RoPE kernels (host and device):
//
//   forward:  (a, b) -> (a * c - b * s, a * s + b * c)
//   inverse:  the same with s negated (the caller negates s once per pair)
//
// Each output is a difference (or sum) of two fp32 products, evaluated with Kahan's algorithm:
//   w = fl(b * s);  e = fma(-b, s, w) (= w - b * s exactly);  f = fma(a, c, -w);  y = f + e,
// which is within 2 fp32 ulps of the exact a * c - b * s for any inputs, even when the two
// products cancel (a plain fp32 evaluation is only accurate relative to |a c| + |b s|).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define ROPENORM_ROPE_HD __host__ __device__ __forceinline__
#else
#define ROPENORM_ROPE_HD inline
#endif

namespace ropenorm::cuda {

/// fl(x * y) as one rounded product, never contracted into a neighbouring add.
ROPENORM_ROPE_HD float rope_mul_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  volatile float p = x * y;
  return p;
#endif
}

ROPENORM_ROPE_HD float rope_fma(float x, float y, float z) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(x, y, z);
#else
  return std::fmaf(x, y, z);
#endif
}

/// a * c - b * s to within 2 fp32 ulps (Kahan's difference of products).
ROPENORM_ROPE_HD float rope_diff_of_products(float a, float c, float b, float s) {
  const float w = rope_mul_rn(b, s);
  const float e = rope_fma(-b, s, w);
  const float f = rope_fma(a, c, -w);
  return f + e;  // a c - b s = (a c - w) + (w - b s)
}

/// Rotates one pair by the angle whose (scaled) cosine and sine are c and s:
///   a' = a * c - b * s,  b' = a * s + b * c.
ROPENORM_ROPE_HD void rope_rotate_pair(float a, float b, float c, float s, float* a_out,
                                       float* b_out) {
  *a_out = rope_diff_of_products(a, c, b, s);
  *b_out = rope_diff_of_products(a, s, -b, c);
}

}  // namespace ropenorm::cuda
