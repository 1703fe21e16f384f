// Host builders of RoPE inverse frequencies (float64 and Hugging Face's float32 evaluation) and of
// the [P, R] cos/sin cache. The formulas are documented in include/ropenorm/rope_cache.h.
#include "ropenorm/rope_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/checks.h"
#include "reference/host_float.h"

namespace ropenorm {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Shortest decimal that reads back as v.
std::string num(double v) {
  std::ostringstream os;
  for (int prec = 6; prec <= 17; ++prec) {
    os.str("");
    os.precision(prec);
    os << v;
    if (std::isnan(v) || std::strtod(os.str().c_str(), nullptr) == v) break;
  }
  return os.str();
}

Status bad(const char* op, const char* field, const std::string& expected,
           const std::string& received) {
  return core::invalid_arg(op, field, expected, received);
}

std::string with_type(const std::string& what, RopeType type) {
  return what + " (rope_type " + rope_type_name(type) + ")";
}

Status check_factor(const char* op, const RopeConfig& c) {
  if (!std::isfinite(c.factor) || c.factor < 1.0) {
    return bad(op, "config.factor", with_type("a finite value >= 1", c.type), num(c.factor));
  }
  return Status::Ok();
}

Status validate(const char* op, const RopeConfig& c) {
  switch (c.type) {
    case RopeType::kDefault:
    case RopeType::kLinear:
    case RopeType::kDynamic:
    case RopeType::kLlama3:
    case RopeType::kYarn:
      break;
    default:
      return bad(op, "config.type", "a RopeType (default, linear, dynamic, llama3, yarn)",
                 std::to_string(static_cast<int>(c.type)));
  }
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0) {
    return bad(op, "config.rotary_dim", "an even value > 0", std::to_string(c.rotary_dim));
  }
  if (!std::isfinite(c.theta) || c.theta <= 0.0) {
    return bad(op, "config.theta", "a finite value > 0", num(c.theta));
  }
  switch (c.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      ROPENORM_TRY(check_factor(op, c));
      break;
    case RopeType::kDynamic:
      ROPENORM_TRY(check_factor(op, c));
      if (c.rotary_dim < 4) {
        return bad(op, "config.rotary_dim",
                   with_type("an even value >= 4 (the base exponent is R / (R - 2))", c.type),
                   std::to_string(c.rotary_dim));
      }
      if (c.max_position_embeddings <= 0) {
        return bad(op, "config.max_position_embeddings", with_type("a value > 0", c.type),
                   std::to_string(c.max_position_embeddings));
      }
      if (c.seq_len < 0) {
        return bad(op, "config.seq_len", with_type("a value >= 0 (0 = not given)", c.type),
                   std::to_string(c.seq_len));
      }
      break;
    case RopeType::kLlama3:
      ROPENORM_TRY(check_factor(op, c));
      if (c.original_max_position_embeddings <= 0) {
        return bad(op, "config.original_max_position_embeddings", with_type("a value > 0", c.type),
                   std::to_string(c.original_max_position_embeddings));
      }
      if (!std::isfinite(c.low_freq_factor) || c.low_freq_factor <= 0.0) {
        return bad(op, "config.low_freq_factor", with_type("a finite value > 0", c.type),
                   num(c.low_freq_factor));
      }
      if (!std::isfinite(c.high_freq_factor) || c.high_freq_factor <= c.low_freq_factor) {
        return bad(
            op, "config.high_freq_factor",
            with_type("a finite value > low_freq_factor (" + num(c.low_freq_factor) + ")", c.type),
            num(c.high_freq_factor));
      }
      break;
    case RopeType::kYarn: {
      ROPENORM_TRY(check_factor(op, c));
      if (c.theta <= 1.0) {
        return bad(op, "config.theta", with_type("a finite value > 1 (ln(theta) divides)", c.type),
                   num(c.theta));
      }
      if (c.original_max_position_embeddings <= 0) {
        return bad(op, "config.original_max_position_embeddings", with_type("a value > 0", c.type),
                   std::to_string(c.original_max_position_embeddings));
      }
      if (!std::isfinite(c.beta_fast) || c.beta_fast < 0.0) {
        return bad(op, "config.beta_fast",
                   with_type("a finite value >= 0 (0 = default 32)", c.type), num(c.beta_fast));
      }
      if (!std::isfinite(c.beta_slow) || c.beta_slow < 0.0) {
        return bad(op, "config.beta_slow", with_type("a finite value >= 0 (0 = default 1)", c.type),
                   num(c.beta_slow));
      }
      const double fast = c.beta_fast == 0.0 ? 32.0 : c.beta_fast;
      const double slow = c.beta_slow == 0.0 ? 1.0 : c.beta_slow;
      if (fast < slow) {
        return bad(op, "config.beta_fast",
                   with_type("a value >= beta_slow (" + num(slow) + ")", c.type), num(fast));
      }
      if (!std::isfinite(c.mscale) || c.mscale < 0.0) {
        return bad(op, "config.mscale", with_type("a finite value >= 0 (0 = unset)", c.type),
                   num(c.mscale));
      }
      if (!std::isfinite(c.mscale_all_dim) || c.mscale_all_dim < 0.0) {
        return bad(op, "config.mscale_all_dim",
                   with_type("a finite value >= 0 (0 = unset)", c.type), num(c.mscale_all_dim));
      }
      if (!std::isfinite(c.attention_factor) || c.attention_factor < 0.0) {
        return bad(op, "config.attention_factor",
                   with_type("a finite value >= 0 (0 = unset)", c.type), num(c.attention_factor));
      }
      break;
    }
  }
  return Status::Ok();
}

