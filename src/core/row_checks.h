// Checks of "rows over the last dim" tensors and of the saved rstd shared by the RMSNorm forward
// and backward validations. Errors follow core/checks.h.
#pragma once

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::core {

/// Present, a float dtype, the shape of ref (named ref_arg), last dim contiguous, data present.
Status check_rows_tensor(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                         const TensorRef& ref);
/// A given rstd: present, f32, contiguous, m elements (one per row), data present.
Status check_rstd(const char* op, const TensorRef& rstd, int64_t m);
/// Dense row-major: every dim of size > 1 has the stride of the dims inside it.
bool is_contiguous(const TensorRef& t);

}  // namespace ropenorm::core
