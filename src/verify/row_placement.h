// Where the RMSNorm verification cases put their [M, N] row tensors in device buffers (a row
// pitch, a storage offset, optionally a [B, S, N] view with the batch dim innermost in memory),
// and moving values between logical row-major host tensors and buffer images. Shared by the
// RMSNorm forward and backward cases.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/host_tensor.h"
#include "ropenorm/tensor.h"
#include "verify/device_buffer.h"

namespace ropenorm::verify::row_placement {

/// Physical placement shared by every row tensor of a case: m rows of n elements, row starts
/// `pitch` apart after `offset` elements; batch > 0 views them as [batch, m / batch, n] with
/// strides {pitch, batch * pitch, 1}.
struct RowPlacement {
  int64_t m, n, pitch, offset, batch;
  int64_t elems() const { return offset + m * pitch; }
  int64_t row_start(int64_t r) const {
    if (batch <= 0) return offset + r * pitch;
    const int64_t seq = m / batch;
    const int64_t b = r / seq, s = r % seq;
    return offset + (s * batch + b) * pitch;
  }
  /// The same rows after `elements` elements instead (elements < 0: this placement).
  RowPlacement at_offset(int64_t elements) const {
    RowPlacement p = *this;
    if (elements >= 0) p.offset = elements;
    return p;
  }
  /// The same rows `pitch` elements apart instead (pitch < 0: this placement).
  RowPlacement with_pitch(int64_t pitch) const {
    RowPlacement p = *this;
    if (pitch >= 0) p.pitch = pitch;
    return p;
  }
  TensorRef view(void* base, DType dt) const {
    void* p = static_cast<unsigned char*>(base) + offset * static_cast<int64_t>(dtype_size(dt));
    if (batch > 0) {
      return TensorRef(p, dt, {batch, m / batch, n}, {pitch, batch * pitch, 1}, Device::cuda(0));
    }
    return TensorRef(p, dt, {m, n}, {pitch, 1}, Device::cuda(0));
  }
};

/// Buffer image: the logical tensor placed at its rows, every other byte 0xFF.
std::vector<unsigned char> place(const HostTensor& t, const RowPlacement& L);
/// Logical tensor read back from a buffer image; counts in *pad_written the bytes outside the
/// rows that are no longer 0xFF.
HostTensor gather(const std::vector<unsigned char>& img, DType dt, const RowPlacement& L,
                  int64_t* pad_written);
/// The whole buffer, copied to the host.
std::vector<unsigned char> download_all(const DeviceBuffer& b);

}  // namespace ropenorm::verify::row_placement
