// Host test tensors (see host_tensor.h).
#include "reference/host_tensor.h"

#include <cmath>
#include <cstring>

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

void fill_normal(HostTensor& t, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> dist(0.0, scale);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) t.set(i, dist(rng));
}

}  // namespace ropenorm::ref
