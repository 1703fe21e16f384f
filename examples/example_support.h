// What the example programs share and that is not the library's business: reporting a failed
// call, device memory freed at scope exit, and CTest's skip code when no GPU is usable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>

#include "ropenorm/status.h"

namespace example {

/// CTest reports a test that exits with this code as skipped.
constexpr int kSkipped = 77;

/// True for success; otherwise prints "what: message" to stderr.
inline bool ok(const ropenorm::Status& st, const char* what) {
  if (!st.ok()) std::fprintf(stderr, "%s: %s\n", what, st.message().c_str());
  return st.ok();
}

/// True for cudaSuccess; otherwise prints "what: error" to stderr.
inline bool ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return err == cudaSuccess;
}

/// True when a CUDA device is usable; otherwise prints "no usable CUDA device: reason".
inline bool device_usable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return true;
  std::printf("no usable CUDA device: %s\n",
              err != cudaSuccess ? cudaGetErrorString(err) : "device count 0");
  return false;
}

/// Device memory of `bytes` bytes, freed at scope exit; ptr is null when bytes is 0 or cudaMalloc
/// failed (error then holds why).
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes == 0) return;
    error = cudaMalloc(&ptr, bytes);
    if (error != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// The memory as an array of T.
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
  cudaError_t error = cudaSuccess;
};

}  // namespace example
