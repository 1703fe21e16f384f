// The one tolerance table: for each (op, output, dtype, rounding mode), the largest error
// allowed, in units of the output dtype's ulp at the correctly rounded float64 reference.
// Tests and the benchmark's verification both read it; nothing else defines a tolerance.
#pragma once

#include <cstdint>
#include <string>

#include "ropenorm/rms_norm.h"
#include "ropenorm/tensor.h"

namespace ropenorm::ref {

struct ToleranceEntry {
  const char* op;      ///< "rms_norm", "add_rms_norm", ...
  const char* output;  ///< "y", "rstd", "residual_out", ...
  DType dtype;         ///< the output's dtype
  Rounding rounding;   ///< rounding mode the entry applies to
  double max_ulp;      ///< largest |got - round(ref)| / ulp(round(ref))
  const char* why;     ///< where the allowance comes from
};

/// Largest allowed error in output ulps. Aborts the lookup with max_ulp < 0 if no entry exists
/// (a test must then fail: every compared output needs an entry).
double tolerance_ulp(const std::string& op, const std::string& output, DType dtype,
                     Rounding rounding = Rounding::kExact);

/// The whole table (for documentation and receipts).
const ToleranceEntry* tolerance_table(int* count);

/// Of two float dtypes, the one with the wider ulp (bf16 > f16 > f32).
DType coarser_dtype(DType a, DType b);

/// Error statistics of outputs against the float64 reference.
struct ErrorStats {
  double max_ulp = 0.0;      ///< largest error in output ulps (inf for NaN/inf mismatches)
  int64_t count = 0;         ///< elements compared
  int64_t exact = 0;         ///< elements equal to the correctly rounded reference
  int64_t worst_index = -1;  ///< index of the largest error (first one)
  double worst_got = 0.0, worst_ref = 0.0;

  /// Adds one element: `got` as stored in `dtype`, `ref` the unrounded float64 value. The error
  /// is |got - round(dtype, ref)| in ulps of `unit` at that value (default: dtype).
  void add(double got, double ref, DType dtype, int64_t index);
  void add(double got, double ref, DType dtype, int64_t index, DType unit);
  /// As add, with an absolute allowance `allow` subtracted from |got - round(ref)| before the
  /// scaling (for references whose own rounding steps are known, such as a baseline's).
  void add_allowing(double got, double ref, DType dtype, int64_t index, DType unit, double allow);
  void merge(const ErrorStats& o);
  double frac_exact() const { return count ? static_cast<double>(exact) / count : 1.0; }
};

}  // namespace ropenorm::ref
