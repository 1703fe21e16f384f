// Validation of RMSNorm backward calls (see rms_norm_backward_validate.h).
#include "core/rms_norm_backward_validate.h"

#include <cmath>
#include <sstream>
#include <string>

#include "core/checks.h"
#include "core/row_checks.h"
#include "core/row_layout.h"

namespace ropenorm::core {

namespace {

std::string float_str(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A [n] vector: weight or dw.
Status check_column_vector(const char* op, const char* arg, const TensorRef& t, int64_t n,
                           const char* what) {
  ROPENORM_TRY(check_present(op, arg, t));
  ROPENORM_TRY(check_float_dtype(op, arg, t));
  if (t.ndim != 1 || t.sizes[0] != n) {
    return invalid_arg(op, arg, "shape [" + std::to_string(n) + "] (" + what + ")", t.describe());
  }
  ROPENORM_TRY(check_last_dim_contiguous(op, arg, t));
  return check_data(op, arg, t);
}

}  // namespace

const char* rms_norm_backward_op(const RmsNormBackwardCall& c) {
  return c.fused ? "add_rms_norm_backward" : "rms_norm_backward";
}

bool rms_norm_backward_needs_workspace(const RmsNormBackwardCall& c) {
  return c.dw.defined() && c.dy.defined() && c.dy.numel() > 0;
}

Status validate_rms_norm_backward_devices(const RmsNormBackwardCall& c, int device) {
  const char* op = rms_norm_backward_op(c);
  const char* x_arg = c.fused ? "s" : "x";
  ROPENORM_TRY(check_device(op, "dy", c.dy, device));
  ROPENORM_TRY(check_device(op, x_arg, c.x, device));
  ROPENORM_TRY(check_device(op, "dx", c.dx, device));
  if (c.ds.defined()) ROPENORM_TRY(check_device(op, "ds", c.ds, device));
  if (c.dresidual.defined()) ROPENORM_TRY(check_device(op, "dresidual", c.dresidual, device));
  if (c.weight.defined()) ROPENORM_TRY(check_device(op, "weight", c.weight, device));
  if (c.rstd.defined()) ROPENORM_TRY(check_device(op, "rstd", c.rstd, device));
  if (c.dw.defined()) ROPENORM_TRY(check_device(op, "dw", c.dw, device));
  if (rms_norm_backward_needs_workspace(c) && c.workspace.defined()) {
    ROPENORM_TRY(check_device(op, "workspace", c.workspace, device));
  }
  return Status::Ok();
}

Status validate_rms_norm_backward(const RmsNormBackwardCall& c, int device) {
  const char* op = rms_norm_backward_op(c);
  const char* x_arg = c.fused ? "s" : "x";
  ROPENORM_TRY(check_present(op, "dy", c.dy));
  ROPENORM_TRY(check_float_dtype(op, "dy", c.dy));
  ROPENORM_TRY(check_last_dim_contiguous(op, "dy", c.dy));
  ROPENORM_TRY(check_data(op, "dy", c.dy));
  const int64_t n = c.dy.sizes[c.dy.ndim - 1];
  const int64_t m = row_count(c.dy);
  ROPENORM_TRY(check_rows_tensor(op, x_arg, c.x, "dy", c.dy));

  if (c.fused) {
    if (c.ds.defined()) {
      ROPENORM_TRY(check_rows_tensor(op, "ds", c.ds, "dy", c.dy));
      if (c.ds.dtype != c.x.dtype) {
        return invalid_arg(op, "ds", std::string("dtype ") + dtype_name(c.x.dtype) + " (s's)",
                           dtype_name(c.ds.dtype));
      }
    }
    // Absent dresidual: dx alone carries the gradient of s (the caller's for x and residual).
    if (c.dresidual.defined()) {
      ROPENORM_TRY(check_rows_tensor(op, "dresidual", c.dresidual, "dy", c.dy));
      ROPENORM_TRY(check_no_internal_overlap(op, "dresidual", c.dresidual));
    }
  } else if (c.ds.defined() || c.dresidual.defined()) {
    return invalid_arg(op, c.ds.defined() ? "ds" : "dresidual", "none",
                       "a tensor (use add_rms_norm_backward for the fused add)");
  }

  if (c.weight.defined()) {
    ROPENORM_TRY(check_column_vector(op, "weight", c.weight, n, "dy's last dim"));
  }
  if (!std::isfinite(c.params.weight_offset)) {
    return invalid_arg(op, "weight_offset", "a finite value", float_str(c.params.weight_offset));
  }
  if (!c.weight.defined() && c.params.weight_offset != 0.0f) {
    return invalid_arg(op, "weight_offset", "0 when there is no weight",
                       float_str(c.params.weight_offset));
  }

  if (c.rstd.defined()) {
    ROPENORM_TRY(check_rstd(op, c.rstd, m));
  } else {
    // eps only enters when r is recomputed.
    ROPENORM_TRY(check_eps(op, c.params.eps));
  }

  ROPENORM_TRY(check_rows_tensor(op, "dx", c.dx, "dy", c.dy));
  ROPENORM_TRY(check_no_internal_overlap(op, "dx", c.dx));

  if (c.dw.defined()) {
    if (!c.weight.defined()) {
      return invalid_arg(op, "dw", "none (there is no weight)", c.dw.describe());
    }
    ROPENORM_TRY(check_column_vector(op, "dw", c.dw, n, "weight's"));
    if (c.dw.dtype != c.weight.dtype) {
      return invalid_arg(op, "dw",
                         std::string("dtype ") + dtype_name(c.weight.dtype) + " (weight's)",
                         dtype_name(c.dw.dtype));
    }
  }
  const bool use_ws = rms_norm_backward_needs_workspace(c);
  if (use_ws && c.workspace.defined()) {
    ROPENORM_TRY(check_present(op, "workspace", c.workspace));
    if (c.workspace.dtype != DType::kFloat32 || !is_contiguous(c.workspace)) {
      return invalid_arg(op, "workspace", "a contiguous f32 tensor", c.workspace.describe());
    }
    ROPENORM_TRY(check_data(op, "workspace", c.workspace));
  }

  // Outputs against inputs and against each other.
  ROPENORM_TRY(check_no_overlap(op, "dx", c.dx, "dy", c.dy, /*allow_identical=*/true));
  ROPENORM_TRY(check_no_overlap(op, "dx", c.dx, x_arg, c.x, false));
  ROPENORM_TRY(check_no_overlap(op, "dx", c.dx, "weight", c.weight, false));
  ROPENORM_TRY(check_no_overlap(op, "dx", c.dx, "rstd", c.rstd, false));
  if (c.fused) {
    ROPENORM_TRY(check_no_overlap(op, "dx", c.dx, "ds", c.ds, /*allow_identical=*/true));
    ROPENORM_TRY(check_no_overlap(op, "dresidual", c.dresidual, "ds", c.ds, true));
    ROPENORM_TRY(check_no_overlap(op, "dresidual", c.dresidual, "dy", c.dy, true));
    ROPENORM_TRY(check_no_overlap(op, "dresidual", c.dresidual, "s", c.x, false));
    ROPENORM_TRY(check_no_overlap(op, "dresidual", c.dresidual, "weight", c.weight, false));
    ROPENORM_TRY(check_no_overlap(op, "dresidual", c.dresidual, "rstd", c.rstd, false));
    ROPENORM_TRY(check_no_overlap(op, "dresidual", c.dresidual, "dx", c.dx, false));
  }
  const struct {
    const char* name;
    const TensorRef& t;
  } others[] = {{"dy", c.dy},
                {x_arg, c.x},
                {"ds", c.ds},
                {"weight", c.weight},
                {"rstd", c.rstd},
                {"dx", c.dx},
                {"dresidual", c.dresidual}};
  for (const auto& o : others) {
    ROPENORM_TRY(check_no_overlap(op, "dw", c.dw, o.name, o.t, false));
  }
  if (use_ws) {
    for (const auto& o : others) {
      ROPENORM_TRY(check_no_overlap(op, "workspace", c.workspace, o.name, o.t, false));
    }
    ROPENORM_TRY(check_no_overlap(op, "workspace", c.workspace, "dw", c.dw, false));
  }

  if (device >= 0) ROPENORM_TRY(validate_rms_norm_backward_devices(c, device));
  return Status::Ok();
}

Status validate_rms_norm_backward_workspace(const RmsNormBackwardCall& c, size_t bytes) {
  if (!rms_norm_backward_needs_workspace(c) || bytes == 0) return Status::Ok();
  const char* op = rms_norm_backward_op(c);
  const int64_t need = static_cast<int64_t>((bytes + 3) / 4);
  const std::string expected =
      "an f32 device tensor of at least " + std::to_string(need) +
      " elements (rms_norm_backward_workspace_size = " + std::to_string(bytes) + " bytes)";
  if (!c.workspace.defined()) return invalid_arg(op, "workspace", expected, "none");
  if (c.workspace.numel() < need)
    return invalid_arg(op, "workspace", expected, c.workspace.describe());
  return Status::Ok();
}

}  // namespace ropenorm::core
