// The RMSNorm backward launcher behind rms_norm_backward and add_rms_norm_backward, with the row
// count its kernel choice (the lean kernel or the ring kernel, core::bwd_lean_call) is made for
// as an argument: the public entry points pass the call's row count; tests pass others to run
// both kernels on the same rows (they share the split and the grid, so each must give the same
// bits).
#pragma once

#include <cstdint>

#include "core/rms_norm_backward_validate.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"

namespace ropenorm::cuda {

/// Validates `call` (nothing written on failure), picks its kernel as if it had `plan_rows` rows
/// (core::bwd_lean_call's rows argument; the grid follows the call's own rows) and launches it,
/// then the column sum of dw's partial rows, on `stream`. `lean`, when given, is set to whether
/// the lean kernel was launched.
Status run_rms_norm_backward(const core::RmsNormBackwardCall& call, int64_t plan_rows,
                             Stream stream, bool* lean = nullptr);

}  // namespace ropenorm::cuda
