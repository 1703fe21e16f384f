// Fused QK-norm + RoPE backward rows of the main job: for q [T, 32, 128] and k [T, 8, 128] (bf16,
// bf16 weights, full rotary neox, cos/sin from an f32 cache [P = T, R = D], random int64
// positions, saved rstd, out of place, dwq and dwk wanted), T in {1, 1024, 32768}:
//  - "qk_norm_rope_backward": ropenorm's one fused launch (plus the two dw column sums) against
//    the unfused composition of ropenorm's own kernels (rope with inverse = true into a bf16
//    buffer, then rms_norm_backward of q's and of k's head vectors as rows);
//  - "qk_norm_rope_fwd_bwd": forward then backward, ropenorm's two fused ops against the
//    composition (rms_norm of q, of k, rope in place; then the backward composition above).
// Each is verified against the float64 oracle, then timed (CUDA-graph replay for
// T <= rope_graph_max_t, else cold-L2 medians).
#pragma once

#include <ostream>
#include <vector>

#include "bench_options.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Appends one ResultRow per (op, impl, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_qk_norm_rope_backward(const BenchOptions& o, std::vector<ResultRow>* rows,
                                   std::ostream& log);

}  // namespace ropenorm::bench
