// What the example programs share and that is not the library's business: reporting a failed
// call, device memory freed at scope exit (with whole-buffer transfers and a NaN fill), and
// CTest's skip code when no GPU is usable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <vector>

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
/// failed (error then holds why). Every transfer and fill covers the whole buffer.
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t size) : bytes(size) {
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
  /// Copies `host` to the buffer; cudaErrorInvalidValue unless it has exactly the buffer's size.
  template <typename T>
  cudaError_t upload(const std::vector<T>& host) const {
    if (host.size() * sizeof(T) != bytes) return cudaErrorInvalidValue;
    return cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice);
  }
  /// The buffer's contents as bytes / sizeof(T) elements of T.
  template <typename T>
  cudaError_t download(std::vector<T>* host) const {
    host->resize(bytes / sizeof(T));
    return cudaMemcpy(host->data(), ptr, bytes, cudaMemcpyDeviceToHost);
  }
  /// Fills the buffer with 0xFF bytes: NaN in f32, f16 and bf16, so an element a kernel does not
  /// write fails any comparison with a value.
  cudaError_t poison() const { return cudaMemset(ptr, 0xFF, bytes); }

  void* ptr = nullptr;
  std::size_t bytes;
  cudaError_t error = cudaSuccess;
};

}  // namespace example
