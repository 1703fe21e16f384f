// Helpers shared by the ops' benchmark rows.
#pragma once

#include "bench_options.h"
#include "bench_timing.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Times `launch` into row's timing fields: CUDA-graph replay (inputs warm in L2, the decode
/// regime) when `graph` is true, else cold-L2 medians; then GB/s from row->bytes, the percentage
/// of the copy ceiling, and the row's copy floor (copy_floor_us).
Status time_launch(const BenchOptions& o, bool graph, const Launch& launch, ResultRow* row);

/// The copy floor of `bytes` moved: the median time of cudaMemcpyAsync of bytes / 2 (rounded
/// down to 16 bytes) from one buffer to another, timed as time_launch times a row (graph or cold
/// L2, o's repetitions), measured once per (graph, bytes) in a run and kept in o.copy_floors.
Status copy_floor_us(const BenchOptions& o, bool graph, int64_t bytes, double* us);

}  // namespace ropenorm::bench
