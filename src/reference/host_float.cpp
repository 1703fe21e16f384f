// Correctly rounded double -> f16 / bf16 / f32 conversions and their inverses, by integer
// manipulation of the IEEE 754 binary64 encoding (independent of the floating-point environment).
#include "reference/host_float.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ropenorm::ref {
namespace {

// A binary floating-point storage format narrower than double.
struct Format {
  int frac_bits;       // stored fraction bits p
  int exp_bits;        // exponent field width
  int e_min;           // smallest normal exponent
  int e_max;           // largest finite exponent
  uint16_t quiet_nan;  // canonical quiet NaN, positive
};

constexpr Format kBf16{7, 8, -126, 127, 0x7FC0};
constexpr Format kF16{10, 5, -14, 15, 0x7E00};

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Round v to fmt with round-to-nearest-even in one step and return the encoding.
uint16_t round_to_format(double v, const Format& fmt) {
  const uint64_t b = bits_of(v);
  const uint16_t sign = static_cast<uint16_t>((b >> 63) << (fmt.frac_bits + fmt.exp_bits));
  const int biased = static_cast<int>((b >> 52) & 0x7FF);
  const uint64_t frac = b & ((uint64_t{1} << 52) - 1);
  const uint16_t inf = static_cast<uint16_t>(((1u << fmt.exp_bits) - 1) << fmt.frac_bits);

  if (biased == 0x7FF) return sign | (frac != 0 ? fmt.quiet_nan : inf);
  // Zero, and double subnormals (below 2^-1022, far under half the smallest subnormal of either
  // format), round to a signed zero.
  if (biased == 0) return sign;

  const int e = biased - 1023;  // |v| = m * 2^(e - 52), m in [2^52, 2^53)
  if (e > fmt.e_max) return sign | inf;
  const uint64_t m = frac | (uint64_t{1} << 52);

  // Express |v| in units of the target quantum 2^(max(e, e_min) - p): n = m / 2^shift, rounded.
  const int shift = 52 - fmt.frac_bits + (e < fmt.e_min ? fmt.e_min - e : 0);
  uint64_t n;
  if (shift >= 64) {
    n = 0;  // m < 2^53 <= 2^(shift - 11): far below half a quantum
  } else {
    n = m >> shift;
    const uint64_t rem = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (n & 1))) ++n;
  }

  uint64_t enc;
  if (e < fmt.e_min) {
    // Subnormal range: the count of quanta is the encoding; a carry into 2^p lands exactly on the
    // smallest normal (exponent field 1, fraction 0).
    enc = n;
  } else {
    // n in [2^p, 2^(p+1)]; a carry to 2^(p+1) increments the exponent field by itself.
    const uint64_t field = static_cast<uint64_t>(e + (1 << (fmt.exp_bits - 1)) - 1);
    enc = (field << fmt.frac_bits) + n - (uint64_t{1} << fmt.frac_bits);
  }
  if (enc >= inf) return sign | inf;
  return sign | static_cast<uint16_t>(enc);
}

double format_bits_to_double(uint16_t bits, const Format& fmt) {
  const int total = fmt.frac_bits + fmt.exp_bits;
  const bool neg = (bits >> total) & 1;
  const int field = (bits >> fmt.frac_bits) & ((1 << fmt.exp_bits) - 1);
  const int frac = bits & ((1 << fmt.frac_bits) - 1);
  double mag;
  if (field == (1 << fmt.exp_bits) - 1) {
    mag = frac != 0 ? std::numeric_limits<double>::quiet_NaN()
                    : std::numeric_limits<double>::infinity();
  } else if (field == 0) {
    mag = std::ldexp(static_cast<double>(frac), fmt.e_min - fmt.frac_bits);
  } else {
    const int e = field - ((1 << (fmt.exp_bits - 1)) - 1);
    mag = std::ldexp(static_cast<double>(frac + (1 << fmt.frac_bits)), e - fmt.frac_bits);
  }
  return neg ? -mag : mag;
}

}  // namespace

uint16_t double_to_bf16_bits(double v) { return round_to_format(v, kBf16); }

uint16_t double_to_f16_bits(double v) { return round_to_format(v, kF16); }

float double_to_f32(double v) { return static_cast<float>(v); }

double bf16_bits_to_double(uint16_t bits) { return format_bits_to_double(bits, kBf16); }

double f16_bits_to_double(uint16_t bits) { return format_bits_to_double(bits, kF16); }

double round_to_dtype(double v, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<double>(double_to_f32(v));
    case DType::kFloat16:
      return f16_bits_to_double(double_to_f16_bits(v));
    case DType::kBFloat16:
      return bf16_bits_to_double(double_to_bf16_bits(v));
    case DType::kInt32:
    case DType::kInt64:
      break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double ulp_of(double v, DType dtype) {
  int frac_bits;
  int e_min;
  int e_max;
  switch (dtype) {
    case DType::kFloat32:
      frac_bits = 23;
      e_min = -126;
      e_max = 127;
      break;
    case DType::kFloat16:
      frac_bits = kF16.frac_bits;
      e_min = kF16.e_min;
      e_max = kF16.e_max;
      break;
    case DType::kBFloat16:
      frac_bits = kBf16.frac_bits;
      e_min = kBf16.e_min;
      e_max = kBf16.e_max;
      break;
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
  if (std::isnan(v)) return v;
  if (std::isinf(v)) return std::numeric_limits<double>::infinity();
  const double a = std::fabs(v);
  int e = e_min;
  if (a != 0.0) {
    int ex;
    std::frexp(a, &ex);  // a = f * 2^ex, f in [0.5, 1)
    e = ex - 1;
    if (e < e_min) e = e_min;
    if (e > e_max) e = e_max;
  }
  return std::ldexp(1.0, e - frac_bits);
}

}  // namespace ropenorm::ref
