// Host-side conversions between double and the library's floating-point storage types (f32, f16,
// bf16), each a single correctly rounded step (round to nearest, ties to even), never a double
// rounding through float. Shared by the float64 oracles and the host cache builders.
#pragma once

#include <cstdint>

#include "ropenorm/tensor.h"

namespace ropenorm::ref {

/// bf16 bits of v rounded once to bfloat16 (1 sign, 8 exponent, 7 fraction bits), nearest-even.
///
/// Subnormals are produced below 2^-126 (spacing 2^-133); |v| >= (2 - 2^-8) * 2^127 (max finite
/// plus half an ulp) gives +-inf; NaN gives the quiet NaN 0x7FC0 with v's sign; -0.0 gives 0x8000.
uint16_t double_to_bf16_bits(double v);

/// f16 bits of v rounded once to IEEE binary16 (1 sign, 5 exponent, 10 fraction bits),
/// nearest-even.
///
/// Subnormals below 2^-14 (spacing 2^-24); |v| >= 65520 (65504 plus half an ulp) gives +-inf;
/// NaN gives the quiet NaN 0x7E00 with v's sign.
uint16_t double_to_f16_bits(double v);

/// v rounded once to binary32. A plain conversion, which IEEE 754 (and C++ under the default
/// floating-point environment) defines as round to nearest, ties to even, with gradual underflow
/// and overflow to +-inf.
float double_to_f32(double v);

/// The exact value of a bf16 bit pattern.
double bf16_bits_to_double(uint16_t bits);

/// The exact value of an f16 bit pattern.
double f16_bits_to_double(uint16_t bits);

/// v after one rounding to dtype (f32, f16 or bf16), as a double; NaN for a non-float dtype.
double round_to_dtype(double v, DType dtype);

/// Spacing of dtype's representable numbers in the binade of |v|.
///
///   ulp_of(v) = 2^(max(floor(log2|v|), e_min) - p)
///
/// with p the fraction bits (f32 23, f16 10, bf16 7) and e_min the smallest normal exponent
/// (f32 -126, f16 -14, bf16 -126); so ulp_of(1.0, f32) = 2^-23, and 0 or any subnormal |v| gives
/// the subnormal spacing (f32 2^-149, f16 2^-24, bf16 2^-133). At an exact power of two the
/// spacing above it is returned. |v| beyond the largest finite value gives the spacing of the top
/// binade; inf gives inf; NaN or a non-float dtype gives NaN.
double ulp_of(double v, DType dtype);

}  // namespace ropenorm::ref
