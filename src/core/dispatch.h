// The one place where run-time dtypes become C++ types. Every op's launcher calls these; the
// default case names the value it could not serve.
#pragma once

#include <string>

#include "core/checks.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::core {

/// A type carried as a value, so generic lambdas can receive it.
template <typename T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>{}) with T = float, F16 or BF16 for dt; an error naming `arg` otherwise.
/// F16/BF16 are the caller's 16-bit types (device code passes __half / __nv_bfloat16).
template <typename F16, typename BF16, typename Fn>
Status dispatch_float_dtype(DType dt, const char* op, const char* arg, Fn&& f) {
  switch (dt) {
    case DType::kFloat32:
      return f(TypeTag<float>{});
    case DType::kFloat16:
      return f(TypeTag<F16>{});
    case DType::kBFloat16:
      return f(TypeTag<BF16>{});
    default:
      return invalid_arg(op, arg, "dtype f32, f16 or bf16", dtype_name(dt),
                         StatusCode::kUnsupported);
  }
}

}  // namespace ropenorm::core
