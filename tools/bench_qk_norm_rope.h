// Fused QK-norm + RoPE rows of the main job: for each standard shape (bf16 q [T, 32, D] and
// k [T, 8, D], bf16 weights, full rotary neox, cos/sin from an f32 cache [P = T, R = D], random
// int64 positions, out of place), verify ropenorm's one-launch kernel and the unfused
// composition of ropenorm's own kernels (per-head rms_norm of q, of k, then rope in place: three
// launches, the intermediate rounded to bf16) against the float64 oracle, then time both
// (CUDA-graph replay for T <= rope_graph_max_t, else cold-L2 medians). ropenorm's call is timed
// twice: with the per-head rstd saved (op qk_norm_rope, a training forward; its bytes count the
// rstd) and without it (op qk_norm_rope_no_rstd, a serving forward; the rotation's bytes), each
// verified on its own poisoned outputs; and with the rstd saved on Hugging Face's cos/sin
// gathered per token instead of the cache (op qk_norm_rope_gathered, the transformers
// integration's source; [T, R] in q's dtype, no positions), verified the same way.
#pragma once

#include <ostream>
#include <vector>

#include "bench_options.h"
#include "receipt.h"
#include "ropenorm/status.h"
#include "verify/qk_norm_rope_case.h"

namespace ropenorm::bench {

/// Appends one ResultRow per (impl, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_qk_norm_rope(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log);

/// The case of one shape of the QK-norm + RoPE forward and backward rows: the main job's standard
/// RoPE case (standard_rope_case: bf16 q [T, o.rope_hq, D] and k [T, o.rope_hk, D], neox, an f32
/// cache of T rows, int64 positions) with weights in q's dtype, eps 1e-6, rstd saved.
verify::QkNormRopeCase qk_norm_rope_bench_case(const BenchOptions& o, int64_t t, int64_t d,
                                               uint64_t seed);

}  // namespace ropenorm::bench
