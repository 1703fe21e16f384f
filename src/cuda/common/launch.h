// Launch helpers shared by the launchers: per-device facts and occupancy, cached (the queries
// cost microseconds of host time, too much for decode-size calls).
#pragma once

#include <cstddef>

namespace ropenorm::cuda {

/// Multiprocessors of the current device.
int device_sm_count();

/// Compute capability major version of the current device.
int device_cc_major();

/// Shared memory per multiprocessor of the current device, and the part of it the driver
/// reserves per resident block (bytes).
int device_smem_per_sm();
int device_smem_reserved_per_block();

/// Resident blocks per multiprocessor for kernel `func` at this block size and dynamic shared
/// memory, on the current device (at least 1).
int blocks_per_sm(const void* func, int threads, size_t dynamic_smem);

/// Lets `func` use up to `bytes` of dynamic shared memory (raising the 48 KiB default once per
/// kernel and device). Returns the CUDA error, if any.
int allow_dynamic_smem(const void* func, size_t bytes);

}  // namespace ropenorm::cuda
