// Device memory for verification runs: owning buffers that are poisoned (all bits set: NaN in
// every float dtype) before each run, host <-> device copies, and device availability.
#pragma once

#include <cstdint>
#include <string>

#include "reference/host_tensor.h"
#include "ropenorm/status.h"

namespace ropenorm::verify {

using ref::HostTensor;

/// True when a CUDA device can be used; otherwise *reason says why.
bool gpu_available(std::string* reason);

/// An owning device allocation of raw bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }
  /// Byte pointer at an element offset of a given dtype.
  void* at(int64_t elem_offset, DType dt) const {
    return static_cast<unsigned char*>(ptr_) + elem_offset * static_cast<int64_t>(dtype_size(dt));
  }
  /// Fills every byte with 0xFF (NaN in f32, f16 and bf16).
  void poison();
  void upload(const void* host, size_t bytes, size_t byte_offset = 0);
  void download(void* host, size_t bytes, size_t byte_offset = 0) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A buffer holding the host tensor's bytes.
DeviceBuffer to_device(const HostTensor& t);
/// Copies `numel` elements of dtype dt back from the buffer.
HostTensor from_device(const DeviceBuffer& b, DType dt, int64_t numel);
/// Waits for the device and fails the test on a pending CUDA error.
Status sync_device();

}  // namespace ropenorm::verify
