// Host-side test tensors: raw storage in any float dtype, element access as double, fresh
// random fills, and copies to and from device buffers. Shared by the tests and the command-line
// verifier.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ropenorm/tensor.h"

namespace ropenorm::ref {

/// Raw elements of one dtype in host memory.
struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<unsigned char> bytes;

  HostTensor() = default;
  HostTensor(DType dt, int64_t numel)
      : dtype(dt), bytes(static_cast<size_t>(numel) * dtype_size(dt)) {}
  int64_t numel() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
  /// Exact value of element i.
  double get(int64_t i) const;
  /// Stores v rounded (to nearest even) to the dtype.
  void set(int64_t i, double v);
  /// Raw bit pattern of element i (zero-extended), for bitwise comparisons.
  uint64_t bits(int64_t i) const;
  bool is_nan(int64_t i) const;
};

/// Elements first .. first + count - 1 of t (within it), as a tensor of t's dtype: e.g. one
/// token's rows of a token-major tensor.
HostTensor slice(const HostTensor& t, int64_t first, int64_t count);

/// Elements per independently seeded chunk of fill_normal.
constexpr int64_t kFillChunk = int64_t{1} << 16;

/// Fills with values drawn from N(0, scale^2), rounded to the dtype. Draws one seed from rng;
/// chunk c (elements c * kFillChunk ...) has its own generator seeded from it and c, so element
/// i depends only on that seed and i (not on the thread count; a longer tensor filled from the
/// same rng state starts with the same values), and the chunks are filled on all cores.
void fill_normal(HostTensor& t, std::mt19937_64& rng, double scale = 1.0);

}  // namespace ropenorm::ref
