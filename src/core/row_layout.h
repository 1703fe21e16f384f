// Row addressing for "rows over the last dim" tensors: the leading dims of a view, collapsed
// where they are contiguous with each other, so a row index maps to an element offset.
//
// Plain data, shared by host (validation, planning) and device (kernels compute each row's
// offset once; the elements of that row are then owned by the threads the kernel assigns).
#pragma once

#include <cstdint>

#include "ropenorm/tensor.h"

#if defined(__CUDACC__)
#define ROPENORM_HD __host__ __device__ __forceinline__
#else
#define ROPENORM_HD inline
#endif

namespace ropenorm::core {

/// Leading dims after collapsing: row m -> sum_d ((m / inner_d) % sizes[d]) * strides[d].
/// sizes/strides are listed innermost first; nd == 0 means a single row at offset 0.
struct RowLayout {
  int nd = 0;
  int64_t sizes[kMaxDims - 1] = {};
  int64_t strides[kMaxDims - 1] = {};

  /// Element offset of row m.
  ROPENORM_HD int64_t offset(int64_t m) const {
    if (nd == 1) return m * strides[0];
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) {
      const int64_t q = m / sizes[d];
      off += (m - q * sizes[d]) * strides[d];
      m = q;
    }
    return off;
  }

  /// offset(m) of a layout of at most one leading dimension (kernels planned for such rows):
  /// its arithmetic without the loop over dimensions; lead_offset(1) is the row stride.
  ROPENORM_HD int64_t lead_offset(int64_t m) const { return nd == 0 ? 0 : m * strides[0]; }
};

/// Collapse the leading dims (all but the last) of t. Size-1 dims are dropped; adjacent dims
/// with stride[i] == stride[i+1] * size[i+1] merge.
RowLayout make_row_layout(const TensorRef& t);

/// Number of rows: the product of all dims but the last (1 for a 1-D tensor).
int64_t row_count(const TensorRef& t);

}  // namespace ropenorm::core
