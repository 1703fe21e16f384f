/// @file
/// ropenorm rotary position embedding (RoPE) parameters on the host: the inverse frequencies of
/// every rope_type Hugging Face transformers knows as default / linear / dynamic / llama3 / yarn
/// (modeling_rope_utils.py), their attention scaling, and the cos/sin cache the kernels read.
///
/// Everything here runs on the CPU in plain C++; nothing touches a device.
///
/// Notation: R = rotary_dim (even), h = R / 2 pairs, i in [0, h), theta = rope_theta,
/// e_i = 2i / R, and inv_i = theta^(-e_i) the default inverse frequency of pair i. A pair's angle
/// at position p is p * inv_freq[i]; its wavelength is 2*pi / inv_freq[i].
///
/// The cos/sin cache is [P, R] row-major: row p holds cos(p * inv_freq[i]) * s for i < h, then
/// sin(p * inv_freq[i]) * s for i < h, where s is the attention scaling (the layout vLLM and
/// FlashInfer use).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm {

/// How the channels of a head vector are paired for the rotation (pair i, 0 <= i < R/2).
enum class RopeStyle : int {
  /// (i, i + R/2): Hugging Face rotate_half, GPT-NeoX.
  kNeox = 0,
  /// (2i, 2i + 1): interleaved, GPT-J and Meta's original Llama code.
  kGptj = 1,
};

/// "neox" or "gptj".
const char* rope_style_name(RopeStyle style);

/// Hugging Face's rope_type, one to one.
enum class RopeType : int {
  kDefault = 0,  ///< "default"
  kLinear = 1,   ///< "linear"
  kDynamic = 2,  ///< "dynamic"
  kLlama3 = 3,   ///< "llama3"
  kYarn = 4,     ///< "yarn"
};

/// "default", "linear", "dynamic", "llama3" or "yarn".
const char* rope_type_name(RopeType type);

/// Parses a Hugging Face rope_type string ("default", "linear", "dynamic", "llama3", "yarn").
/// @return ok, or an invalid-argument error naming 'rope_type' and the accepted names.
Status parse_rope_type(const std::string& name, RopeType* type);

