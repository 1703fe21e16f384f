// Helpers shared by the ops' benchmark rows (see bench_common.h).
#include "bench_common.h"

#include <string>
#include <utility>

#include "core/checks.h"
#include "verify/device_buffer.h"

namespace ropenorm::bench {

namespace {

/// Times `launch` as the main job times a row: graph replay when `graph`, else cold-L2 medians.
Status time_as_row(const BenchOptions& o, bool graph, const Launch& launch, TimingStats* t) {
  if (graph) return time_graph(launch, o.graph_launches, o.graph_reps, o.stream, t);
  return time_cold_l2(launch, o.cold_reps, o.stream, t);
}

}  // namespace

Status time_launch(const BenchOptions& o, bool graph, const Launch& launch, ResultRow* row) {
  TimingStats t;
  row->timing = graph ? "cuda_graph" : "cold_l2";
  ROPENORM_TRY(time_as_row(o, graph, launch, &t));
  row->median_us = t.median_us;
  row->min_us = t.min_us;
  row->max_us = t.max_us;
  row->samples = t.samples;
  row->gbps = t.median_us > 0 ? static_cast<double>(row->bytes) / (t.median_us * 1e3) : 0;
  row->pct_of_copy = o.copy_gbps > 0 ? 100.0 * row->gbps / o.copy_gbps : 0;
  return copy_floor_us(o, graph, row->bytes, &row->copy_floor_us);
}

Status copy_floor_us(const BenchOptions& o, bool graph, int64_t bytes, double* us) {
  const auto key = std::make_pair(graph, bytes);
  const auto it = o.copy_floors.find(key);
  if (it != o.copy_floors.end()) {
    *us = it->second;
    return Status::Ok();
  }
  const size_t half = static_cast<size_t>(bytes) / 2 / 16 * 16;
  verify::DeviceBuffer src(half), dst(half);
  src.poison();
  const Launch copy = [&](cudaStream_t s) -> Status {
    const cudaError_t e = cudaMemcpyAsync(dst.get(), src.get(), half, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) return Status::Ok();
    return Status(StatusCode::kDeviceError, std::string("copy floor: ") + cudaGetErrorString(e));
  };
  TimingStats t;
  ROPENORM_TRY(time_as_row(o, graph, copy, &t));
  o.copy_floors[key] = t.median_us;
  *us = t.median_us;
  return Status::Ok();
}

}  // namespace ropenorm::bench
