// Validation of qk_norm_rope calls (see qk_norm_rope_validate.h).
#include "core/qk_norm_rope_validate.h"

#include <cmath>
#include <initializer_list>
#include <sstream>
#include <string>

#include "core/checks.h"
#include "core/qk_norm_rope_backward_plan.h"

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

// ---- qk_norm_rope_backward ----

namespace {

constexpr const char* kBwdOp = "qk_norm_rope_backward";

struct Rename {
  const char* from;
  const char* to;
};

// A message of validate_rope ("rope: ...") or validate_qk_norm_rope ("qk_norm_rope: ...") spoken
// as this op, with the quoted argument names mapped to this op's ('q_out' -> 'dq', ...).
Status relabel_backward(const Status& st, std::initializer_list<Rename> names) {
  if (st.ok()) return st;
  std::string m = st.message();
  for (const char* prefix : {"qk_norm_rope: ", "rope: "}) {
    const std::string p = prefix;
    if (m.compare(0, p.size(), p) == 0) {
      m = m.substr(p.size());
      break;
    }
  }
  std::string out;
  size_t i = 0;
  while (i < m.size()) {
    const size_t open = m.find('\'', i);
    const size_t close = open == std::string::npos ? open : m.find('\'', open + 1);
    if (close == std::string::npos) {
      out += m.substr(i);
      break;
    }
    std::string name = m.substr(open + 1, close - open - 1);
    for (const Rename& r : names) {
      if (name == r.from) {
        name = r.to;
        break;
      }
    }
    out += m.substr(i, open - i) + "'" + name + "'";
    i = close + 1;
  }
  return Status(st.code(), std::string(kBwdOp) + ": " + out);
}

// An incoming gradient: the forward input's (ref's) dtype and shape, last dim contiguous.
Status check_gradient(const char* arg, const TensorRef& t, const char* ref_arg,
                      const TensorRef& ref) {
  ROPENORM_TRY(check_present(kBwdOp, arg, t));
  if (t.dtype != ref.dtype) {
    return invalid_arg(kBwdOp, arg,
                       std::string("dtype ") + dtype_name(ref.dtype) + " (" + ref_arg + "'s)",
                       dtype_name(t.dtype), StatusCode::kUnsupported);
  }
  ROPENORM_TRY(check_same_shape(kBwdOp, arg, t, ref_arg, ref));
  ROPENORM_TRY(check_last_dim_contiguous(kBwdOp, arg, t));
  return check_data(kBwdOp, arg, t);
}

// A weight gradient: absent, or [D] contiguous in the weight's dtype.
Status check_dw(const char* arg, const TensorRef& dw, const char* w_arg, const TensorRef& w,
                int64_t d) {
  if (!dw.defined()) return Status::Ok();
  ROPENORM_TRY(check_present(kBwdOp, arg, dw));
  if (dw.dtype != w.dtype) {
    return invalid_arg(kBwdOp, arg,
                       std::string("dtype ") + dtype_name(w.dtype) + " (" + w_arg + "'s)",
                       dtype_name(dw.dtype), StatusCode::kUnsupported);
  }
  if (dw.ndim != 1 || dw.sizes[0] != d) {
    return invalid_arg(kBwdOp, arg, "shape [" + std::to_string(d) + "] (head_dim)", dw.describe());
  }
  ROPENORM_TRY(check_last_dim_contiguous(kBwdOp, arg, dw));
  return check_data(kBwdOp, arg, dw);
}

bool wants_dw(const QkNormRopeBackwardCall& c) { return c.dwq.defined() || c.dwk.defined(); }

// The workspace's form (when present): f32, every dim contiguous.
Status check_workspace_form(const TensorRef& ws) {
  ROPENORM_TRY(check_present(kBwdOp, "workspace", ws));
  if (ws.dtype != DType::kFloat32) {
    return invalid_arg(kBwdOp, "workspace", "dtype f32 (numel * 4 bytes)", dtype_name(ws.dtype),
                       StatusCode::kUnsupported);
  }
  int64_t expect = 1;
  for (int d = ws.ndim - 1; d >= 0; --d) {
    if (ws.sizes[d] > 1 && ws.strides[d] != expect) {
      return invalid_arg(kBwdOp, "workspace", "contiguous strides", ws.describe());
    }
    expect *= ws.sizes[d];
  }
  return check_data(kBwdOp, "workspace", ws);
}

}  // namespace

