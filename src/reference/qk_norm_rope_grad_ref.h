// The float64 oracle of the fused QK-norm + RoPE backward: the analytic gradient of one head
// vector, composed from the formulas of the contract (DESIGN.md section 1) and sharing no code
// with the kernels. The CPU tests check it against central finite differences of the forward
// oracle (rms_norm_row_ref, then rope_rotate_ref).
#pragma once

#include <cstdint>

#include "ropenorm/rope_cache.h"

namespace ropenorm::ref {

/// Gradient of out = rope(n), n[d] = x[d] * r * (w[d] + o), r = 1 / sqrt(sum x^2 / D + eps), with
/// respect to x and w, for the incoming gradient dout (all float64):
///
///   g_n  = rope_inverse(dout)          (the transposed rotation; channels >= R: dout[d])
///   xh   = x * r
///   g    = g_n * (w + o)
///   dx   = r * (g - xh * sum_d(g * xh) / D)
///   dw[d] += g_n[d] * xh[d]           (accumulated: the caller sums over head vectors)
///
/// @param x, dout  D values each; w: D values (the weight, not the factor).
/// @param cos_half, sin_half  c_i and s_i of the R / 2 pairs at this head vector's position.
/// @param rstd     when non-null, r is *rstd (the value the forward saved) instead of recomputed.
/// @param dx       D values out. dw: D values accumulated into, or null.
/// @param gn       D values out (g_n), or null. r_out: r used, or null.
void qk_norm_rope_grad_row_ref(const double* x, const double* dout, const double* w, int64_t D,
                               int64_t R, RopeStyle style, const double* cos_half,
                               const double* sin_half, double eps, double offset,
                               const double* rstd, double* dx, double* dw, double* gn,
                               double* r_out);

}  // namespace ropenorm::ref
