// RMSNorm rows of the main job: for each standard shape, verify ropenorm and the unfused
// baseline against the float64 oracle, then time both (cold-L2 medians; CUDA-graph replay for
// M <= 512), printing each row as it is measured.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "receipt.h"
#include "ropenorm/status.h"

namespace ropenorm::bench {

struct BenchOptions {
  std::vector<int64_t> ms = {1, 32, 512, 4096, 32768};
  std::vector<int64_t> ns = {4096, 5120, 7168, 8192, 4095};
  bool timing = true;     ///< false: verify only
  int cold_reps = 30;     ///< cold-L2 samples per row
  int graph_reps = 50;    ///< graph replays per row
  int graph_launches = 20;  ///< launches captured per graph
  int64_t graph_max_m = 512;  ///< rows up to this M are timed by graph replay
  double copy_gbps = 0;   ///< ceiling measured in the same run
  cudaStream_t stream = nullptr;  ///< a created (capturable) stream for all timing
};

/// Appends one ResultRow per (op, impl, shape) to *rows. Returns the first device error; a
/// verification failure is recorded in the row (passed = false), not returned.
Status bench_rms_norm(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log);

/// Prints a row the way the progress log and the final table show it.
void print_row(std::ostream& os, const ResultRow& r);
void print_header(std::ostream& os);

}  // namespace ropenorm::bench
