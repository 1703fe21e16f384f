// Helpers shared by the ops' benchmark rows (see bench_common.h).
#include "bench_common.h"

#include "core/checks.h"

namespace ropenorm::bench {

Status time_launch(const BenchOptions& o, bool graph, const Launch& launch, ResultRow* row) {
  TimingStats t;
  if (graph) {
    row->timing = "cuda_graph";
    ROPENORM_TRY(time_graph(launch, o.graph_launches, o.graph_reps, o.stream, &t));
  } else {
    row->timing = "cold_l2";
    ROPENORM_TRY(time_cold_l2(launch, o.cold_reps, o.stream, &t));
  }
  row->median_us = t.median_us;
  row->min_us = t.min_us;
  row->max_us = t.max_us;
  row->samples = t.samples;
  row->gbps = t.median_us > 0 ? static_cast<double>(row->bytes) / (t.median_us * 1e3) : 0;
  row->pct_of_copy = o.copy_gbps > 0 ? 100.0 * row->gbps / o.copy_gbps : 0;
  return Status::Ok();
}

}  // namespace ropenorm::bench
