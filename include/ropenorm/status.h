/// @file
/// ropenorm public error type.
///
/// Every operation returns a Status. A failed Status carries a message that names the op and, for
/// an argument error, the argument, what was expected and what was received. Arguments are
/// validated before anything is launched, so a call that fails validation (invalid_argument, or
/// unsupported for a well-formed call the library does not serve) wrote nothing; a device_error
/// (a CUDA runtime error) can come from a launch after earlier launches of the same call.
#pragma once

#include <string>
#include <utility>

namespace ropenorm {

/// What kind of failure a Status reports.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  ///< bad shape, dtype, stride, value, overlap
  kUnsupported = 2,      ///< well-formed but outside what the library serves
  kDeviceError = 3,      ///< wrong device, no device, or a CUDA runtime error
};

/// "ok", "invalid_argument", "unsupported", "device_error".
const char* status_code_name(StatusCode code);

/// The result of every ropenorm operation: ok, or a code and a message that names the op (for an
/// argument error also the argument, what was expected and what was received).
class Status {
 public:
  Status() = default;
  /// A failure (or, with kOk, success) with its message.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  /// Success.
  static Status Ok() { return Status(); }

  /// True for success.
  bool ok() const { return code_ == StatusCode::kOk; }
  /// kOk, or the kind of failure.
  StatusCode code() const { return code_; }
  /// Empty on success; otherwise the failure, as the class comment says.
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace ropenorm
