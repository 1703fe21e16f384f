// Helpers shared by the ops' benchmark rows.
#pragma once

#include "bench_options.h"
#include "bench_timing.h"
#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

/// Times `launch` into row's timing fields: CUDA-graph replay (inputs warm in L2, the decode
/// regime) when `graph` is true, else cold-L2 medians; then GB/s from row->bytes and the
/// percentage of the copy ceiling.
Status time_launch(const BenchOptions& o, bool graph, const Launch& launch, ResultRow* row);

}  // namespace ropenorm::bench
