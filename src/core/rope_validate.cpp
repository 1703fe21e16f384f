// Validation of RoPE calls (see rope_validate.h).
#include "core/rope_validate.h"

#include <cmath>
#include <sstream>
#include <string>

#include "core/checks.h"

namespace ropenorm {

const char* cos_sin_kind_name(CosSinKind kind) {
  switch (kind) {
    case CosSinKind::kCache:
      return "cache";
    case CosSinKind::kHfCosSin:
      return "hf_cos_sin";
    case CosSinKind::kHfCosSinGathered:
      return "hf_cos_sin_gathered";
    case CosSinKind::kInvFreq:
      return "inv_freq";
  }
  return "unknown-cos-sin-kind";
}

namespace core {

namespace {

constexpr const char* kOp = "rope";

std::string dims_str(const int64_t* sizes, int n) {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < n; ++d) os << (d ? ", " : "") << sizes[d];
  os << "]";
  return os.str();
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A floating-point tensor read or written with its last dim contiguous.
Status check_float_view(const char* arg, const TensorRef& t) {
  ROPENORM_TRY(check_present(kOp, arg, t));
  ROPENORM_TRY(check_float_dtype(kOp, arg, t));
  ROPENORM_TRY(check_last_dim_contiguous(kOp, arg, t));
  return check_data(kOp, arg, t);
}

// An int32 / int64 index tensor (positions, seq_offsets).
Status check_index_tensor(const char* arg, const TensorRef& t) {
  ROPENORM_TRY(check_present(kOp, arg, t));
  if (t.dtype != DType::kInt32 && t.dtype != DType::kInt64) {
    return invalid_arg(kOp, arg, "dtype i32 or i64", dtype_name(t.dtype), StatusCode::kUnsupported);
  }
  return check_data(kOp, arg, t);
}

Status check_same_dtype(const char* arg, const TensorRef& t, const char* ref_arg,
                        const TensorRef& ref) {
  if (t.dtype != ref.dtype) {
    return invalid_arg(kOp, arg,
                       std::string("dtype ") + dtype_name(ref.dtype) + " (" + ref_arg + "'s)",
                       dtype_name(t.dtype), StatusCode::kUnsupported);
  }
  return Status::Ok();
}

Status must_be_absent(const char* arg, const TensorRef& t, const std::string& why) {
  if (t.defined()) return invalid_arg(kOp, arg, "none (" + why + ")", t.describe());
  return Status::Ok();
}

// The same view with the head dim merged into the last one when the heads of a token are
// adjacent ([.., H, D] with head stride D becomes [.., H * D]), so that q and k views of one
// packed QKV buffer become row views on one lattice of token rows, which check_no_overlap's
// lattice test can separate.
TensorRef merge_heads(const TensorRef& t) {
  if (!t.defined() || t.ndim < 2) return t;
  const int h = t.ndim - 2;
  if (t.sizes[h] != 1 && t.strides[h] != t.sizes[t.ndim - 1]) return t;
  TensorRef m = t;
  m.ndim = t.ndim - 1;
  m.sizes[h] = t.sizes[h] * t.sizes[t.ndim - 1];
  m.strides[h] = 1;
  m.sizes[t.ndim - 1] = 0;
  m.strides[t.ndim - 1] = 0;
  return m;
}

// check_no_overlap on the views as given; when that fails, on the head-merged views (which
// describe the same bytes), keeping the first error if both fail.
Status check_output_overlap(const char* out_arg, const TensorRef& out, const char* in_arg,
                            const TensorRef& in, bool allow_identical) {
  const Status st = check_no_overlap(kOp, out_arg, out, in_arg, in, allow_identical);
  if (st.ok()) return st;
  if (check_no_overlap(kOp, out_arg, merge_heads(out), in_arg, merge_heads(in), allow_identical)
          .ok()) {
    return Status::Ok();
  }
  return st;
}

Status check_positions(const RopeCall& c, const RopeGeometry& g) {
  const RopePositions& p = c.positions;
  if (c.cos_sin.kind == CosSinKind::kHfCosSinGathered) {
    ROPENORM_TRY(must_be_absent("positions", p.positions,
                                "cos/sin gathered per token already hold each token's values"));
    ROPENORM_TRY(must_be_absent("seq_offsets", p.seq_offsets,
                                "cos/sin gathered per token already hold each token's values"));
    if (p.offset != 0) {
      return invalid_arg(kOp, "offset", "0 (cos/sin gathered per token)", std::to_string(p.offset));
    }
    return Status::Ok();
  }
  if (p.positions.defined()) {
    ROPENORM_TRY(check_index_tensor("positions", p.positions));
    const TensorRef& t = p.positions;
    const bool flat = t.ndim == 1 && t.sizes[0] == g.tokens;
    const bool two_d = c.q.ndim == 4 && t.ndim == 2 && t.sizes[0] == g.batch && t.sizes[1] == g.seq;
    if (!flat && !two_d) {
      const std::string want =
          c.q.ndim == 4 ? "shape [" + std::to_string(g.batch) + ", " + std::to_string(g.seq) +
                              "] or [" + std::to_string(g.tokens) + "] (q's leading dims)"
                        : "shape [" + std::to_string(g.tokens) + "] (q's token count)";
      return invalid_arg(kOp, "positions", want, t.describe());
    }
    if (p.offset != 0) {
      return invalid_arg(kOp, "offset", "0 when positions are given", std::to_string(p.offset));
    }
    ROPENORM_TRY(must_be_absent("seq_offsets", p.seq_offsets, "positions are given"));
    return Status::Ok();
  }
  if (p.seq_offsets.defined()) {
    ROPENORM_TRY(check_index_tensor("seq_offsets", p.seq_offsets));
    if (p.seq_offsets.ndim != 1 || p.seq_offsets.sizes[0] != g.batch) {
      return invalid_arg(kOp, "seq_offsets",
                         "shape [" + std::to_string(g.batch) + "] (one per sequence of q)",
                         p.seq_offsets.describe());
    }
  }
  return Status::Ok();
}

// A [P, R] table (kCache, or one of kHfCosSin's cos / sin).
Status check_table(const char* arg, const TensorRef& t, int64_t r) {
  ROPENORM_TRY(check_float_view(arg, t));
  if (t.ndim != 2 || t.sizes[1] != r || t.sizes[0] < 1) {
    return invalid_arg(kOp, arg,
                       "shape [P, " + std::to_string(r) +
                           "] with P >= 1 (R = rotary_dim = " + std::to_string(r) + ")",
                       t.describe());
  }
  return Status::Ok();
}

Status check_cos_sin(const RopeCall& c, RopeGeometry* g) {
  const RopeCosSin& cs = c.cos_sin;
  const int64_t r = g->rotary_dim;
  switch (cs.kind) {
    case CosSinKind::kCache:
      ROPENORM_TRY(must_be_absent("cos", cs.cos, "the cos/sin source is 'cache'"));
      ROPENORM_TRY(must_be_absent("sin", cs.sin, "the cos/sin source is 'cache'"));
      ROPENORM_TRY(must_be_absent("inv_freq", cs.inv_freq, "the cos/sin source is 'cache'"));
      ROPENORM_TRY(check_table("cache", cs.cache, r));
      g->table_rows = cs.cache.sizes[0];
      break;
    case CosSinKind::kHfCosSin:
      ROPENORM_TRY(must_be_absent("cache", cs.cache, "the cos/sin source is 'hf_cos_sin'"));
      ROPENORM_TRY(must_be_absent("inv_freq", cs.inv_freq, "the cos/sin source is 'hf_cos_sin'"));
      ROPENORM_TRY(check_table("cos", cs.cos, r));
      ROPENORM_TRY(check_float_view("sin", cs.sin));
      ROPENORM_TRY(check_same_shape(kOp, "sin", cs.sin, "cos", cs.cos));
      ROPENORM_TRY(check_same_dtype("sin", cs.sin, "cos", cs.cos));
      g->table_rows = cs.cos.sizes[0];
      break;
    case CosSinKind::kHfCosSinGathered: {
      const char* why = "the cos/sin source is 'hf_cos_sin_gathered'";
      ROPENORM_TRY(must_be_absent("cache", cs.cache, why));
      ROPENORM_TRY(must_be_absent("inv_freq", cs.inv_freq, why));
      ROPENORM_TRY(check_float_view("cos", cs.cos));
      int64_t want[3];
      const int lead = c.q.ndim - 2;
      for (int d = 0; d < lead; ++d) want[d] = c.q.sizes[d];
      want[lead] = r;
      bool ok = cs.cos.ndim == lead + 1;
      for (int d = 0; ok && d <= lead; ++d) ok = cs.cos.sizes[d] == want[d];
      if (!ok) {
        return invalid_arg(
            kOp, "cos",
            "shape " + dims_str(want, lead + 1) + " (q's leading dims, then R = rotary_dim)",
            cs.cos.describe());
      }
      ROPENORM_TRY(check_float_view("sin", cs.sin));
      ROPENORM_TRY(check_same_shape(kOp, "sin", cs.sin, "cos", cs.cos));
      ROPENORM_TRY(check_same_dtype("sin", cs.sin, "cos", cs.cos));
      break;
    }
    case CosSinKind::kInvFreq:
      ROPENORM_TRY(must_be_absent("cache", cs.cache, "the cos/sin source is 'inv_freq'"));
      ROPENORM_TRY(must_be_absent("cos", cs.cos, "the cos/sin source is 'inv_freq'"));
      ROPENORM_TRY(must_be_absent("sin", cs.sin, "the cos/sin source is 'inv_freq'"));
      ROPENORM_TRY(check_present(kOp, "inv_freq", cs.inv_freq));
      if (cs.inv_freq.dtype != DType::kFloat32) {
        return invalid_arg(kOp, "inv_freq", "dtype f32", dtype_name(cs.inv_freq.dtype),
                           StatusCode::kUnsupported);
      }
      if (cs.inv_freq.ndim != 1 || cs.inv_freq.sizes[0] != r / 2) {
        return invalid_arg(kOp, "inv_freq",
                           "shape [" + std::to_string(r / 2) + "] (rotary_dim / 2)",
                           cs.inv_freq.describe());
      }
      ROPENORM_TRY(check_last_dim_contiguous(kOp, "inv_freq", cs.inv_freq));
      ROPENORM_TRY(check_data(kOp, "inv_freq", cs.inv_freq));
      break;
    default:
      return invalid_arg(kOp, "kind", "cache, hf_cos_sin, hf_cos_sin_gathered or inv_freq",
                         std::to_string(static_cast<int>(cs.kind)));
  }
  if (!std::isfinite(cs.attention_scaling)) {
    return invalid_arg(kOp, "attention_scaling", "a finite value", num(cs.attention_scaling));
  }
  if (cs.kind != CosSinKind::kInvFreq && cs.attention_scaling != 1.0f) {
    return invalid_arg(kOp, "attention_scaling",
                       std::string("1 (the '") + cos_sin_kind_name(cs.kind) +
                           "' source carries its scaling in its values)",
                       num(cs.attention_scaling));
  }
  return Status::Ok();
}

}  // namespace

int64_t span_elements(const TensorRef& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.sizes[d] - 1) * t.strides[d];
  return last + 1;
}

Status validate_rope_devices(const RopeCall& c, int device) {
  const RopeCosSin& cs = c.cos_sin;
  const TensorRef* reads[] = {
      &c.positions.positions, &c.positions.seq_offsets, &cs.cache, &cs.cos, &cs.sin, &cs.inv_freq};
  const char* read_names[] = {"positions", "seq_offsets", "cache", "cos", "sin", "inv_freq"};
  ROPENORM_TRY(check_device(kOp, "q", c.q, device));
  ROPENORM_TRY(check_device(kOp, "q_out", c.q_out, device));
  if (c.k.defined()) {
    ROPENORM_TRY(check_device(kOp, "k", c.k, device));
    ROPENORM_TRY(check_device(kOp, "k_out", c.k_out, device));
  }
  for (int i = 0; i < 6; ++i) {
    if (reads[i]->defined()) ROPENORM_TRY(check_device(kOp, read_names[i], *reads[i], device));
  }
  return Status::Ok();
}

Status validate_rope(const RopeCall& c, int device, RopeGeometry* geometry) {
  RopeGeometry g;
  // q fixes the geometry.
  ROPENORM_TRY(check_float_view("q", c.q));
  if (c.q.ndim != 3 && c.q.ndim != 4) {
    return invalid_arg(kOp, "q", "[T, Hq, D] or [B, S, Hq, D]", c.q.describe());
  }
  if (c.q.ndim == 4) {
    g.batch = c.q.sizes[0];
    g.seq = c.q.sizes[1];
  } else {
    g.batch = 1;
    g.seq = c.q.sizes[0];
  }
  g.tokens = g.batch * g.seq;
  g.hq = c.q.size(-2);
  g.head_dim = c.q.size(-1);
  if (g.head_dim > kRopeMaxHeadDim) {
    return invalid_arg(kOp, "q", "head_dim at most " + std::to_string(kRopeMaxHeadDim),
                       c.q.describe(), StatusCode::kUnsupported);
  }

  const int64_t r = c.params.rotary_dim == 0 ? g.head_dim : c.params.rotary_dim;
  if (r <= 0 || r % 2 != 0 || r > g.head_dim) {
    return invalid_arg(kOp, "rotary_dim",
                       "an even value in [2, D] with D = " + std::to_string(g.head_dim) +
                           " (q's head_dim; 0 means D)",
                       std::to_string(c.params.rotary_dim) +
                           (c.params.rotary_dim == 0 ? " (D = " + std::to_string(g.head_dim) + ")"
                                                     : std::string()));
  }
  g.rotary_dim = r;
  if (c.params.style != RopeStyle::kNeox && c.params.style != RopeStyle::kGptj) {
    return invalid_arg(kOp, "style", "neox or gptj",
                       std::to_string(static_cast<int>(c.params.style)));
  }

  // k: q's dtype, leading dims and head_dim.
  if (c.k.defined()) {
    ROPENORM_TRY(check_float_view("k", c.k));
    if (c.k.dtype != c.q.dtype) {
      return invalid_arg(kOp, "k", std::string("dtype ") + dtype_name(c.q.dtype) + " (q's)",
                         dtype_name(c.k.dtype), StatusCode::kUnsupported);
    }
    bool same_lead = c.k.ndim == c.q.ndim;
    for (int d = 0; same_lead && d < c.q.ndim - 2; ++d) same_lead = c.k.sizes[d] == c.q.sizes[d];
    if (!same_lead) {
      return invalid_arg(kOp, "k",
                         (c.q.ndim == 4 ? "shape [" + std::to_string(g.batch) + ", " +
                                              std::to_string(g.seq) + ", Hk, D]"
                                        : "shape [" + std::to_string(g.tokens) + ", Hk, D]") +
                             " (q's leading dims)",
                         c.k.describe());
    }
    if (c.k.size(-1) != g.head_dim) {
      return invalid_arg(kOp, "k", "head_dim " + std::to_string(g.head_dim) + " (q's)",
                         c.k.describe());
    }
    g.hk = c.k.size(-2);
  }
  if (g.hq + g.hk > kRopeMaxHeads) {
    return invalid_arg(kOp, c.k.defined() ? "k" : "q",
                       "at most " + std::to_string(kRopeMaxHeads) + " heads in q and k together",
                       std::to_string(g.hq + g.hk), StatusCode::kUnsupported);
  }

  // Outputs: the inputs' shapes and dtypes.
  ROPENORM_TRY(check_present(kOp, "q_out", c.q_out));
  if (c.q_out.dtype != c.q.dtype) {
    return invalid_arg(kOp, "q_out", std::string("dtype ") + dtype_name(c.q.dtype) + " (q's)",
                       dtype_name(c.q_out.dtype));
  }
  ROPENORM_TRY(check_same_shape(kOp, "q_out", c.q_out, "q", c.q));
  ROPENORM_TRY(check_float_view("q_out", c.q_out));
  ROPENORM_TRY(check_no_internal_overlap(kOp, "q_out", c.q_out));
  if (c.k.defined()) {
    ROPENORM_TRY(check_present(kOp, "k_out", c.k_out));
    if (c.k_out.dtype != c.k.dtype) {
      return invalid_arg(kOp, "k_out", std::string("dtype ") + dtype_name(c.k.dtype) + " (k's)",
                         dtype_name(c.k_out.dtype));
    }
    ROPENORM_TRY(check_same_shape(kOp, "k_out", c.k_out, "k", c.k));
    ROPENORM_TRY(check_float_view("k_out", c.k_out));
    ROPENORM_TRY(check_no_internal_overlap(kOp, "k_out", c.k_out));
  } else {
    ROPENORM_TRY(must_be_absent("k_out", c.k_out, "k is absent"));
  }

  ROPENORM_TRY(check_positions(c, g));
  ROPENORM_TRY(check_cos_sin(c, &g));

  // Implicit positions without per-sequence offsets are known on the host: check them always.
  const bool table =
      c.cos_sin.kind == CosSinKind::kCache || c.cos_sin.kind == CosSinKind::kHfCosSin;
  if (table && g.tokens > 0 && !c.positions.positions.defined() &&
      !c.positions.seq_offsets.defined()) {
    const int64_t off = c.positions.offset;
    if (off < 0 || off > g.table_rows - g.seq) {
      return invalid_arg(kOp, "offset",
                         "positions offset .. offset + S - 1 within the table's " +
                             std::to_string(g.table_rows) + " rows (S = " + std::to_string(g.seq) +
                             ")",
                         std::to_string(off));
    }
  }

  // Outputs against inputs and against each other.
  const RopeCosSin& cs = c.cos_sin;
  const TensorRef* reads[] = {
      &c.positions.positions, &c.positions.seq_offsets, &cs.cache, &cs.cos, &cs.sin, &cs.inv_freq};
  const char* read_names[] = {"positions", "seq_offsets", "cache", "cos", "sin", "inv_freq"};
  ROPENORM_TRY(check_output_overlap("q_out", c.q_out, "q", c.q, /*allow_identical=*/true));
  ROPENORM_TRY(check_output_overlap("q_out", c.q_out, "k", c.k, false));
  ROPENORM_TRY(check_output_overlap("k_out", c.k_out, "k", c.k, /*allow_identical=*/true));
  ROPENORM_TRY(check_output_overlap("k_out", c.k_out, "q", c.q, false));
  ROPENORM_TRY(check_output_overlap("k_out", c.k_out, "q_out", c.q_out, false));
  for (int i = 0; i < 6; ++i) {
    ROPENORM_TRY(check_no_overlap(kOp, "q_out", c.q_out, read_names[i], *reads[i], false));
    ROPENORM_TRY(check_no_overlap(kOp, "k_out", c.k_out, read_names[i], *reads[i], false));
  }

  if (device >= 0) ROPENORM_TRY(validate_rope_devices(c, device));
  if (geometry != nullptr) *geometry = g;
  return Status::Ok();
}

Status check_position_values(const char* arg, const int64_t* pos, int64_t tokens, int64_t seq,
                             int64_t table_rows) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = pos[t];
    if (p < 0 || (table_rows > 0 && p >= table_rows)) {
      std::ostringstream os;
      os << "position " << p << " at token " << t;
      if (seq > 0) os << " (batch " << t / seq << ", sequence index " << t % seq << ")";
      const std::string want =
          table_rows > 0
              ? "every position in [0, " + std::to_string(table_rows) + ") (the table's rows)"
              : std::string("every position >= 0");
      return invalid_arg(kOp, arg, want, os.str());
    }
  }
  return Status::Ok();
}

}  // namespace core
}  // namespace ropenorm
