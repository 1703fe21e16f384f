// One RMSNorm verification case: inputs drawn fresh, outputs poisoned, the kernel run through
// the public API, and every output element compared with the float64 oracle under the one
// tolerance table. Used by the GPU tests and by the command-line verifier.
#pragma once

#include <cstdint>
#include <string>

#include "reference/host_tensor.h"
#include "reference/tolerance.h"
#include "ropenorm/rms_norm.h"

namespace ropenorm::verify {

using ref::ErrorStats;
using ref::HostTensor;

/// What the inputs look like.
enum class Fill {
  kNormal,       ///< N(0, 1) per element
  kZero,         ///< every row zero
  kConstant,     ///< each row a random constant c (y must be (w + o) * sign(c) up to eps)
  kAlternating,  ///< +a, -a, +a, ... with a random per row
  kExtreme,      ///< N(0, 1) plus one element at the largest magnitude the fp32 sum of squares
                 ///< holds (65504 for f16, 1e18 otherwise)
  kNearMax,      ///< every element near the dtype's top (f16: 60000..65504; else 1e18 scale)
  kSubnormal,    ///< tiny values (near the dtype's smallest normal)
};

struct RmsNormCase {
  int64_t m = 1, n = 1;
  DType x_dtype = DType::kBFloat16;
  DType w_dtype = DType::kBFloat16;
  DType y_dtype = DType::kBFloat16;
  DType res_dtype = DType::kBFloat16;  ///< fused only
  bool fused = false;
  bool has_weight = true;
  bool save_rstd = true;
  bool in_place = false;  ///< y aliases x; residual_out aliases residual
  RmsNormParams params{};
  int64_t pitch_pad = 0;         ///< extra elements between rows (row stride n + pitch_pad)
  int64_t storage_offset = 0;    ///< elements before the first row in each buffer (misalignment)
  int64_t residual_offset = -1;  ///< elements before residual's first row (-1: storage_offset)
  int64_t y_offset = -1;     ///< elements before y's first row (-1: storage_offset; out of place)
  int64_t y_pitch_pad = -1;  ///< extra elements between y's rows (-1: pitch_pad; out of place)
  int64_t batch = 0;         ///< > 0: view x as [batch, m / batch, n] stored sequence-major
  Fill fill = Fill::kNormal;
  uint64_t seed = 1;
  int64_t plan_rows = 0;  ///< > 0: the block-path split is planned for this many rows, not m
};

/// Host copies of the inputs of a case (drawn by make_inputs, editable before run_case).
struct RmsNormInputs {
  HostTensor x, residual, weight;  ///< logical [m, n] row-major, [n]
};

struct RmsNormOutcome {
  Status status;
  ErrorStats y, rstd, residual_out;
  double tol_y = 0, tol_rstd = 0, tol_residual = 0;
  int64_t pad_written = 0;  ///< bytes outside the logical elements that changed (must be 0)
  HostTensor y_out, residual_out_host, rstd_out;  ///< logical [m, n] row-major / [m]
  bool passed = false;
  std::string summary;  ///< one line: errors, tolerances, first failure
};

/// Fresh random inputs for the case (seeded by c.seed).
RmsNormInputs make_inputs(const RmsNormCase& c);

/// Runs the case on the current CUDA device and compares with the oracle.
RmsNormOutcome run_case(const RmsNormCase& c, const RmsNormInputs& in);

/// Compares outputs already in `out` (y_out, residual_out_host, rstd_out; status ok) with the
/// oracle; fills the error statistics, tolerances, `passed` and `summary`. Used for any
/// implementation (the benchmark's baselines too) that produced the case's outputs.
void check_outputs(const RmsNormCase& c, const RmsNormInputs& in, RmsNormOutcome* out);

/// Short description: "add_rms_norm bf16 M=7 N=4095 w=f32 y=bf16 exact pad=3 off=1".
std::string describe(const RmsNormCase& c);

}  // namespace ropenorm::verify
