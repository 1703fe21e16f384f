// float64 oracle for the RMSNorm backward (plain and after the fused residual add), written from
// the analytic gradient of the contract's forward (DESIGN.md section 1) and sharing no code with
// the kernels. Checked against central finite differences of the float64 forward oracle.
#pragma once

#include <cstdint>

namespace ropenorm::ref {

/// One row in float64:
///   r  = *rstd when rstd is given (the saved value the kernel reads), else
///        1 / sqrt(sum_n x[n]^2 / N + eps)
///   xh = x * r,  g = dy * (w + o)   (w null: factor 1)
///   c  = sum_n(g * xh) / N
///   dx = r * (g - xh * c) (+ ds when ds is given: the fused add's gradient of s)
///   dw_acc[n] += dy[n] * xh[n]      (when dw_acc is given)
/// scale (optional) receives, per element, the magnitude the fp32 rounding errors of the
/// kernel's dx are relative to: r * (|g| + |xh| * (|c| + r * sum_n|g * x| / N)) + |ds|.
/// r_out (optional) receives r.
void rms_norm_backward_row_ref(const double* dy, const double* x, const double* w, const double* ds,
                               int64_t n, double eps, double offset, const double* rstd, double* dx,
                               double* dw_acc, double* scale, double* r_out);

}  // namespace ropenorm::ref
