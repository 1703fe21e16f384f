// float64 oracle for RMSNorm and the fused residual add, written from the formulas of the
// contract (DESIGN.md section 1) and sharing no code with the kernels.
#pragma once

#include <cstdint>

#include "ropenorm/rms_norm.h"
#include "ropenorm/tensor.h"

namespace ropenorm::ref {

/// One row in float64:
///   r = 1 / sqrt(sum_n x[n]^2 / N + eps)
///   exact:    y[n] = x[n] * r * (w[n] + o)
///   hf_llama: y[n] = (w[n] + o) * round_to(norm_dtype, x[n] * r)
/// y is left unrounded (the caller rounds to the output dtype to compare). w may be null
/// (factor 1). rstd may be null.
void rms_norm_row_ref(const double* x, const double* w, int64_t n, double eps, double offset,
                      Rounding rounding, DType norm_dtype, double* y, double* rstd);

/// The fused add as the unfused torch add rounds it: s = round_to(res_dtype, round_to_f32(x + r)).
void add_row_ref(const double* x, const double* residual, int64_t n, DType res_dtype, double* s);

}  // namespace ropenorm::ref
