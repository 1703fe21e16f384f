// Options of the benchmark main job, shared by every op's rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ropenorm::bench {

struct BenchOptions {
  std::vector<int64_t> ms = {1, 32, 512, 4096, 32768};
  std::vector<int64_t> ns = {1024, 4096, 5120, 7168, 8192, 4095};
  std::vector<int64_t> rope_ts = {1, 64, 1024, 16384, 65536};  ///< RoPE tokens T
  std::vector<int64_t> rope_ds = {128, 64, 256};               ///< RoPE head_dim D (= R)
  std::vector<int64_t> qk_ds = {128, 256};                     ///< QK-norm + RoPE head_dim D
  int64_t rope_hq = 32, rope_hk = 8;                           ///< RoPE q and k heads
  bool timing = true;                                          ///< false: verify only
  int cold_reps = 30;                                          ///< cold-L2 samples per row
  int graph_reps = 50;                                         ///< graph replays per row
  int graph_launches = 20;                                     ///< launches captured per graph
  int64_t graph_max_m = 512;      ///< RMSNorm rows up to this M are timed by graph replay
  int64_t rope_graph_max_t = 64;  ///< RoPE shapes up to this T are timed by graph replay
  double copy_gbps = 0;           ///< ceiling measured in the same run
  double launch_floor_us = 0;     ///< floor kernel's CUDA-graph time, same run
  /// Copy floors measured so far (time_launch), by (graph timing, bytes moved), us
  mutable std::map<std::pair<bool, int64_t>, double> copy_floors;
  cudaStream_t stream = nullptr;  ///< a created (capturable) stream for all timing
};

}  // namespace ropenorm::bench