Status validate_qk_norm_rope_backward_devices(const QkNormRopeBackwardCall& c, int device) {
  ROPENORM_TRY(relabel_backward(validate_qk_norm_rope_devices(c.fwd, device),
                                {{"q_out", "dq"}, {"k_out", "dk"}}));
  ROPENORM_TRY(check_device(kBwdOp, "dq_out", c.dq_out, device));
  ROPENORM_TRY(check_device(kBwdOp, "dk_out", c.dk_out, device));
  if (c.dwq.defined()) ROPENORM_TRY(check_device(kBwdOp, "dwq", c.dwq, device));
  if (c.dwk.defined()) ROPENORM_TRY(check_device(kBwdOp, "dwk", c.dwk, device));
  if (c.workspace.defined()) ROPENORM_TRY(check_device(kBwdOp, "workspace", c.workspace, device));
  return Status::Ok();
}

Status validate_qk_norm_rope_backward_workspace(const QkNormRopeBackwardCall& c,
                                                const RopeGeometry& g, int sm_count) {
  if (!wants_dw(c)) return Status::Ok();
  const size_t need =
      qk_norm_rope_backward_workspace_bytes(g.tokens, g.hq, g.hk, g.head_dim, sm_count);
  if (need == 0) return Status::Ok();
  if (!c.workspace.defined()) {
    return invalid_arg(kBwdOp, "workspace",
                       "an f32 tensor of at least " + std::to_string(need / 4) +
                           " elements (dwq or dwk is wanted)",
                       "none");
  }
  if (static_cast<size_t>(c.workspace.numel()) * 4 < need) {
    return invalid_arg(kBwdOp, "workspace",
                       "at least " + std::to_string(need / 4) + " f32 elements (" +
                           std::to_string(need) + " bytes, qk_norm_rope_backward_workspace_size)",
                       c.workspace.describe());
  }
  return Status::Ok();
}

