// Validation of RMSNorm calls: every check runs on the host before anything is launched, so a
// failed call writes nothing.
#pragma once

#include "ropenorm/rms_norm.h"

namespace ropenorm::core {

/// The arguments of rms_norm (fused == false) or add_rms_norm (fused == true).
struct RmsNormCall {
  TensorRef x, residual, weight, y, residual_out, rstd;
  RmsNormParams params;
  bool fused = false;
};

/// Checks shapes, dtypes, strides, values and overlaps; then, when device >= 0, that every
/// tensor is on cuda:device. Returns the first problem found.
Status validate_rms_norm(const RmsNormCall& call, int device);

/// Only the device part of validate_rms_norm: every present tensor is on cuda:device. For
/// launchers that ran the rest with device = -1 before looking the device up.
Status validate_rms_norm_devices(const RmsNormCall& call, int device);

}  // namespace ropenorm::core
