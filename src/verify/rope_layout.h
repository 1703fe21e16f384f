// Where the RoPE verification cases put q and k in device buffers (separate tensors, one packed
// QKV buffer, or Hugging Face's [B, H, S, D] layout), and moving their values between logical
// [T, H, D] host tensors and buffer images. Shared by the RoPE and QK-norm + RoPE cases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reference/host_tensor.h"
#include "ropenorm/tensor.h"
#include "verify/device_buffer.h"
#include "verify/rope_case.h"

namespace ropenorm::verify::rope_layout {

/// One tensor's placement in a device buffer: element (b, s, head, d) at
/// base + b * sb + s * ss + head * sh + d of buffer `buf`.
struct Region {
  int buf = 0;
  int64_t base = 0, sb = 0, ss = 0, sh = 0, heads = 0;
  int64_t at(int64_t b, int64_t s, int64_t h) const { return base + b * sb + s * ss + h * sh; }
};

/// Buffers (their sizes in elements) and the regions of q and k in them.
struct Placement {
  std::vector<int64_t> buf_elems;
  Region q, k;
};

/// The case's layout.
Placement place_of(const RopeCase& c);
/// The [S, H, D] (or [B, S, H, D]) view of a region of buffer `buf`.
TensorRef head_view(const RopeCase& c, const Region& r, void* buf);
/// Copies logical [T, H, D] values into a buffer image at a region.
void scatter(const HostTensor& t, const RopeCase& c, const Region& r,
             std::vector<unsigned char>* img);
/// Reads logical [T, H, D] values out of a buffer image; marks the bytes read in *covered.
HostTensor gather(const std::vector<unsigned char>& img, const RopeCase& c, const Region& r,
                  std::vector<char>* covered);
/// The whole buffer, copied to the host.
std::vector<unsigned char> download_all(const DeviceBuffer& b);
/// Reads q (and k when the case has one) back from the output buffers into logical [T, H, D]
/// tensors; returns how many bytes outside their views differ from `kept` (the buffers' images
/// before the run) or, when kept is null, from 0xFF.
int64_t read_back(const std::vector<DeviceBuffer>& ob, const RopeCase& c, const Placement& pl,
                  const std::vector<std::vector<unsigned char>>* kept, HostTensor* q,
                  HostTensor* k);
/// A device copy of raw bytes placed after `offset` elements of element size es (0xFF before).
DeviceBuffer upload_at(const void* data, size_t bytes, int64_t offset, size_t es);
/// fl32(fl32(p) * f), exactly as the kernels form the in-kernel angle.
double fp32_angle(int64_t p, float f);
/// The c_i, s_i (i < R / 2) the kernel uses for token `tok`: the table's entries at the token's
/// position (at its own row when gathered), or the oracle's cos and sin of the fp32 in-kernel
/// angle times the attention scaling. *ang is scratch of R / 2 elements.
void kernel_cos_sin(const RopeCase& c, const RopeInputs& in, int64_t tok, double* cv, double* sv,
                    double* ang);

}  // namespace ropenorm::verify::rope_layout