Status validate_qk_norm_rope_backward(const QkNormRopeBackwardCall& c, int device, int sm_count,
                                      RopeGeometry* geometry) {
  const RopeCall& r = c.fwd.rope;
  if (r.params.inverse) {
    return invalid_arg(kBwdOp, "inverse",
                       "false (the RoPE parameters are the forward's; the backward applies the "
                       "inverse rotation itself)",
                       "true");
  }
  // The forward's checks, with its outputs read as dq and dk.
  RopeGeometry g;
  ROPENORM_TRY(
      relabel_backward(validate_qk_norm_rope(c.fwd, -1, &g), {{"q_out", "dq"}, {"k_out", "dk"}}));
  if (same_view(r.q_out, r.q)) {
    return invalid_arg(kBwdOp, "dq",
                       "memory separate from 'q' (the forward's input is read; in place is "
                       "served on dq_out)",
                       "the same view as 'q'");
  }
  if (same_view(r.k_out, r.k)) {
    return invalid_arg(kBwdOp, "dk",
                       "memory separate from 'k' (the forward's input is read; in place is "
                       "served on dk_out)",
                       "the same view as 'k'");
  }

  // Incoming gradients, then the results against them (exactly them for in place, else apart).
  ROPENORM_TRY(check_gradient("dq_out", c.dq_out, "q", r.q));
  ROPENORM_TRY(check_gradient("dk_out", c.dk_out, "k", r.k));
  RopeCall grads = r;
  grads.q = c.dq_out;
  grads.k = c.dk_out;
  ROPENORM_TRY(
      relabel_backward(validate_rope(grads, -1),
                       {{"q", "dq_out"}, {"k", "dk_out"}, {"q_out", "dq"}, {"k_out", "dk"}}));

  // Weight gradients and the workspace.
  ROPENORM_TRY(check_dw("dwq", c.dwq, "wq", c.fwd.wq, g.head_dim));
  ROPENORM_TRY(check_dw("dwk", c.dwk, "wk", c.fwd.wk, g.head_dim));
  if (c.workspace.defined()) ROPENORM_TRY(check_workspace_form(c.workspace));
  if (sm_count > 0) ROPENORM_TRY(validate_qk_norm_rope_backward_workspace(c, g, sm_count));
  if (!c.workspace.defined() && wants_dw(c) &&
      qk_norm_rope_backward_workspace_bytes(g.tokens, g.hq, g.hk, g.head_dim, 0) > 0) {
    return invalid_arg(kBwdOp, "workspace",
                       "an f32 tensor (dwq or dwk is wanted; size: "
                       "qk_norm_rope_backward_workspace_size)",
                       "none");
  }

  // Written tensors (dwq, dwk, workspace) against every other argument and each other.
  const TensorRef* all[] = {&r.q,
                            &r.k,
                            &c.dq_out,
                            &c.dk_out,
                            &c.fwd.wq,
                            &c.fwd.wk,
                            &c.fwd.q_rstd,
                            &c.fwd.k_rstd,
                            &r.positions.positions,
                            &r.positions.seq_offsets,
                            &r.cos_sin.cache,
                            &r.cos_sin.cos,
                            &r.cos_sin.sin,
                            &r.cos_sin.inv_freq,
                            &r.q_out,
                            &r.k_out};
  const char* names[] = {"q",      "k",        "dq_out",    "dk_out",      "wq",    "wk",
                         "q_rstd", "k_rstd",   "positions", "seq_offsets", "cache", "cos",
                         "sin",    "inv_freq", "dq",        "dk"};
  for (int i = 0; i < 16; ++i) {
    ROPENORM_TRY(check_no_overlap(kBwdOp, "dwq", c.dwq, names[i], *all[i], false));
    ROPENORM_TRY(check_no_overlap(kBwdOp, "dwk", c.dwk, names[i], *all[i], false));
    ROPENORM_TRY(check_no_overlap(kBwdOp, "workspace", c.workspace, names[i], *all[i], false));
  }
  ROPENORM_TRY(check_no_overlap(kBwdOp, "dwk", c.dwk, "dwq", c.dwq, false));
  ROPENORM_TRY(check_no_overlap(kBwdOp, "workspace", c.workspace, "dwq", c.dwq, false));
  ROPENORM_TRY(check_no_overlap(kBwdOp, "workspace", c.workspace, "dwk", c.dwk, false));

  if (device >= 0) ROPENORM_TRY(validate_qk_norm_rope_backward_devices(c, device));
  if (geometry != nullptr) *geometry = g;
  return Status::Ok();
}

QkNormRopeCall qk_norm_rope_call(const TensorRef& q, const TensorRef& k, const TensorRef& wq,
                                 const TensorRef& wk, const TensorRef& q_out,
                                 const TensorRef& k_out, const TensorRef& q_rstd,
                                 const TensorRef& k_rstd, const RopePositions& positions,
                                 const RopeCosSin& cos_sin, const RopeParams& rope_params,
                                 const QkNormParams& norm_params) {
  QkNormRopeCall c;
  c.rope = RopeCall{q, k, q_out, k_out, positions, cos_sin, rope_params};
  c.wq = wq;
  c.wk = wk;
  c.q_rstd = q_rstd;
  c.k_rstd = k_rstd;
  c.norm = norm_params;
  return c;
}

QkNormRopeBackwardCall qk_norm_rope_backward_call(
    const TensorRef& dq_out, const TensorRef& dk_out, const TensorRef& q, const TensorRef& k,
    const TensorRef& wq, const TensorRef& wk, const TensorRef& q_rstd, const TensorRef& k_rstd,
    const TensorRef& dq, const TensorRef& dk, const TensorRef& dwq, const TensorRef& dwk,
    const TensorRef& workspace, const RopePositions& positions, const RopeCosSin& cos_sin,
    const RopeParams& rope_params, const QkNormParams& norm_params) {
  QkNormRopeBackwardCall c;
  c.fwd = qk_norm_rope_call(q, k, wq, wk, dq, dk, q_rstd, k_rstd, positions, cos_sin, rope_params,
                            norm_params);
  c.dq_out = dq_out;
  c.dk_out = dk_out;
  c.dwq = dwq;
  c.dwk = dwk;
  c.workspace = workspace;
  return c;
}

}  // namespace ropenorm::core
