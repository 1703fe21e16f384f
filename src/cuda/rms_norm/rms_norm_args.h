// The plain-data argument block every RMSNorm kernel receives, built by the launcher after
// validation (kernels trust it).
#pragma once

#include <cstdint>

#include "core/row_layout.h"
#include "ropenorm/rms_norm.h"

namespace ropenorm::cuda {

/// Marker for "no residual input" in the kernel templates.
struct NoResidual {};

/// Everything a kernel needs; built and validated by the launcher.
struct RmsNormKernelArgs {
  const void* x;
  const void* residual;  // nullptr unless fused add
  const void* weight;    // nullptr: factor 1
  void* y;
  void* residual_out;  // nullptr unless fused add
  float* rstd;         // nullptr: not saved
  core::RowLayout x_rows, r_rows, y_rows, ro_rows;
  int64_t m;
  int64_t n;
  DType w_dtype;
  DType y_dtype;
  float eps;
  float w_offset;
  Rounding rounding;
  bool weight_in_smem;  // stage (w + o) in shared memory (rows kernel; n <= kSmemWeightMax)
  bool weight_vec;      // weight 16-byte aligned: vector reads of it on rows of phase 0
};

}  // namespace ropenorm::cuda
