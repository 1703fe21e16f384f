// Validation of RMSNorm calls (see rms_norm_validate.h).
#include "core/rms_norm_validate.h"

#include <cmath>
#include <sstream>

#include "core/checks.h"
#include "core/row_checks.h"
#include "core/row_layout.h"

namespace ropenorm::core {

Status validate_rms_norm_devices(const RmsNormCall& c, int device) {
  const char* op = c.fused ? "add_rms_norm" : "rms_norm";
  ROPENORM_TRY(check_device(op, "x", c.x, device));
  ROPENORM_TRY(check_device(op, "y", c.y, device));
  if (c.weight.defined()) ROPENORM_TRY(check_device(op, "weight", c.weight, device));
  if (c.rstd.defined()) ROPENORM_TRY(check_device(op, "rstd", c.rstd, device));
  if (c.fused) {
    ROPENORM_TRY(check_device(op, "residual", c.residual, device));
    ROPENORM_TRY(check_device(op, "residual_out", c.residual_out, device));
  }
  return Status::Ok();
}

Status validate_rms_norm(const RmsNormCall& c, int device) {
  const char* op = c.fused ? "add_rms_norm" : "rms_norm";
  ROPENORM_TRY(check_present(op, "x", c.x));
  ROPENORM_TRY(check_float_dtype(op, "x", c.x));
  ROPENORM_TRY(check_last_dim_contiguous(op, "x", c.x));
  ROPENORM_TRY(check_data(op, "x", c.x));
  const int64_t n = c.x.sizes[c.x.ndim - 1];
  const int64_t m = row_count(c.x);

  if (c.fused) {
    ROPENORM_TRY(check_rows_tensor(op, "residual", c.residual, "x", c.x));
    if (c.residual.dtype != c.x.dtype && c.residual.dtype != DType::kFloat32) {
      return invalid_arg(op, "residual",
                         std::string("dtype ") + dtype_name(c.x.dtype) + " (x's) or f32",
                         dtype_name(c.residual.dtype), StatusCode::kUnsupported);
    }
    ROPENORM_TRY(check_rows_tensor(op, "residual_out", c.residual_out, "x", c.x));
    if (c.residual_out.dtype != c.residual.dtype) {
      return invalid_arg(op, "residual_out",
                         std::string("dtype ") + dtype_name(c.residual.dtype) + " (residual's)",
                         dtype_name(c.residual_out.dtype));
    }
    ROPENORM_TRY(check_no_internal_overlap(op, "residual_out", c.residual_out));
  } else if (c.residual.defined() || c.residual_out.defined()) {
    return invalid_arg(op, c.residual.defined() ? "residual" : "residual_out", "none",
                       "a tensor (use add_rms_norm for the fused add)");
  }

  if (c.weight.defined()) {
    ROPENORM_TRY(check_present(op, "weight", c.weight));
    ROPENORM_TRY(check_float_dtype(op, "weight", c.weight));
    if (c.weight.ndim != 1 || c.weight.sizes[0] != n) {
      return invalid_arg(op, "weight", "shape [" + std::to_string(n) + "] (x's last dim)",
                         c.weight.describe());
    }
    ROPENORM_TRY(check_last_dim_contiguous(op, "weight", c.weight));
    ROPENORM_TRY(check_data(op, "weight", c.weight));
  }
  if (!std::isfinite(c.params.weight_offset)) {
    std::ostringstream os;
    os << c.params.weight_offset;
    return invalid_arg(op, "weight_offset", "a finite value", os.str());
  }
  if (!c.weight.defined() && c.params.weight_offset != 0.0f) {
    std::ostringstream os;
    os << c.params.weight_offset;
    return invalid_arg(op, "weight_offset", "0 when there is no weight", os.str());
  }

  ROPENORM_TRY(check_rows_tensor(op, "y", c.y, "x", c.x));
  ROPENORM_TRY(check_no_internal_overlap(op, "y", c.y));

  if (c.rstd.defined()) {
    ROPENORM_TRY(check_rstd(op, c.rstd, m));
  }

  ROPENORM_TRY(check_eps(op, c.params.eps));
  if (c.params.rounding != Rounding::kExact && c.params.rounding != Rounding::kHfLlama) {
    return invalid_arg(op, "rounding", "exact or hf_llama",
                       std::to_string(static_cast<int>(c.params.rounding)));
  }

  // Outputs against inputs and against each other.
  ROPENORM_TRY(check_no_overlap(op, "y", c.y, "x", c.x, /*allow_identical=*/true));
  ROPENORM_TRY(check_no_overlap(op, "y", c.y, "weight", c.weight, false));
  ROPENORM_TRY(check_no_overlap(op, "rstd", c.rstd, "x", c.x, false));
  ROPENORM_TRY(check_no_overlap(op, "rstd", c.rstd, "weight", c.weight, false));
  ROPENORM_TRY(check_no_overlap(op, "rstd", c.rstd, "y", c.y, false));
  if (c.fused) {
    ROPENORM_TRY(check_no_overlap(op, "y", c.y, "residual", c.residual, false));
    ROPENORM_TRY(check_no_overlap(op, "residual_out", c.residual_out, "residual", c.residual,
                                  /*allow_identical=*/true));
    ROPENORM_TRY(check_no_overlap(op, "residual_out", c.residual_out, "x", c.x, false));
    ROPENORM_TRY(check_no_overlap(op, "residual_out", c.residual_out, "weight", c.weight, false));
    ROPENORM_TRY(check_no_overlap(op, "residual_out", c.residual_out, "y", c.y, false));
    ROPENORM_TRY(check_no_overlap(op, "rstd", c.rstd, "residual", c.residual, false));
    ROPENORM_TRY(check_no_overlap(op, "rstd", c.rstd, "residual_out", c.residual_out, false));
  }

  if (device >= 0) ROPENORM_TRY(validate_rms_norm_devices(c, device));
  return Status::Ok();
}

}  // namespace ropenorm::core
