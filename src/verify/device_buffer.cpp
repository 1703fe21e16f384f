// Device memory for verification runs (see device_buffer.h).
#include "verify/device_buffer.h"

#include <cuda_runtime_api.h>

#include <utility>

namespace ropenorm::verify {

bool gpu_available(std::string* reason) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    *reason = "cudaGetDeviceCount reports 0 devices";
    return false;
  }
  return true;
}

#include <cstdio>
#include <cstdlib>

// Verification cannot go on after a failed allocation or copy: report and stop.
#define ROPENORM_CUDA_OK(expr)                                                \
  do {                                                                        \
    const cudaError_t e_ = (expr);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_)); \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) ROPENORM_CUDA_OK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::poison() {
  if (bytes_ > 0) ROPENORM_CUDA_OK(cudaMemset(ptr_, 0xFF, bytes_));
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t byte_offset) {
  ROPENORM_CUDA_OK(cudaMemcpy(static_cast<unsigned char*>(ptr_) + byte_offset, host, bytes,
                              cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, size_t bytes, size_t byte_offset) const {
  ROPENORM_CUDA_OK(cudaMemcpy(host, static_cast<const unsigned char*>(ptr_) + byte_offset, bytes,
                              cudaMemcpyDeviceToHost));
}

DeviceBuffer to_device(const HostTensor& t) {
  DeviceBuffer b(t.bytes.size());
  if (!t.bytes.empty()) b.upload(t.bytes.data(), t.bytes.size());
  return b;
}

HostTensor from_device(const DeviceBuffer& b, DType dt, int64_t numel) {
  HostTensor t(dt, numel);
  if (numel > 0) b.download(t.bytes.data(), t.bytes.size());
  return t;
}

Status sync_device() {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return Status(StatusCode::kDeviceError, cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace ropenorm::verify
