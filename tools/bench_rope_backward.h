// RoPE backward rows of the main job: for bf16 q [T, 32, 128] and k [T, 8, 128] (the gradients
// dq', dk' reaching the rotated q and k), full rotary neox, cos/sin from an f32 cache [P = T,
// R = D], random int64 positions, out of place, T in {1, 1024, 32768}:
//  - "rope_backward": ropenorm's rope with inverse = true (one launch) against the unfused
//    baseline with the gathered sin negated (baseline_rope.h);
//  - "rope_fwd_bwd": the forward on q, k, then the backward on dq', dk' (ropenorm: one launch
//    each way; the baseline: 5 + 5).
// Each is verified against the float64 oracle (fwd_bwd: both halves), then timed (CUDA-graph
// replay for T <= rope_graph_max_t, else cold-L2 medians).
#pragma once

#include <ostream>
#include <vector>

#include "bench_options.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Appends one ResultRow per (op, impl, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_rope_backward(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log);

}  // namespace ropenorm::bench
