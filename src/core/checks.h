// Argument checks shared by every op's launcher. Each returns ok or an error whose message
// reads "<op>: argument '<name>': expected <what>, received <what>".
#pragma once

#include <string>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

/// Returns the Status of expr from the enclosing function when it is not ok.
#define ROPENORM_TRY(expr)           \
  do {                               \
    ::ropenorm::Status st_ = (expr); \
    if (!st_.ok()) return st_;       \
  } while (0)

namespace ropenorm::core {

/// The one error format of the library.
Status invalid_arg(const char* op, const char* arg, const std::string& expected,
                   const std::string& received, StatusCode code = StatusCode::kInvalidArgument);

/// Present, well-formed (ndim in [1, kMaxDims]), non-negative sizes and strides.
Status check_present(const char* op, const char* arg, const TensorRef& t);
/// dtype is one of f32, f16, bf16.
Status check_float_dtype(const char* op, const char* arg, const TensorRef& t);
/// Last dim stride 1 (or last dim of size <= 1).
Status check_last_dim_contiguous(const char* op, const char* arg, const TensorRef& t);
/// Same ndim and sizes as ref.
Status check_same_shape(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                        const TensorRef& ref);
/// Non-null data whenever numel > 0.
Status check_data(const char* op, const char* arg, const TensorRef& t);
/// eps finite and in [1e-12, 1e-2].
Status check_eps(const char* op, float eps);
/// A CUDA tensor on device ordinal `device`.
Status check_device(const char* op, const char* arg, const TensorRef& t, int device);
/// No two elements of t share memory (t is written).
Status check_no_internal_overlap(const char* op, const char* arg, const TensorRef& t);
/// Output `out` either is exactly `in` (same pointer, dtype, sizes and strides: in-place, when
/// allow_identical) or shares no byte with it.
Status check_no_overlap(const char* op, const char* out_arg, const TensorRef& out,
                        const char* in_arg, const TensorRef& in, bool allow_identical);
/// Same data, dtype, sizes and strides.
bool same_view(const TensorRef& a, const TensorRef& b);
/// The CUDA device the calling thread will launch on, or an error naming the op.
Status current_device(const char* op, int* device);

}  // namespace ropenorm::core
