// Collapsing a view's leading dims into a RowLayout.
#include "core/row_layout.h"

namespace ropenorm::core {

RowLayout make_row_layout(const TensorRef& t) {
  RowLayout r;
  // Walk leading dims from innermost (ndim-2) outward.
  for (int d = t.ndim - 2; d >= 0; --d) {
    if (t.sizes[d] == 1) continue;
    if (r.nd > 0 && t.strides[d] == r.strides[r.nd - 1] * r.sizes[r.nd - 1]) {
      r.sizes[r.nd - 1] *= t.sizes[d];
      continue;
    }
    r.sizes[r.nd] = t.sizes[d];
    r.strides[r.nd] = t.strides[d];
    ++r.nd;
  }
  return r;
}

int64_t row_count(const TensorRef& t) {
  int64_t m = 1;
  for (int d = 0; d + 1 < t.ndim; ++d) m *= t.sizes[d];
  return m;
}

}  // namespace ropenorm::core
