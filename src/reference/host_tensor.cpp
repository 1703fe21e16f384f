// Host test tensors (see host_tensor.h).
#include "reference/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "reference/host_float.h"

namespace ropenorm::ref {

double HostTensor::get(int64_t i) const {
  const unsigned char* p = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return ref::f16_bits_to_double(b);
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return ref::bf16_bits_to_double(b);
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return 0.0;
}

void HostTensor::set(int64_t i, double v) {
  unsigned char* p = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
  switch (dtype) {
    case DType::kFloat32: {
      const float f = ref::double_to_f32(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::kFloat16: {
      const uint16_t b = ref::double_to_f16_bits(v);
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t b = ref::double_to_bf16_bits(v);
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kInt32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::kInt64: {
      const int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
  }
}

uint64_t HostTensor::bits(int64_t i) const {
  uint64_t b = 0;
  std::memcpy(&b, bytes.data() + static_cast<size_t>(i) * dtype_size(dtype), dtype_size(dtype));
  return b;
}

bool HostTensor::is_nan(int64_t i) const { return std::isnan(get(i)); }

HostTensor slice(const HostTensor& t, int64_t first, int64_t count) {
  HostTensor out(t.dtype, count);
  const size_t es = dtype_size(t.dtype);
  std::memcpy(out.bytes.data(), t.bytes.data() + static_cast<size_t>(first) * es, out.bytes.size());
  return out;
}

void fill_normal(HostTensor& t, std::mt19937_64& rng, double scale) {
  const uint64_t base = rng();
  const int64_t n = t.numel();
  const int64_t chunks = (n + kFillChunk - 1) / kFillChunk;
  const auto fill_chunks = [&](int64_t first, int64_t step) {
    for (int64_t c = first; c < chunks; c += step) {
      std::mt19937_64 g(base + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(c + 1));
      std::normal_distribution<double> dist(0.0, scale);
      const int64_t end = std::min(n, (c + 1) * kFillChunk);
      for (int64_t i = c * kFillChunk; i < end; ++i) t.set(i, dist(g));
    }
  };
  const int64_t nt =
      std::min<int64_t>(chunks, std::max<unsigned>(1, std::thread::hardware_concurrency()));
  if (nt <= 1) {
    fill_chunks(0, 1);
    return;
  }
  std::vector<std::thread> threads;
  for (int64_t k = 0; k < nt; ++k) threads.emplace_back(fill_chunks, k, nt);
  for (std::thread& th : threads) th.join();
}

}  // namespace ropenorm::ref
