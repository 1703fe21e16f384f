/// @file
/// ropenorm public types: element types, devices, and the non-owning strided tensor view.
///
/// A TensorRef never owns memory. Sizes and strides are in elements (not bytes), like torch.
/// Every op reads its tensors through these views; the last dimension must be contiguous
/// (stride 1) wherever an op says so, every other stride is free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

/// RMSNorm (plain and fused with the residual add), rotary position embedding and the fused
/// QK-norm + RoPE pass, forward and backward, on CUDA tensors passed as strided views.
namespace ropenorm {

/// Element types understood by the library.
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kInt32 = 3, kInt64 = 4 };

/// Short name of a dtype ("f32", "f16", "bf16", "i32", "i64").
const char* dtype_name(DType dtype);

/// Size of one element in bytes.
std::size_t dtype_size(DType dtype);

/// True for the floating-point activation dtypes f32, f16 and bf16.
bool is_float_dtype(DType dtype);

/// The memory a tensor lives in: host or CUDA device.
enum class DeviceType : int { kCPU = 0, kCUDA = 1 };

/// Where a tensor's memory lives: kCPU, or kCUDA with a device ordinal.
struct Device {
  DeviceType type = DeviceType::kCUDA;  ///< Host or CUDA device.
  int index = 0;  ///< The CUDA device ordinal; 0 for the host (Device::cpu()).
  /// The host.
  static Device cpu() { return Device{DeviceType::kCPU, 0}; }
  /// CUDA device `index`.
  static Device cuda(int index) { return Device{DeviceType::kCUDA, index}; }
  /// Same type and ordinal.
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  /// Not ==.
  bool operator!=(const Device& o) const { return !(*this == o); }
};

/// "cpu" or "cuda:N".
std::string device_name(const Device& device);

/// The most dimensions a TensorRef holds.
constexpr int kMaxDims = 6;

/// A non-owning view of a strided tensor: data pointer, dtype, sizes, strides (elements), device.
///
/// A default-constructed TensorRef is "absent" (defined() is false): optional arguments such as
/// the weight or the saved rstd are passed that way.
struct TensorRef {
  void* data = nullptr;            ///< The first element (the storage offset applied).
  DType dtype = DType::kFloat32;   ///< Element type.
  int ndim = 0;                    ///< Number of dimensions; -1 marks a malformed view.
  int64_t sizes[kMaxDims] = {};    ///< Sizes of the first ndim dimensions.
  int64_t strides[kMaxDims] = {};  ///< Strides in elements, same length as sizes.
  Device device{};                 ///< Where data lives.
  bool present = false;            ///< False for an absent optional argument.

  TensorRef() = default;
  /// A view with explicit sizes and strides (both in elements, same length).
  TensorRef(void* data, DType dtype, std::initializer_list<int64_t> sizes,
            std::initializer_list<int64_t> strides, Device device);
  /// A contiguous (row-major) view.
  static TensorRef contiguous(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                              Device device);
  /// Same as above, from arrays (for bindings).
  static TensorRef from_arrays(void* data, DType dtype, int ndim, const int64_t* sizes,
                               const int64_t* strides, Device device);

  /// False for an absent (default-constructed) view.
  bool defined() const { return present; }
  /// The product of the sizes (1 for ndim 0).
  int64_t numel() const;
  /// Size of dim d; negative d counts from the end.
  int64_t size(int d) const { return sizes[d < 0 ? d + ndim : d]; }
  /// Stride of dim d in elements; negative d counts from the end.
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  /// "[4096, 4096] bf16 strides [4096, 1] cuda:0"
  std::string describe() const;
};

}  // namespace ropenorm
