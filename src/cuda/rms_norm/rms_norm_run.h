// The RMSNorm launcher behind rms_norm and add_rms_norm, with the row count its block-path split
// is planned for as an argument: the public entry points pass the call's row count; tests pass
// others to run every split the planner can choose on the same rows (the block path's reduction
// is split-invariant, so each must give the same bits).
#pragma once

#include <cstdint>

#include "core/rms_norm_validate.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"

namespace ropenorm::cuda {

/// Validates `call` (nothing written on failure), plans it as if it had `plan_rows` rows
/// (plan_rms_norm's rows argument) and launches it on `stream`.
Status run_rms_norm(const core::RmsNormCall& call, int64_t plan_rows, Stream stream);

}  // namespace ropenorm::cuda
