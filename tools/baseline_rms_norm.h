// The unfused baseline the benchmark compares against: RMSNorm as eager PyTorch runs the Hugging
// Face formula, one simple kernel per step (square-mean -> rstd; x * rstd rounded to x's dtype;
// times the weight), and the residual add as its own kernel before it. Contiguous [M, N] only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::bench {

struct BaselineBuffers {
  const void* x;
  const void* residual;  ///< nullptr: plain RMSNorm
  const void* weight;
  void* y;
  void* residual_out;  ///< receives x + residual when residual != nullptr
  void* tmp;           ///< M * N elements of `dtype` (the normalised, rounded intermediate)
  float* rstd;         ///< M floats
};

/// Enqueues the unfused kernels on `stream` (3 launches; 4 with the residual add).
Status baseline_rms_norm(const BaselineBuffers& b, DType dtype, int64_t m, int64_t n, float eps,
                         cudaStream_t stream);

}  // namespace ropenorm::bench
