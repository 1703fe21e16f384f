// Benchmark receipts: one JSON and one CSV file per run, written and then re-read and checked
// against what was meant to be written. The field names are a stable schema (later ops add rows).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ropenorm/status.h"

namespace ropenorm::bench {

struct ResultRow {
  std::string op;                                      ///< "rms_norm", "add_rms_norm", ...
  std::string impl;                                    ///< "ropenorm", "unfused", ...
  std::string dtype;                                   ///< activation dtype
  std::vector<std::pair<std::string, int64_t>> shape;  ///< e.g. {{"M", 4096}, {"N", 4096}}
  std::string timing;                                  ///< "cold_l2" or "cuda_graph"
  double median_us = 0, min_us = 0, max_us = 0;
  int samples = 0;
  int64_t bytes = 0;       ///< bytes model: each input read once, each output written once
  double gbps = 0;         ///< bytes / median time
  double pct_of_copy = 0;  ///< gbps / copy_bandwidth_gbps * 100
  /// A device-to-device copy of bytes / 2 (the same bytes read and written), timed as this row
  /// is in the same run: the least time any kernel moving these bytes can expect here
  double copy_floor_us = 0;
  double max_err_ulp = 0;  ///< largest error against the float64 oracle, output ulps
  double tol_ulp = 0;      ///< the tolerance table's allowance for that output
  double frac_exact = 0;   ///< fraction of elements equal to the correctly rounded reference
  bool passed = false;     ///< verified within tolerance (and every element written)
  std::string note;
};

struct Receipt {
  std::string device, driver, cuda, torch = "n/a", commit, date;
  double copy_bandwidth_gbps = 0;
  double launch_floor_us = 0;  ///< the floor kernel's CUDA-graph time (measure_launch_floor_us)
  std::vector<ResultRow> results;
};

/// Writes `<stem>.json` and `<stem>.csv`, then re-reads both and checks every row and header
/// field against `r`. Returns an error naming the file and field on any mismatch.
Status write_and_check_receipt(const Receipt& r, const std::string& stem);

}  // namespace ropenorm::bench
