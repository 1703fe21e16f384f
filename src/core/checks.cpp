// Argument checks shared by every op's launcher (host only, nothing is touched on the device).
#include "core/checks.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/row_layout.h"

namespace ropenorm::core {

Status invalid_arg(const char* op, const char* arg, const std::string& expected,
                   const std::string& received, StatusCode code) {
  std::ostringstream os;
  os << op << ": argument '" << arg << "': expected " << expected << ", received " << received;
  return Status(code, os.str());
}

Status check_present(const char* op, const char* arg, const TensorRef& t) {
  if (!t.defined()) return invalid_arg(op, arg, "a tensor", "none");
  if (t.ndim < 1 || t.ndim > kMaxDims) {
    return invalid_arg(op, arg, "1 to " + std::to_string(kMaxDims) + " dims with one stride each",
                       "ndim " + std::to_string(t.ndim));
  }
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) {
      return invalid_arg(op, arg, "non-negative sizes and strides", t.describe());
    }
  }
  return Status::Ok();
}

Status check_float_dtype(const char* op, const char* arg, const TensorRef& t) {
  if (!is_float_dtype(t.dtype)) {
    return invalid_arg(op, arg, "dtype f32, f16 or bf16", dtype_name(t.dtype),
                       StatusCode::kUnsupported);
  }
  return Status::Ok();
}

Status check_last_dim_contiguous(const char* op, const char* arg, const TensorRef& t) {
  if (t.ndim >= 1 && t.sizes[t.ndim - 1] > 1 && t.strides[t.ndim - 1] != 1) {
    return invalid_arg(
        op, arg, "last-dim stride 1",
        "stride " + std::to_string(t.strides[t.ndim - 1]) + " (" + t.describe() + ")");
  }
  return Status::Ok();
}

static std::string shape_str(const TensorRef& t) {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < t.ndim; ++d) os << (d ? ", " : "") << t.sizes[d];
  os << "]";
  return os.str();
}

Status check_same_shape(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                        const TensorRef& ref) {
  bool same = t.ndim == ref.ndim;
  for (int d = 0; same && d < t.ndim; ++d) same = t.sizes[d] == ref.sizes[d];
  if (!same) {
    return invalid_arg(op, arg, "shape " + shape_str(ref) + " (same as '" + ref_arg + "')",
                       shape_str(t));
  }
  return Status::Ok();
}

Status check_data(const char* op, const char* arg, const TensorRef& t) {
  if (t.data == nullptr && t.numel() > 0) {
    return invalid_arg(op, arg,
                       "a non-null data pointer for " + std::to_string(t.numel()) + " elements",
                       "nullptr");
  }
  return Status::Ok();
}

Status check_eps(const char* op, float eps) {
  if (!std::isfinite(eps) || eps < 1e-12f || eps > 1e-2f) {
    std::ostringstream os;
    os << eps;
    return invalid_arg(op, "eps", "a finite value in [1e-12, 1e-2]", os.str());
  }
  return Status::Ok();
}

Status check_device(const char* op, const char* arg, const TensorRef& t, int device) {
  if (t.device.type != DeviceType::kCUDA || t.device.index != device) {
    return invalid_arg(op, arg,
                       "a tensor on cuda:" + std::to_string(device) + " (the current device)",
                       device_name(t.device));
  }
  return Status::Ok();
}

Status check_no_internal_overlap(const char* op, const char* arg, const TensorRef& t) {
  if (t.numel() == 0) return Status::Ok();
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with size > 1
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] > 1) dims.emplace_back(t.strides[d], t.sizes[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t extent = 1;  // elements spanned by the dims seen so far
  for (const auto& sd : dims) {
    if (sd.first < extent) {
      return invalid_arg(op, arg, "a view whose elements do not alias each other (it is written)",
                         t.describe());
    }
    extent = sd.first * (sd.second - 1) + extent;
  }
  return Status::Ok();
}

bool same_view(const TensorRef& a, const TensorRef& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.sizes[d] != b.sizes[d]) return false;
    if (a.sizes[d] > 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

namespace {

struct Span {
  uintptr_t lo, hi;  // [lo, hi) in bytes
};

Span byte_span(const TensorRef& t) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.sizes[d] - 1) * t.strides[d];
  return Span{base, base + static_cast<uintptr_t>((last + 1) * es)};
}

// Rows of a and b sit on the same lattice of row starts (one collapsed row dim, equal byte
// stride S, each row narrower than S): they can only share bytes if their column intervals
// intersect modulo S.
bool lattice_disjoint(const TensorRef& a, const TensorRef& b) {
  const RowLayout la = make_row_layout(a), lb = make_row_layout(b);
  if (la.nd != 1 || lb.nd != 1) return false;
  const int64_t sa = la.strides[0] * static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t sb = lb.strides[0] * static_cast<int64_t>(dtype_size(b.dtype));
  if (sa != sb || sa <= 0) return false;
  const int64_t wa = a.sizes[a.ndim - 1] * static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t wb = b.sizes[b.ndim - 1] * static_cast<int64_t>(dtype_size(b.dtype));
  if (wa > sa || wb > sa) return false;
  const int64_t diff = static_cast<int64_t>(reinterpret_cast<uintptr_t>(b.data) -
                                            reinterpret_cast<uintptr_t>(a.data));
  const int64_t d = ((diff % sa) + sa) % sa;  // b's rows start d bytes after a's, modulo S
  return d >= wa && d + wb <= sa;
}

}  // namespace

Status check_no_overlap(const char* op, const char* out_arg, const TensorRef& out,
                        const char* in_arg, const TensorRef& in, bool allow_identical) {
  if (!out.defined() || !in.defined() || out.numel() == 0 || in.numel() == 0) return Status::Ok();
  if (same_view(out, in)) {
    if (allow_identical) return Status::Ok();
    return invalid_arg(op, out_arg,
                       std::string("memory separate from '") + in_arg + "' (in-place not served)",
                       "the same view as '" + std::string(in_arg) + "'");
  }
  const Span so = byte_span(out), si = byte_span(in);
  if (so.hi <= si.lo || si.hi <= so.lo) return Status::Ok();
  if (lattice_disjoint(out, in)) return Status::Ok();
  return invalid_arg(op, out_arg,
                     std::string("no memory shared with '") + in_arg + "'" +
                         (allow_identical ? " (or exactly the same view, for in-place)" : ""),
                     "a partial overlap: " + out.describe() + " vs " + in.describe());
}

}  // namespace ropenorm::core
