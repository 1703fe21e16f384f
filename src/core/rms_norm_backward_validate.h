// Validation of RMSNorm backward calls: every check runs on the host before anything is
// launched, so a failed call writes nothing.
#pragma once

#include <cstddef>

#include "ropenorm/rms_norm_backward.h"

namespace ropenorm::core {

/// The arguments of rms_norm_backward (fused == false) or add_rms_norm_backward (fused == true;
/// `x` then holds the saved sum s).
struct RmsNormBackwardCall {
  TensorRef dy, x, ds, weight, rstd, dx, dresidual, dw, workspace;
  RmsNormBackwardParams params;
  bool fused = false;
};

/// The op's name in messages: "rms_norm_backward" or "add_rms_norm_backward".
const char* rms_norm_backward_op(const RmsNormBackwardCall& call);

/// True when the call produces dw (and so needs the workspace): dw present and rows * n > 0.
bool rms_norm_backward_needs_workspace(const RmsNormBackwardCall& call);

/// Checks shapes, dtypes, strides, values and overlaps; then, when device >= 0, that every
/// tensor the call uses is on cuda:device. Returns the first problem found.
Status validate_rms_norm_backward(const RmsNormBackwardCall& call, int device);

/// Only the device part of validate_rms_norm_backward.
Status validate_rms_norm_backward_devices(const RmsNormBackwardCall& call, int device);

/// When the call needs a workspace: present, f32, contiguous, non-null, at least
/// ceil(bytes / 4) elements (the library has no byte dtype).
Status validate_rms_norm_backward_workspace(const RmsNormBackwardCall& call, size_t bytes);

}  // namespace ropenorm::core
