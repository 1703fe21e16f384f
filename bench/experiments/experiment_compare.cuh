// Bit-for-bit comparison helpers shared by the experiments (not part of the build): a device
// buffer's 16-bit values copied to the host, and the count of values that differ between two
// runs' outputs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "experiment_timing.cuh"

/// The count 16-bit values of the device buffer dev.
inline std::vector<uint16_t> device_values(const void* dev, size_t count) {
  std::vector<uint16_t> v(count);
  CK(cudaMemcpy(v.data(), dev, count * 2, cudaMemcpyDeviceToHost));
  return v;
}

/// Values of got that differ from ref (the same count).
inline size_t differing(const std::vector<uint16_t>& ref, const std::vector<uint16_t>& got) {
  size_t differ = 0;
  for (size_t i = 0; i < ref.size(); ++i) differ += ref[i] != got[i];
  return differ;
}
