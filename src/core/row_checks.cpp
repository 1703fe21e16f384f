// Checks of row tensors shared by the RMSNorm validations (see row_checks.h).
#include "core/row_checks.h"

#include <string>

#include "core/checks.h"

namespace ropenorm::core {

Status check_rows_tensor(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                         const TensorRef& ref) {
  ROPENORM_TRY(check_present(op, arg, t));
  ROPENORM_TRY(check_float_dtype(op, arg, t));
  ROPENORM_TRY(check_same_shape(op, arg, t, ref_arg, ref));
  ROPENORM_TRY(check_last_dim_contiguous(op, arg, t));
  return check_data(op, arg, t);
}

Status check_rstd(const char* op, const TensorRef& rstd, int64_t m) {
  ROPENORM_TRY(check_present(op, "rstd", rstd));
  if (rstd.dtype != DType::kFloat32) {
    return invalid_arg(op, "rstd", "dtype f32", dtype_name(rstd.dtype));
  }
  if (rstd.numel() != m || !is_contiguous(rstd)) {
    return invalid_arg(
        op, "rstd", "a contiguous f32 tensor of " + std::to_string(m) + " elements (one per row)",
        rstd.describe());
  }
  return check_data(op, "rstd", rstd);
}

bool is_contiguous(const TensorRef& t) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.sizes[d];
  }
  return true;
}

}  // namespace ropenorm::core