// The theta the frequencies are built from: theta itself, or dynamic NTK's theta'. Evaluated in
// float64 in Hugging Face's (Python's) order.
double effective_theta(const RopeConfig& c) {
  if (c.type != RopeType::kDynamic) return c.theta;
  const double r = static_cast<double>(c.rotary_dim);
  const double len = static_cast<double>(c.max_position_embeddings);
  const double seq = static_cast<double>(std::max(c.seq_len, c.max_position_embeddings));
  return c.theta * std::pow((c.factor * seq / len) - (c.factor - 1.0), r / (r - 2.0));
}

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double attention_scaling_of(const RopeConfig& c) {
  if (c.type != RopeType::kYarn) return 1.0;
  if (c.attention_factor > 0.0) return c.attention_factor;
  if (c.mscale != 0.0 && c.mscale_all_dim != 0.0) {
    return yarn_get_mscale(c.factor, c.mscale) / yarn_get_mscale(c.factor, c.mscale_all_dim);
  }
  return yarn_get_mscale(c.factor, 1.0);
}

// Yarn's [low, high] ramp bounds in pair-index units (float64, Python's evaluation order).
void yarn_range(const RopeConfig& c, double* low, double* high) {
  const double r = static_cast<double>(c.rotary_dim);
  const double len0 = static_cast<double>(c.original_max_position_embeddings);
  auto corr_dim = [&](double rotations) {
    return (r * std::log(len0 / (rotations * 2.0 * kPi))) / (2.0 * std::log(c.theta));
  };
  double lo = corr_dim(c.beta_fast == 0.0 ? 32.0 : c.beta_fast);
  double hi = corr_dim(c.beta_slow == 0.0 ? 1.0 : c.beta_slow);
  if (c.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, r - 1.0);
  if (lo == hi) hi += 0.001;
  *low = lo;
  *high = hi;
}

// float32 operations, each rounded once: the double result of two float operands is either exact
// (products) or rounded to 53 bits, and 53 >= 2 * 24 + 2 makes the second rounding to float32
// innocuous for +, -, *, /. Every result passes through a volatile float: compilers narrow such
// expressions to float arithmetic and, with FMA hardware and GCC's default -ffp-contract=fast,
// would then fuse a product into the following sum, skipping the product's rounding that torch
// performs.
float fl(double v) {
  volatile float r = static_cast<float>(v);
  return r;
}
float f_add(float a, float b) { return fl(static_cast<double>(a) + b); }
float f_sub(float a, float b) { return fl(static_cast<double>(a) - b); }
float f_mul(float a, float b) { return fl(static_cast<double>(a) * b); }
float f_div(float a, float b) { return fl(static_cast<double>(a) / b); }

