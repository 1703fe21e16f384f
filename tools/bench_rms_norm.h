// RMSNorm rows of the main job: for each standard shape, verify ropenorm and the unfused
// baseline against the float64 oracle, then time both (cold-L2 medians; CUDA-graph replay for
// M <= 512), printing each row as it is measured.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "bench_options.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Appends one ResultRow per (op, impl, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_rms_norm(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log);

/// Prints a row the way the progress log and the final table show it.
void print_row(std::ostream& os, const ResultRow& r);
void print_header(std::ostream& os);

}  // namespace ropenorm::bench
