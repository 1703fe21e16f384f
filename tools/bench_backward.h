// RMSNorm backward rows of the main job: for bf16 N in {1024, 4096, 8192, 4095} x M in {1, 4096,
// 32768} (those of the run's shape lists), verify ropenorm and the unfused baseline against the
// float64 oracle, then time both (cold-L2 medians; CUDA-graph replay for M <= graph_max_m):
//   rms_norm_backward      dy, x, w, saved rstd -> dx, dw
//   add_rms_norm_backward  dy, ds, s, w, saved rstd -> dx, dresidual, dw
//   rms_norm_fwd_bwd       forward (y, rstd) then backward, timed together (end to end: dx and dw
//                          checked against the oracle with r from the forward kernel)
// Bytes model: each input read once, each output written once (dw and rstd included).
#pragma once

#include <ostream>
#include <vector>

#include "bench_options.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Appends one ResultRow per (op, impl, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_backward(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log);

}  // namespace ropenorm::bench
