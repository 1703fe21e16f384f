// Placement of RMSNorm verification rows in device buffers (see row_placement.h).
#include "verify/row_placement.h"

#include <cstring>

namespace ropenorm::verify::row_placement {

std::vector<unsigned char> place(const HostTensor& t, const RowPlacement& L) {
  const size_t es = dtype_size(t.dtype);
  std::vector<unsigned char> img(static_cast<size_t>(L.elems()) * es, 0xFF);
  for (int64_t r = 0; r < L.m; ++r) {
    std::memcpy(img.data() + static_cast<size_t>(L.row_start(r)) * es,
                t.bytes.data() + static_cast<size_t>(r * L.n) * es, static_cast<size_t>(L.n) * es);
  }
  return img;
}

HostTensor gather(const std::vector<unsigned char>& img, DType dt, const RowPlacement& L,
                  int64_t* pad_written) {
  const size_t es = dtype_size(dt);
  HostTensor t(dt, L.m * L.n);
  std::vector<char> is_row(img.size(), 0);
  for (int64_t r = 0; r < L.m; ++r) {
    const size_t start = static_cast<size_t>(L.row_start(r)) * es;
    std::memcpy(t.bytes.data() + static_cast<size_t>(r * L.n) * es, img.data() + start,
                static_cast<size_t>(L.n) * es);
    std::memset(is_row.data() + start, 1, static_cast<size_t>(L.n) * es);
  }
  for (size_t i = 0; i < img.size(); ++i) {
    if (!is_row[i] && img[i] != 0xFF) ++*pad_written;
  }
  return t;
}

std::vector<unsigned char> download_all(const DeviceBuffer& b) {
  std::vector<unsigned char> img(b.size());
  if (!img.empty()) b.download(img.data(), img.size());
  return img;
}

}  // namespace ropenorm::verify::row_placement
