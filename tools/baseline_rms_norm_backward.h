// The unfused baseline of the RMSNorm backward: what eager PyTorch autograd runs for the Hugging
// Face formula (w * to(x.dtype, x.float() * rsqrt(mean(x^2) + eps))), one simple kernel per step:
// dt = dy * w and dy * t (in x's dtype), the column sum for dw, the row sum of dt * x, then
// dt * r and the mean term in fp32, rounded to x's dtype at the end; the fused add's gradient
// adds ds as its own kernel. Contiguous [M, N] only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::bench {

struct BaselineBackwardBuffers {
  const void* dy;
  const void* x;  ///< the forward's input (s for the fused add)
  const void* weight;
  const float* rstd;  ///< M floats saved by the forward
  const void* t;      ///< M * N: the forward's saved normalised value, x's dtype
  const void* ds;     ///< nullptr: plain backward
  void* dt;           ///< M * N elements of the dtype (dy * w)
  void* pw;           ///< M * N elements of the dtype (dy * t)
  float* dxa;         ///< M * N floats (dt * r)
  float* drs;         ///< M floats (row sums of dt * x)
  void* dx;           ///< M * N: dx, or with ds, the gradient of s (dx + ds)
  void* dx_norm;      ///< fused only: M * N elements, dx before ds is added
  void* dw;           ///< N elements of the dtype
};

/// Enqueues the unfused kernels on `stream` (5 launches; 6 with ds).
Status baseline_rms_norm_backward(const BaselineBackwardBuffers& b, DType dtype, int64_t m,
                                  int64_t n, cudaStream_t stream);

}  // namespace ropenorm::bench