/// The rope parameters of one model, named as in Hugging Face's config.rope_parameters (formerly
/// rope_scaling) and the config itself. Only the fields a rope_type reads are checked for it.
///
/// The five rope_types, in float64 (the formulas of rope_inv_freq; rope_inv_freq_f32 evaluates
/// the same expressions in the float32 order Hugging Face uses, see there):
///
/// - default:  inv_freq[i] = 1 / theta^(2i / R);  attention scaling 1.
///
/// - linear:   inv_freq[i] = inv_i / factor;  scaling 1. (Dividing the frequencies is the same
///             as dividing the positions by factor, "position interpolation".)
///
/// - dynamic (dynamic NTK):  with L = max_position_embeddings and S = max(seq_len, L)
///             (seq_len 0 means "not given", i.e. S = L, Hugging Face's value at init time),
///               theta' = theta * ((factor * S / L) - (factor - 1)) ^ (R / (R - 2))
///               inv_freq[i] = 1 / theta'^(2i / R);  scaling 1.
///             So the base only grows once the sequence is longer than L; at S = L the bracket is
///             1 and theta' = theta. Hugging Face recomputes this whenever the running sequence
///             length passes the cached one: build the cache for the seq_len you serve.
///
/// - llama3 (Llama 3.1):  with L0 = original_max_position_embeddings, lo = low_freq_factor,
///             hi = high_freq_factor, wavelen_i = 2*pi / inv_i,
///               low_freq_wavelen = L0 / lo,  high_freq_wavelen = L0 / hi,
///               wavelen_i <  high_freq_wavelen  ->  inv_i                  (high frequencies kept)
///               wavelen_i >  low_freq_wavelen   ->  inv_i / factor         (low frequencies
///               scaled) otherwise (the band, both edges included):
///                 s = (L0 / wavelen_i - lo) / (hi - lo)
///                 inv_freq[i] = (1 - s) * inv_i / factor + s * inv_i
///             s is 1 at wavelen = high_freq_wavelen and 0 at wavelen = low_freq_wavelen, so the
///             three pieces join continuously. Scaling 1.
///
/// - yarn:     with L0 = original_max_position_embeddings,
///               get_mscale(x, m) = 1 if x <= 1, else 0.1 * m * ln(x) + 1
///               attention scaling = attention_factor                              if set (> 0),
///                                 = get_mscale(factor, mscale) / get_mscale(factor,
///                                 mscale_all_dim)
///                                                                  if mscale and mscale_all_dim
///                                                                  set,
///                                 = get_mscale(factor, 1) = 0.1 * ln(factor) + 1   otherwise;
///               corr_dim(b) = R * ln(L0 / (b * 2*pi)) / (2 * ln(theta))
///                             (the pair index whose wavelength fits b times into L0)
///               low = corr_dim(beta_fast), high = corr_dim(beta_slow); when truncate:
///               low = floor(low), high = ceil(high); then low = max(low, 0), high = min(high, R -
///               1) (R - 1, not h - 1: Hugging Face clamps against the full rotary dim); if low ==
///               high: high += 0.001; ramp_j = clamp((j - low) / (high - low), 0, 1)  for j in [0,
///               h) extrapolation_factor_j = 1 - ramp_j inv_freq[j] = (1 / (factor * theta^(2j/R)))
///               * (1 - extrapolation_factor_j)
///                             + (1 / theta^(2j/R)) * extrapolation_factor_j
///             i.e. pairs below `low` keep inv_j (extrapolation), pairs above `high` get
///             inv_j / factor (interpolation), linear blend in between.
///             beta_fast / beta_slow equal to 0 take Hugging Face's defaults 32 / 1 (it reads
///             them as `beta or default`).
struct RopeConfig {
  /// Hugging Face's rope_type: which formula builds the frequencies (see above).
  RopeType type = RopeType::kDefault;
  /// rope_theta, the base. Finite and > 0 (> 1 for yarn, whose corr_dim divides by ln(theta)).
  double theta = 10000.0;
  /// R = int(head_dim * partial_rotary_factor). Even and > 0 (>= 4 for dynamic, whose exponent is
  /// R / (R - 2)).
  int64_t rotary_dim = 0;
  /// linear / dynamic / llama3 / yarn: finite and >= 1 (Hugging Face's validation says ">= 1").
  double factor = 1.0;
  /// dynamic: config.max_position_embeddings (L), > 0.
  int64_t max_position_embeddings = 0;
  /// llama3 and yarn: rope_parameters["original_max_position_embeddings"] (L0), > 0.
  int64_t original_max_position_embeddings = 0;
  /// llama3: finite, > 0, and low_freq_factor < high_freq_factor.
  double low_freq_factor = 1.0;
  /// llama3: see low_freq_factor.
  double high_freq_factor = 4.0;
  /// yarn: finite and >= 0 (0 = Hugging Face's default, 32 and 1); beta_fast >= beta_slow.
  double beta_fast = 32.0;
  /// yarn: see beta_fast.
  double beta_slow = 1.0;
  /// yarn: finite and >= 0; 0 = unset (Hugging Face tests them for truth, so 0 and None agree).
  double mscale = 0.0;
  /// yarn: as mscale.
  double mscale_all_dim = 0.0;
  /// yarn: an explicit attention_factor, finite and >= 0; 0 = unset (derive it from factor).
  double attention_factor = 0.0;
  /// yarn: rope_parameters.get("truncate", True): floor/ceil the correction range.
  bool truncate = true;
  /// dynamic: the sequence length the frequencies are built for; >= 0, 0 = not given.
  int64_t seq_len = 0;
};

/// Inverse frequencies and attention scaling, evaluated in float64 from the formulas documented at
/// RopeConfig (no float32 rounding anywhere).
///
/// @param config             the rope parameters; checked as documented at RopeConfig.
/// @param inv_freq           receives R/2 values.
/// @param attention_scaling  receives the factor applied to cos and sin (1 except for yarn); may
///                           be null.
/// @return ok, or an invalid-argument error naming the field, what was expected and what was
///         received; on error the outputs are untouched.
Status rope_inv_freq(const RopeConfig& config, std::vector<double>* inv_freq,
                     double* attention_scaling);

