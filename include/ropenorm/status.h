/// @file
/// ropenorm public error type.
///
/// Every entry point returns a Status. A failed Status carries a message that names the op, the
/// argument, what was expected and what was received; when a call fails, no output was written.
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

/// The result of every ropenorm operation: ok, or a code and a message that starts with the op's
/// name (for an argument error it names the argument, what was expected and what was received).
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
  /// Empty on success; otherwise the op's name, a colon and the failure (see the class comment).
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace ropenorm