void inv_freq_f64(const RopeConfig& c, std::vector<double>* out) {
  const int64_t h = c.rotary_dim / 2;
  const double r = static_cast<double>(c.rotary_dim);
  const double theta = effective_theta(c);
  out->assign(static_cast<std::size_t>(h), 0.0);
  double low = 0.0;
  double high = 0.0;
  if (c.type == RopeType::kYarn) yarn_range(c, &low, &high);
  const double len0 = static_cast<double>(c.original_max_position_embeddings);
  for (int64_t i = 0; i < h; ++i) {
    const double pw = std::pow(theta, static_cast<double>(2 * i) / r);
    const double inv = 1.0 / pw;
    double v = inv;
    switch (c.type) {
      case RopeType::kDefault:
      case RopeType::kDynamic:
        break;
      case RopeType::kLinear:
        v = inv / c.factor;
        break;
      case RopeType::kLlama3: {
        const double low_wavelen = len0 / c.low_freq_factor;
        const double high_wavelen = len0 / c.high_freq_factor;
        const double wavelen = 2.0 * kPi / inv;
        if (wavelen < high_wavelen) {
          v = inv;
        } else if (wavelen > low_wavelen) {
          v = inv / c.factor;
        } else {
          const double s =
              (len0 / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
          v = (1.0 - s) * inv / c.factor + s * inv;
        }
        break;
      }
      case RopeType::kYarn: {
        const double ramp =
            std::min(std::max((static_cast<double>(i) - low) / (high - low), 0.0), 1.0);
        const double extrapolation_factor = 1.0 - ramp;
        const double interpolation = 1.0 / (c.factor * pw);
        v = interpolation * (1.0 - extrapolation_factor) + inv * extrapolation_factor;
        break;
      }
    }
    (*out)[static_cast<std::size_t>(i)] = v;
  }
}

void inv_freq_f32(const RopeConfig& c, std::vector<float>* out) {
  const int64_t h = c.rotary_dim / 2;
  const float r = fl(static_cast<double>(c.rotary_dim));
  const float theta = fl(effective_theta(c));
  const float factor = fl(c.factor);
  out->assign(static_cast<std::size_t>(h), 0.0f);
  double low = 0.0;
  double high = 0.0;
  if (c.type == RopeType::kYarn) yarn_range(c, &low, &high);
  const double len0 = static_cast<double>(c.original_max_position_embeddings);
  for (int64_t i = 0; i < h; ++i) {
    const float e = f_div(fl(static_cast<double>(2 * i)), r);
    const float pw = fl(std::pow(static_cast<double>(theta), static_cast<double>(e)));
    const float inv = f_div(1.0f, pw);
    float v = inv;
    switch (c.type) {
      case RopeType::kDefault:
      case RopeType::kDynamic:
        break;
      case RopeType::kLinear:
        v = f_div(inv, factor);
        break;
      case RopeType::kLlama3: {
        const float low_wavelen = fl(len0 / c.low_freq_factor);
        const float high_wavelen = fl(len0 / c.high_freq_factor);
        const float wavelen = f_mul(f_div(1.0f, inv), fl(2.0 * kPi));
        const float kept = wavelen > low_wavelen ? f_div(inv, factor) : inv;
        const float s = f_div(f_sub(f_mul(f_div(1.0f, wavelen), fl(len0)), fl(c.low_freq_factor)),
                              fl(c.high_freq_factor - c.low_freq_factor));
        const float smoothed = f_add(f_div(f_mul(f_sub(1.0f, s), kept), factor), f_mul(s, kept));
        const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        v = medium ? smoothed : kept;
        break;
      }
      case RopeType::kYarn: {
        const float interpolation = f_div(1.0f, f_mul(factor, pw));
        float ramp = f_div(f_sub(fl(static_cast<double>(i)), fl(low)), fl(high - low));
        ramp = std::min(std::max(ramp, 0.0f), 1.0f);
        const float extrapolation_factor = f_sub(1.0f, ramp);
        v = f_add(f_mul(interpolation, f_sub(1.0f, extrapolation_factor)),
                  f_mul(inv, extrapolation_factor));
        break;
      }
    }
    (*out)[static_cast<std::size_t>(i)] = v;
  }
}

Status check_not_null(const char* op, const char* arg, const void* p) {
  if (p == nullptr) return bad(op, arg, "a non-null pointer", "null");
  return Status::Ok();
}

}  // namespace

const char* rope_style_name(RopeStyle style) {
  switch (style) {
    case RopeStyle::kNeox:
      return "neox";
    case RopeStyle::kGptj:
      return "gptj";
  }
  return "unknown-rope-style";
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
  }
  return "unknown-rope-type";
}

Status parse_rope_type(const std::string& name, RopeType* type) {
  static constexpr RopeType kAll[] = {RopeType::kDefault, RopeType::kLinear, RopeType::kDynamic,
                                      RopeType::kLlama3, RopeType::kYarn};
  for (RopeType t : kAll) {
    if (name == rope_type_name(t)) {
      if (type != nullptr) *type = t;
      return Status::Ok();
    }
  }
  return bad("parse_rope_type", "rope_type", "one of default, linear, dynamic, llama3, yarn",
             "'" + name + "'");
}