/// Inverse frequencies rounded to float32 the way Hugging Face computes them: its torch float32
/// expressions replayed operation by operation (fl = round to float32, theta and every other
/// Python scalar rounded to float32 where torch casts it into a float32 operation):
///
///     e_i      = fl(2i / R)                                (arange(0, R, 2).float() / R)
///     pw_i     = fl(fl(theta) ^ e_i)                       (theta' for dynamic, from float64)
///     inv_i    = fl(1 / pw_i)
///     linear   : fl(inv_i / fl(factor))
///     llama3   : w = fl(fl(1 / inv_i) * fl(2*pi)); compares with fl(L0/lo), fl(L0/hi);
///                low band fl(inv_i / fl(factor));
///                s = fl(fl(fl(fl(1 / w) * fl(L0)) - fl(lo)) / fl(hi - lo));
///                band fl(fl(fl(fl(1 - s) * inv_i) / fl(factor)) + fl(s * inv_i))
///     yarn     : interp = fl(1 / fl(fl(factor) * pw_j)), extrap = inv_j,
///                ramp = clamp(fl(fl(j - fl(low)) / fl(high - low)), 0, 1), ef = fl(1 - ramp),
///                fl(fl(interp * fl(1 - ef)) + fl(extrap * ef))     (low, high in float64)
///
/// This is torch's CPU evaluation, where `scalar / tensor` is reciprocal(tensor) * scalar and a
/// float32 tensor divided by a scalar is a true division. Where it can differ from Hugging Face:
///  - the power: torch's float32 pow (vectorised on the CPU, CUDA's powf on the GPU) is not
///    correctly rounded, while pw_i here is (float64 pow, rounded once). The two can disagree by
///    one float32 ulp in pw_i near a rounding midpoint, hence in inv_i.
///  - inv_freq built on a CUDA device: there torch turns `tensor / scalar` into
///    tensor * fl(1 / scalar), which differs from the division when 1 / scalar is inexact (R not
///    a power of two in e_i, or factor not a power of two).
///
/// Measured against transformers 5.17 on torch 2.11 (30 configs of all five types, 1704 values):
/// built on the CPU, 1694 agree bit for bit and 10 differ by one ulp (two once, after a division
/// by 3), each where the exact power lies within 0.02 ulp of a float32 rounding midpoint; built
/// on CUDA, 152 differ, by up to 16 ulps where R or factor is not a power of two.
///
/// @param config             the rope parameters; checked as for rope_inv_freq.
/// @param inv_freq           receives R/2 float32 values.
/// @param attention_scaling  receives the float64 scaling (Hugging Face keeps it a Python float);
///                           may be null.
Status rope_inv_freq_f32(const RopeConfig& config, std::vector<float>* inv_freq,
                         double* attention_scaling);

/// One past the largest position the cache builders take: 2^53, the positions a float64 holds
/// exactly (first_position + num_positions <= kRopeCacheMaxPosition).
constexpr int64_t kRopeCacheMaxPosition = int64_t{1} << 53;

/// Builds the cos/sin cache for positions 0 .. max_positions - 1 (see build_rope_cache_range).
Status build_rope_cache(const RopeConfig& config, int64_t max_positions, DType dtype, void* out);

/// Builds the rows first_position .. first_position + num_positions - 1 of the cos/sin cache into
/// out ([num_positions, R] row-major, host memory, elements of dtype written as raw bits):
///
///     out[r, i]     = round(cos(p * f_i) * s)       p = first_position + r, 0 <= i < R/2
///     out[r, h + i] = round(sin(p * f_i) * s)
///
/// where f_i = rope_inv_freq_f32(config)[i] (Hugging Face's float32 frequencies, so the cache
/// rotates by the same frequencies as the model), s the attention scaling, and the angle p * f_i
/// is taken exactly: it is formed in float64 (exact for p < 2^29, where the product of a 29-bit
/// integer and a 24-bit significand fits in 53 bits; beyond, the rounding error of the product is
/// recovered with an fma and added through the angle-addition formulas). cos and sin are evaluated
/// in float64 and each value is rounded once, to nearest even, to dtype.
///
/// Why not the float32 angle Hugging Face forms (fl(fl(p) * f_i), then a float32 cos): at large
/// positions that product loses the low bits of the angle, e.g. at p = 2^20 + 1 the float32 angle
/// of a pair with f_i near 1 is off by up to 2^-4 rad, so cos and sin are wrong in the second
/// digit. The cache instead holds cos/sin of the exact angle of Hugging Face's frequencies. (At
/// p = 2^20 exactly the float32 product is exact, being a power-of-two scaling; the loss needs a
/// position with more significant bits than the frequency has spare.) Measured with transformers
/// 5.17 (theta 5e5, R 128, float32): at p = 2^20 + 1, 122 of Hugging Face's 128 cos/sin values
/// differ from this cache, by up to 0.022; at p = 2^20, where the angle is exact, 5 (CPU) or 34
/// (CUDA) still differ by one ulp, torch's float32 cos and sin not being correctly rounded.
///
/// @param config          the rope parameters; checked as for rope_inv_freq.
/// @param first_position  the position of the first row, in [0, kRopeCacheMaxPosition].
/// @param num_positions   the number of rows, >= 0 (first_position + num_positions <=
///                        kRopeCacheMaxPosition, and num_positions * R * 8 bytes addressable).
/// @param dtype  f32, f16 or bf16 (else an unsupported-dtype error naming 'dtype').
/// @param out    host memory for num_positions * R elements; may be null when num_positions is 0.
/// @return ok, or an error naming the argument; on error nothing was written.
Status build_rope_cache_range(const RopeConfig& config, int64_t first_position,
                              int64_t num_positions, DType dtype, void* out);

}  // namespace ropenorm
