// Validation of qk_norm_rope calls (see qk_norm_rope_validate.h).
#include "core/qk_norm_rope_validate.h"

#include <cmath>
#include <sstream>
#include <string>

#include "core/checks.h"

namespace ropenorm::core {

namespace {

constexpr const char* kOp = "qk_norm_rope";

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// validate_rope names its op "rope"; the caller of this op should read this op's name.
Status relabel(const Status& st) {
  if (st.ok()) return st;
  const std::string& m = st.message();
  const std::string prefix = "rope: ";
  if (m.compare(0, prefix.size(), prefix) == 0) {
    return Status(st.code(), std::string(kOp) + ": " + m.substr(prefix.size()));
  }
  return st;
}

Status check_weight(const char* arg, const TensorRef& w, int64_t d) {
  ROPENORM_TRY(check_present(kOp, arg, w));
  ROPENORM_TRY(check_float_dtype(kOp, arg, w));
  if (w.ndim != 1 || w.sizes[0] != d) {
    return invalid_arg(kOp, arg, "shape [" + std::to_string(d) + "] (head_dim)", w.describe());
  }
  ROPENORM_TRY(check_last_dim_contiguous(kOp, arg, w));
  return check_data(kOp, arg, w);
}

// rstd: absent, or f32 [leading dims of x..., heads] contiguous.
Status check_rstd(const char* arg, const TensorRef& r, const TensorRef& x) {
  if (!r.defined()) return Status::Ok();
  ROPENORM_TRY(check_present(kOp, arg, r));
  if (r.dtype != DType::kFloat32) {
    return invalid_arg(kOp, arg, "dtype f32", dtype_name(r.dtype), StatusCode::kUnsupported);
  }
  bool ok = r.ndim == x.ndim - 1;
  for (int d = 0; ok && d < r.ndim; ++d) ok = r.sizes[d] == x.sizes[d];
  std::string want = "shape [";
  for (int d = 0; d < x.ndim - 1; ++d) want += (d ? ", " : "") + std::to_string(x.sizes[d]);
  want += "] (the input's leading dims, then its heads)";
  if (!ok) return invalid_arg(kOp, arg, want, r.describe());
  int64_t expect = 1;
  for (int d = r.ndim - 1; d >= 0; --d) {
    if (r.sizes[d] > 1 && r.strides[d] != expect) {
      return invalid_arg(kOp, arg, "contiguous strides", r.describe());
    }
    expect *= r.sizes[d];
  }
  return check_data(kOp, arg, r);
}

}  // namespace

Status validate_qk_norm_rope_devices(const QkNormRopeCall& c, int device) {
  ROPENORM_TRY(relabel(validate_rope_devices(c.rope, device)));
  ROPENORM_TRY(check_device(kOp, "wq", c.wq, device));
  ROPENORM_TRY(check_device(kOp, "wk", c.wk, device));
  if (c.q_rstd.defined()) ROPENORM_TRY(check_device(kOp, "q_rstd", c.q_rstd, device));
  if (c.k_rstd.defined()) ROPENORM_TRY(check_device(kOp, "k_rstd", c.k_rstd, device));
  return Status::Ok();
}

Status validate_qk_norm_rope(const QkNormRopeCall& c, int device, RopeGeometry* geometry) {
  // k is required (the op normalises both); everything validate_rope covers comes next.
  ROPENORM_TRY(check_present(kOp, "q", c.rope.q));
  ROPENORM_TRY(check_present(kOp, "k", c.rope.k));
  RopeGeometry g;
  ROPENORM_TRY(relabel(validate_rope(c.rope, -1, &g)));
  if (g.head_dim > kQkNormRopeMaxHeadDim || g.head_dim % 2 != 0 || g.head_dim < 2) {
    return invalid_arg(kOp, "q",
                       "an even head_dim in [2, " + std::to_string(kQkNormRopeMaxHeadDim) + "]",
                       c.rope.q.describe(), StatusCode::kUnsupported);
  }

  ROPENORM_TRY(check_weight("wq", c.wq, g.head_dim));
  ROPENORM_TRY(check_weight("wk", c.wk, g.head_dim));
  ROPENORM_TRY(check_eps(kOp, c.norm.eps));
  if (!std::isfinite(c.norm.weight_offset)) {
    return invalid_arg(kOp, "weight_offset", "a finite value", num(c.norm.weight_offset));
  }
  ROPENORM_TRY(check_rstd("q_rstd", c.q_rstd, c.rope.q));
  ROPENORM_TRY(check_rstd("k_rstd", c.k_rstd, c.rope.k));

  // Written tensors against everything else.
  const RopeCall& r = c.rope;
  const TensorRef* reads[] = {&r.q,
                              &r.k,
                              &c.wq,
                              &c.wk,
                              &r.positions.positions,
                              &r.positions.seq_offsets,
                              &r.cos_sin.cache,
                              &r.cos_sin.cos,
                              &r.cos_sin.sin,
                              &r.cos_sin.inv_freq,
                              &r.q_out,
                              &r.k_out};
  const char* names[] = {"q",     "k",   "wq",  "wk",       "positions", "seq_offsets",
                         "cache", "cos", "sin", "inv_freq", "q_out",     "k_out"};
  constexpr int kReads = 12;
  for (int i = 2; i < 4; ++i) {
    ROPENORM_TRY(check_no_overlap(kOp, "q_out", r.q_out, names[i], *reads[i], false));
    ROPENORM_TRY(check_no_overlap(kOp, "k_out", r.k_out, names[i], *reads[i], false));
  }
  for (int i = 0; i < kReads; ++i) {
    ROPENORM_TRY(check_no_overlap(kOp, "q_rstd", c.q_rstd, names[i], *reads[i], false));
    ROPENORM_TRY(check_no_overlap(kOp, "k_rstd", c.k_rstd, names[i], *reads[i], false));
  }
  ROPENORM_TRY(check_no_overlap(kOp, "k_rstd", c.k_rstd, "q_rstd", c.q_rstd, false));

  if (device >= 0) ROPENORM_TRY(validate_qk_norm_rope_devices(c, device));
  if (geometry != nullptr) *geometry = g;
  return Status::Ok();
}

}  // namespace ropenorm::core