Status rope_inv_freq(const RopeConfig& config, std::vector<double>* inv_freq,
                     double* attention_scaling) {
  const char* op = "rope_inv_freq";
  ROPENORM_TRY(validate(op, config));
  ROPENORM_TRY(check_not_null(op, "inv_freq", inv_freq));
  inv_freq_f64(config, inv_freq);
  if (attention_scaling != nullptr) *attention_scaling = attention_scaling_of(config);
  return Status::Ok();
}

Status rope_inv_freq_f32(const RopeConfig& config, std::vector<float>* inv_freq,
                         double* attention_scaling) {
  const char* op = "rope_inv_freq_f32";
  ROPENORM_TRY(validate(op, config));
  ROPENORM_TRY(check_not_null(op, "inv_freq", inv_freq));
  inv_freq_f32(config, inv_freq);
  if (attention_scaling != nullptr) *attention_scaling = attention_scaling_of(config);
  return Status::Ok();
}

namespace {

/// The work of build_rope_cache and build_rope_cache_range. Its errors name op, the function the
/// caller called, and that function's arguments: `count` (num_positions, or build_rope_cache's
/// max_positions) and first_position.
Status build_cache_rows(const char* op, const char* count, const RopeConfig& config,
                        int64_t first_position, int64_t num_positions, DType dtype, void* out) {
  ROPENORM_TRY(validate(op, config));
  if (!is_float_dtype(dtype)) {
    return core::invalid_arg(op, "dtype", "f32, f16 or bf16", dtype_name(dtype),
                             StatusCode::kUnsupported);
  }
  if (first_position < 0 || first_position > kRopeCacheMaxPosition) {
    return bad(op, "first_position", "a value in [0, 2^53]", std::to_string(first_position));
  }
  if (num_positions < 0 || num_positions > kRopeCacheMaxPosition - first_position) {
    return bad(op, count,
               first_position == 0
                   ? std::string("a value in [0, 2^53]")
                   : "a value >= 0 with first_position + " + std::string(count) +
                         " <= 2^53 (first_position " + std::to_string(first_position) + ")",
               std::to_string(num_positions));
  }
  const int64_t r = config.rotary_dim;
  if (num_positions > std::numeric_limits<int64_t>::max() / 8 / r) {
    return bad(op, count, std::string(count) + " * rotary_dim elements addressable",
               std::to_string(num_positions) + " * " + std::to_string(r));
  }
  if (num_positions == 0) return Status::Ok();
  ROPENORM_TRY(check_not_null(op, "out", out));

  std::vector<float> inv;
  inv_freq_f32(config, &inv);
  const double scaling = attention_scaling_of(config);

  const int64_t h = r / 2;
  unsigned char* bytes = static_cast<unsigned char*>(out);
  const std::size_t esize = dtype_size(dtype);
  auto store = [&](int64_t index, double v) {
    unsigned char* dst = bytes + static_cast<std::size_t>(index) * esize;
    if (dtype == DType::kFloat32) {
      const float f = ref::double_to_f32(v);
      std::memcpy(dst, &f, sizeof f);
    } else {
      const uint16_t b =
          dtype == DType::kFloat16 ? ref::double_to_f16_bits(v) : ref::double_to_bf16_bits(v);
      std::memcpy(dst, &b, sizeof b);
    }
  };
  for (int64_t row = 0; row < num_positions; ++row) {
    const double p = static_cast<double>(first_position + row);
    for (int64_t i = 0; i < h; ++i) {
      const double f = static_cast<double>(inv[static_cast<std::size_t>(i)]);
      const double angle = p * f;
      const double err = std::fma(p, f, -angle);  // p * f == angle + err exactly
      double c = std::cos(angle);
      double s = std::sin(angle);
      if (err != 0.0) {  // cos / sin of angle + err by the angle-addition formulas
        const double ce = std::cos(err);
        const double se = std::sin(err);
        const double c0 = c;
        c = c0 * ce - s * se;
        s = s * ce + c0 * se;
      }
      store(row * r + i, c * scaling);
      store(row * r + h + i, s * scaling);
    }
  }
  return Status::Ok();
}

}  // namespace

Status build_rope_cache(const RopeConfig& config, int64_t max_positions, DType dtype, void* out) {
  return build_cache_rows("build_rope_cache", "max_positions", config, 0, max_positions, dtype,
                          out);
}

Status build_rope_cache_range(const RopeConfig& config, int64_t first_position,
                              int64_t num_positions, DType dtype, void* out) {
  return build_cache_rows("build_rope_cache_range", "num_positions", config, first_position,
                          num_positions, dtype, out);
}

}  // namespace ropenorm
