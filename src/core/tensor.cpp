// Implementation of the public tensor-view and status helpers (names, sizes, descriptions).
#include "ropenorm/tensor.h"

#include <sstream>

#include "ropenorm/status.h"

namespace ropenorm {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kFloat16:
      return "f16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kInt32:
      return "i32";
    case DType::kInt64:
      return "i64";
  }
  return "unknown-dtype";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

bool is_float_dtype(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

std::string device_name(const Device& device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kDeviceError:
      return "device_error";
  }
  return "unknown";
}

TensorRef::TensorRef(void* data_, DType dtype_, std::initializer_list<int64_t> sizes_,
                     std::initializer_list<int64_t> strides_, Device device_)
    : data(data_), dtype(dtype_), device(device_), present(true) {
  ndim = static_cast<int>(sizes_.size() < kMaxDims ? sizes_.size() : kMaxDims);
  int i = 0;
  for (int64_t s : sizes_) {
    if (i < kMaxDims) sizes[i] = s;
    ++i;
  }
  i = 0;
  for (int64_t s : strides_) {
    if (i < kMaxDims) strides[i] = s;
    ++i;
  }
  if (sizes_.size() != strides_.size() || sizes_.size() > static_cast<std::size_t>(kMaxDims)) {
    ndim = -1;  // rejected by validation: "sizes and strides differ in length"
  }
}

TensorRef TensorRef::contiguous(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                                Device device) {
  int64_t st[kMaxDims];
  int n = static_cast<int>(sizes.size());
  if (n > kMaxDims) n = kMaxDims;
  int64_t acc = 1;
  const int64_t* s = sizes.begin();
  for (int d = n - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= s[d];
  }
  TensorRef t = from_arrays(data, dtype, n, sizes.begin(), st, device);
  if (sizes.size() > static_cast<std::size_t>(kMaxDims)) t.ndim = -1;
  return t;
}

TensorRef TensorRef::from_arrays(void* data, DType dtype, int ndim, const int64_t* sizes,
                                 const int64_t* strides, Device device) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.present = true;
  t.ndim = (ndim < 0 || ndim > kMaxDims) ? -1 : ndim;
  for (int d = 0; d < t.ndim; ++d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = strides[d];
  }
  return t;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  return n;
}

std::string TensorRef::describe() const {
  if (!present) return "absent";
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << sizes[d];
  os << "] " << dtype_name(dtype) << " strides [";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << strides[d];
  os << "] " << device_name(device);
  return os.str();
}

}  // namespace ropenorm
