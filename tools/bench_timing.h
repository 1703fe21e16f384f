// Timing on the device: copy-bandwidth ceiling, launch floor, cold-L2 CUDA-event medians,
// CUDA-graph replay.
//
// Every launch callback enqueues on the stream it is given and returns its Status; timings are
// the launch's device time only (events bracket it; the L2 flush sits outside the events).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "ropenorm/status.h"

namespace ropenorm::bench {

struct TimingStats {
  double median_us = 0, min_us = 0, max_us = 0;
  int samples = 0;
};

using Launch = std::function<Status(cudaStream_t)>;

/// Device-to-device copy bandwidth, counting bytes read plus bytes written, in GB/s (median of
/// `reps` copies of `bytes`).
double measure_copy_gbps(size_t bytes, int reps, cudaStream_t stream);

/// Launch floor: per-launch device time (time_graph, per_graph launches, reps replays) of a
/// kernel that does the least any kernel of the library does, launched as they are
/// (programmatic dependent launch): one warp waits for the previous kernel, reads 16 bytes and
/// writes them elsewhere. Small shapes are measured against it.
Status measure_launch_floor_us(int per_graph, int reps, cudaStream_t stream, double* us);

/// Reads `bytes` of `buf` on the device (result discarded): evicts the L2 and leaves only clean
/// lines in it, so the timed kernel neither hits in L2 nor pays for another buffer's write-back.
Status flush_l2(const void* buf, size_t bytes, cudaStream_t stream);

/// Median device time of `launch` with the L2 flushed (flush_l2 over twice the L2 size) before
/// every sample.
Status time_cold_l2(const Launch& launch, int reps, cudaStream_t stream, TimingStats* out);

/// Per-launch device time from replays of a CUDA graph holding `per_graph` launches: median of
/// `reps` replays divided by per_graph. Inputs stay warm in L2 (the decode regime).
Status time_graph(const Launch& launch, int per_graph, int reps, cudaStream_t stream,
                  TimingStats* out);

}  // namespace ropenorm::bench
