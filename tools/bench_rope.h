// RoPE rows of the main job: for each standard shape (bf16 q [T, 32, D] and k [T, 8, D], full
// rotary, cos/sin from an f32 cache [P = T, R = D], random non-monotone int64 positions, out of
// place), verify ropenorm and the unfused baseline against the float64 oracle, then time both
// (CUDA-graph replay for T <= rope_graph_max_t, else cold-L2 medians), printing each row as it is
// measured. neox for every head_dim; gptj too for D = 128. Beside them, op `rope_gathered`:
// ropenorm on the same shape with Hugging Face's cos/sin gathered per token ([T, R] in q's
// dtype, the transformers integration's source), verified and timed the same way. The style is
// the first word of the row's note.
#pragma once

#include <ostream>
#include <vector>

#include "bench_options.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Appends one ResultRow per (impl, style, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_rope(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log);

/// print_row followed by the row's style (the note's first word).
void print_rope_row(std::ostream& os, const ResultRow& r);

}  // namespace ropenorm::bench
