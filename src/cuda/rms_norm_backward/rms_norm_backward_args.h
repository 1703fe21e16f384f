// The plain-data argument block every RMSNorm backward kernel receives, built by the launcher
// after validation (kernels trust it).
#pragma once

#include <cstdint>

#include "core/row_layout.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

struct RmsNormBwdKernelArgs {
  const void* dy;
  const void* x;       // the forward's input (s for the fused add)
  const void* ds;      // nullptr unless the fused add's ds is given
  const void* weight;  // nullptr: factor 1
  const float* rstd;   // nullptr: recomputed from x with eps
  void* dx;
  void* dres;       // nullptr unless fused add
  float* partials;  // [grid, n] fp32 workspace; nullptr: dw not wanted
  core::RowLayout dy_rows, x_rows, ds_rows, dx_rows, dres_rows;
  int64_t m;
  int64_t n;
  int64_t lanes;  // bwd_table_lanes(n, V): column c's table slot is (c % V) * lanes + c / V
  DType w_dtype;
  DType dx_dtype;
  DType dres_dtype;
  float eps;
  float w_offset;
  bool w_table;  // rows of varying phase: the weight factors staged in shared memory (the plan's
                 // stage_weights), else read per element from global memory
};

}  // namespace ropenorm::cuda
