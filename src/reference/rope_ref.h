// The float64 RoPE oracle: the rotation of one head vector, written from the formula alone
// (shares nothing with the kernels), and the per-pair cos/sin of a position.
#pragma once

#include <cstdint>

#include "ropenorm/rope_cache.h"

namespace ropenorm::ref {

/// Rotates the first R channels of one head vector of D channels; channels >= R are copied.
///
/// Pair i (0 <= i < R/2) is (a, b) = (x[i], x[i + R/2]) for kNeox and (x[2i], x[2i + 1]) for
/// kGptj, and becomes
///
///   (a * c_i - b * s_i,  a * s_i + b * c_i)        forward
///   (a * c_i + b * s_i, -a * s_i + b * c_i)        inverse (the rotation by -angle; RoPE's
///                                                  backward pass)
///
/// with c_i = cos_half[i], s_i = sin_half[i], all in float64.
///
/// @param x, out  D doubles each; out may be x (in place) but must not partially overlap it.
/// @param D       head dim; R <= D, R even and >= 0.
void rope_rotate_ref(const double* x, double* out, int64_t D, int64_t R, RopeStyle style,
                     const double* cos_half, const double* sin_half, bool inverse);

/// cos and sin of pair i at one position, in float64, times the attention scaling s:
///
///   cos_half[i] = cos(position * inv_freq[i]) * s,  sin_half[i] = sin(position * inv_freq[i]) * s
///
/// for 0 <= i < half. The angle is the exact product, as build_rope_cache_range takes it: an fma
/// recovers the rounding error e of the float64 product a, and cos(a + e), sin(a + e) come from
/// the angle-addition formulas.
void rope_cos_sin_ref(int64_t position, const double* inv_freq, int64_t half,
                      double attention_scaling, double* cos_half, double* sin_half);

}  // namespace ropenorm::ref
