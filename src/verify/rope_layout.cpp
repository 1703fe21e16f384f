// Placement of RoPE verification tensors in device buffers (see rope_layout.h).
#include "verify/rope_layout.h"

#include <cstring>

#include "reference/rope_ref.h"

namespace ropenorm::verify::rope_layout {

Placement place_of(const RopeCase& c) {
  const int64_t b = c.batch > 0 ? c.batch : 1, s = c.seq, t = c.tokens(), d = c.head_dim;
  const int64_t hq = c.hq, hk = c.has_k ? c.hk : 0, off = c.storage_offset;
  Placement pl;
  switch (c.layout) {
    case RopeLayout::kSeparate:
      pl.buf_elems = {off + t * hq * d, off + t * hk * d};
      pl.q = Region{0, off, s * hq * d, hq * d, d, hq};
      pl.k = Region{1, off, s * hk * d, hk * d, d, hk};
      break;
    case RopeLayout::kPackedQkv: {
      const int64_t w = (hq + 2 * hk) * d;
      pl.buf_elems = {off + t * w};
      pl.q = Region{0, off, s * w, w, d, hq};
      pl.k = Region{0, off + hq * d, s * w, w, d, hk};
      break;
    }
    case RopeLayout::kHfBhsd:
      pl.buf_elems = {off + b * hq * s * d, off + b * hk * s * d};
      pl.q = Region{0, off, hq * s * d, d, s * d, hq};
      pl.k = Region{1, off, hk * s * d, d, s * d, hk};
      break;
  }
  return pl;
}

TensorRef head_view(const RopeCase& c, const Region& r, void* buf) {
  void* p = static_cast<unsigned char*>(buf) + r.base * static_cast<int64_t>(dtype_size(c.dtype));
  if (c.batch > 0) {
    return TensorRef(p, c.dtype, {c.batch, c.seq, r.heads, c.head_dim}, {r.sb, r.ss, r.sh, 1},
                     Device::cuda(0));
  }
  return TensorRef(p, c.dtype, {c.seq, r.heads, c.head_dim}, {r.ss, r.sh, 1}, Device::cuda(0));
}

// Copies logical [T, H, D] values into (or out of) a buffer image at a region.
void scatter(const HostTensor& t, const RopeCase& c, const Region& r,
             std::vector<unsigned char>* img) {
  const size_t es = dtype_size(c.dtype);
  const size_t row = static_cast<size_t>(c.head_dim) * es;
  for (int64_t tok = 0; tok < c.tokens(); ++tok) {
    const int64_t b = tok / c.seq, s = tok % c.seq;
    for (int64_t h = 0; h < r.heads; ++h) {
      std::memcpy(img->data() + static_cast<size_t>(r.at(b, s, h)) * es,
                  t.bytes.data() + static_cast<size_t>((tok * r.heads + h) * c.head_dim) * es, row);
    }
  }
}

HostTensor gather(const std::vector<unsigned char>& img, const RopeCase& c, const Region& r,
                  std::vector<char>* covered) {
  const size_t es = dtype_size(c.dtype);
  const size_t row = static_cast<size_t>(c.head_dim) * es;
  HostTensor t(c.dtype, c.tokens() * r.heads * c.head_dim);
  for (int64_t tok = 0; tok < c.tokens(); ++tok) {
    const int64_t b = tok / c.seq, s = tok % c.seq;
    for (int64_t h = 0; h < r.heads; ++h) {
      const size_t at = static_cast<size_t>(r.at(b, s, h)) * es;
      std::memcpy(t.bytes.data() + static_cast<size_t>((tok * r.heads + h) * c.head_dim) * es,
                  img.data() + at, row);
      std::memset(covered->data() + at, 1, row);
    }
  }
  return t;
}

std::vector<unsigned char> download_all(const DeviceBuffer& b) {
  std::vector<unsigned char> img(b.size());
  if (!img.empty()) b.download(img.data(), img.size());
  return img;
}

// A device copy of raw bytes placed after `offset` elements of element size es (0xFF before).
int64_t read_back(const std::vector<DeviceBuffer>& ob, const RopeCase& c, const Placement& pl,
                  const std::vector<std::vector<unsigned char>>* kept, HostTensor* q,
                  HostTensor* k) {
  std::vector<std::vector<unsigned char>> now;
  std::vector<std::vector<char>> covered;
  for (const auto& bf : ob) {
    now.push_back(download_all(bf));
    covered.emplace_back(now.back().size(), 0);
  }
  *q = gather(now[pl.q.buf], c, pl.q, &covered[pl.q.buf]);
  if (c.has_k) *k = gather(now[pl.k.buf], c, pl.k, &covered[pl.k.buf]);
  int64_t changed = 0;
  for (size_t i = 0; i < now.size(); ++i) {
    for (size_t j = 0; j < now[i].size(); ++j) {
      if (!covered[i][j] && now[i][j] != (kept ? (*kept)[i][j] : 0xFF)) ++changed;
    }
  }
  return changed;
}

DeviceBuffer upload_at(const void* data, size_t bytes, int64_t offset, size_t es) {
  std::vector<unsigned char> img(static_cast<size_t>(offset) * es + bytes, 0xFF);
  if (bytes > 0) std::memcpy(img.data() + static_cast<size_t>(offset) * es, data, bytes);
  DeviceBuffer d(img.size());
  if (!img.empty()) d.upload(img.data(), img.size());
  return d;
}

// fl32(fl32(p) * f), exactly as the kernel forms the in-kernel angle.
double fp32_angle(int64_t p, float f) {
  volatile float pf = static_cast<float>(p);
  volatile float a = pf * f;
  return static_cast<double>(a);
}

void kernel_cos_sin(const RopeCase& c, const RopeInputs& in, int64_t tok, double* cv, double* sv,
                    double* ang) {
  const int64_t r = c.rot(), h = r / 2;
  const int64_t p = in.positions[tok];
  for (int64_t i = 0; i < h; ++i) {
    switch (c.source) {
      case CosSinKind::kCache:
        cv[i] = in.cache.get(p * r + i);
        sv[i] = in.cache.get(p * r + h + i);
        break;
      case CosSinKind::kHfCosSin:
        cv[i] = in.cos.get(p * r + i);
        sv[i] = in.sin.get(p * r + i);
        break;
      case CosSinKind::kHfCosSinGathered:
        cv[i] = in.cos.get(c.gathered_row(tok) * r + i);
        sv[i] = in.sin.get(c.gathered_row(tok) * r + i);
        break;
      case CosSinKind::kInvFreq:
        ang[i] = fp32_angle(p, in.inv_freq[i]);
        break;
    }
  }
  if (c.source == CosSinKind::kInvFreq) {
    ref::rope_cos_sin_ref(1, ang, h, static_cast<double>(c.attention_scaling), cv, sv);
  }
}

}  // namespace ropenorm::verify::rope_layout
