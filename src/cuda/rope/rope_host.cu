// Host-side pieces shared by the RoPE-based launchers (rope, qk_norm_rope): kernel operands
// from views, the RoPE part of the kernel arguments, and the checked-positions mode.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/checks.h"
#include "core/rope_plan.h"
#include "cuda/rope/rope_host.h"

namespace ropenorm::cuda {

namespace {

Status copy_to_host(const char* op, const TensorRef& t, std::vector<unsigned char>* out,
                    cudaStream_t s) {
  const size_t bytes = static_cast<size_t>(core::span_elements(t)) * dtype_size(t.dtype);
  out->assign(bytes, 0);
  if (bytes == 0) return Status::Ok();
  cudaError_t err = cudaMemcpyAsync(out->data(), t.data, bytes, cudaMemcpyDeviceToHost, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceError,
                  std::string(op) + ": reading positions back for the checked mode failed: " +
                      cudaGetErrorString(err));
  }
  return Status::Ok();
}

int64_t index_at(const std::vector<unsigned char>& host, DType dt, int64_t off) {
  if (dt == DType::kInt64) {
    int64_t v;
    std::memcpy(&v, host.data() + off * 8, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, host.data() + off * 4, 4);
  return v;
}

}  // namespace

// Stride of dim d, or 0 when the dim has a single index (its stride never multiplies anything
// but 0, so it must not restrict the vector width).
int64_t used_stride(const TensorRef& t, int d) { return t.sizes[d] > 1 ? t.strides[d] : 0; }

// Operand of a [T, H, D] or [B, S, H, D] view (3-D: b is always 0).
RopeOperand rope_operand(const TensorRef& t) {
  RopeOperand o{};
  o.data = t.data;
  if (t.ndim == 4) {
    o.sb = used_stride(t, 0);
    o.ss = used_stride(t, 1);
    o.sh = used_stride(t, 2);
  } else {
    o.sb = 0;
    o.ss = used_stride(t, 0);
    o.sh = used_stride(t, 1);
  }
  return o;
}

// Checked mode: resolve every token's position on the host and check it.
Status check_positions_on_host(const char* op, const core::RopeCall& c, const core::RopeGeometry& g,
                               cudaStream_t s) {
  if (c.cos_sin.kind == CosSinKind::kHfCosSinGathered) return Status::Ok();
  const RopePositions& p = c.positions;
  std::vector<int64_t> pos(static_cast<size_t>(g.tokens));
  const char* arg = "offset";
  if (p.positions.defined()) {
    arg = "positions";
    std::vector<unsigned char> host;
    ROPENORM_TRY(copy_to_host(op, p.positions, &host, s));
    const TensorRef& t = p.positions;
    for (int64_t tok = 0; tok < g.tokens; ++tok) {
      const int64_t off = t.ndim == 1 ? tok * t.strides[0]
                                      : (tok / g.seq) * t.strides[0] + (tok % g.seq) * t.strides[1];
      pos[tok] = index_at(host, t.dtype, off);
    }
  } else {
    std::vector<unsigned char> host;
    if (p.seq_offsets.defined()) {
      arg = "seq_offsets";
      ROPENORM_TRY(copy_to_host(op, p.seq_offsets, &host, s));
    }
    for (int64_t tok = 0; tok < g.tokens; ++tok) {
      const int64_t b = tok / g.seq;
      int64_t v = tok % g.seq + p.offset;
      if (p.seq_offsets.defined()) {
        v += index_at(host, p.seq_offsets.dtype, b * p.seq_offsets.strides[0]);
      }
      pos[tok] = v;
    }
  }
  const Status st = core::check_position_values(arg, pos.data(), g.tokens, g.seq, g.table_rows);
  // The position checks speak as "rope"; a caller with another name gets its own prefix.
  const std::string prefix = "rope: ";
  if (st.ok() || std::string(op) == "rope" || st.message().compare(0, prefix.size(), prefix) != 0) {
    return st;
  }
  return Status(st.code(), std::string(op) + ": " + st.message().substr(prefix.size()));
}

void fill_rope_args(const core::RopeCall& c, const core::RopeGeometry& g, RopeKernelArgs* a) {
  const TensorRef& q = c.q;
  const TensorRef& k = c.k;
  const TensorRef& q_out = c.q_out;
  const TensorRef& k_out = c.k_out;
  const RopePositions& positions = c.positions;
  const RopeCosSin& cos_sin = c.cos_sin;
  const RopeParams& params = c.params;
  a->q = rope_operand(q);
  a->q_out = rope_operand(q_out);
  if (k.defined()) {
    a->k = rope_operand(k);
    a->k_out = rope_operand(k_out);
  }
  a->seq = g.seq;
  a->tokens = g.tokens;
  a->batch = g.batch;
  a->hq = static_cast<int>(g.hq);
  a->hk = static_cast<int>(g.hk);
  a->head_dim = static_cast<int>(g.head_dim);
  a->half = static_cast<int>(g.rotary_dim / 2);
  a->gptj = params.style == RopeStyle::kGptj;
  a->inverse = params.inverse;

  const TensorRef& pt = positions.positions;
  if (pt.defined()) {
    a->pos = pt.data;
    a->pos_i64 = pt.dtype == DType::kInt64;
    if (pt.ndim == 1) {
      a->pos_ss = pt.strides[0];
      a->pos_sb = g.seq * pt.strides[0];
    } else {
      a->pos_sb = pt.strides[0];
      a->pos_ss = pt.strides[1];
    }
  }
  a->offset = positions.offset;
  if (positions.seq_offsets.defined()) {
    a->seq_off = positions.seq_offsets.data;
    a->seq_off_i64 = positions.seq_offsets.dtype == DType::kInt64;
    a->seq_off_stride = positions.seq_offsets.strides[0];
  }

  const int64_t h = g.rotary_dim / 2;
  switch (cos_sin.kind) {
    case CosSinKind::kCache: {
      const TensorRef& t = cos_sin.cache;
      a->source = RopeSource::kCache;
      a->cs_dtype = t.dtype;
      a->cos = t.data;
      a->sin =
          static_cast<const unsigned char*>(t.data) + h * static_cast<int64_t>(dtype_size(t.dtype));
      a->cos_row = a->sin_row = used_stride(t, 0);
      break;
    }
    case CosSinKind::kHfCosSin:
    case CosSinKind::kHfCosSinGathered: {
      const TensorRef& tc = cos_sin.cos;
      const TensorRef& ts = cos_sin.sin;
      const bool gathered = cos_sin.kind == CosSinKind::kHfCosSinGathered;
      a->source = gathered ? RopeSource::kGathered : RopeSource::kTable;
      a->cs_dtype = tc.dtype;
      a->cos = tc.data;
      a->sin = ts.data;
      if (!gathered) {
        a->cos_row = used_stride(tc, 0);
        a->sin_row = used_stride(ts, 0);
      } else if (tc.ndim == 3) {
        a->cos_sb = used_stride(tc, 0);
        a->cos_ss = used_stride(tc, 1);
        a->sin_sb = used_stride(ts, 0);
        a->sin_ss = used_stride(ts, 1);
      } else {
        a->cos_ss = used_stride(tc, 0);
        a->sin_ss = used_stride(ts, 0);
      }
      break;
    }
    case CosSinKind::kInvFreq:
      a->source = RopeSource::kInvFreq;
      a->cs_dtype = DType::kFloat32;
      a->inv_freq = static_cast<const float*>(cos_sin.inv_freq.data);
      a->scaling = cos_sin.attention_scaling;
      break;
  }
  a->tables_flat = rope_tables_flat(g.table_rows, a->cos_row, a->sin_row, a->cs_dtype);
}

int rope_access_width(const core::RopeCall& c, const core::RopeGeometry& g,
                      const RopeKernelArgs& a) {
  const int es = static_cast<int>(dtype_size(c.q.dtype));
  // The tables read V values at a time: the cache (one table), or HF's cos and sin; none for
  // inv_freq (computed). An unused operand has no data and restricts nothing.
  const CosSinKind kind = c.cos_sin.kind;
  const bool hf = kind == CosSinKind::kHfCosSin || kind == CosSinKind::kHfCosSinGathered;
  const TensorRef& tc = kind == CosSinKind::kCache ? c.cos_sin.cache : c.cos_sin.cos;
  const void* cos_data = kind == CosSinKind::kCache || hf ? tc.data : nullptr;
  const void* sin_data = hf ? c.cos_sin.sin.data : nullptr;
  const int cs = cos_data != nullptr ? static_cast<int>(dtype_size(tc.dtype)) : es;
  return core::rope_vector_width(g.rotary_dim / 2, g.head_dim, es,
                                 {{c.q.data, es, {a.q.sb, a.q.ss, a.q.sh}},
                                  {c.q_out.data, es, {a.q_out.sb, a.q_out.ss, a.q_out.sh}},
                                  {a.k.data, es, {a.k.sb, a.k.ss, a.k.sh}},
                                  {a.k_out.data, es, {a.k_out.sb, a.k_out.ss, a.k_out.sh}},
                                  {cos_data, cs, {a.cos_row, a.cos_sb, a.cos_ss}},
                                  {sin_data, cs, {a.sin_row, a.sin_sb, a.sin_ss}}});
}

core::RopeLeanFacts rope_lean_facts(const core::RopeCall& c, const core::RopeGeometry& g, int vec) {
  core::RopeLeanFacts f;
  f.elem_size = static_cast<int>(dtype_size(c.q.dtype));
  f.vec = vec;
  f.cos_sin_loaded = c.cos_sin.kind != CosSinKind::kInvFreq;
  if (f.cos_sin_loaded) {
    const TensorRef& table = c.cos_sin.kind == CosSinKind::kCache ? c.cos_sin.cache : c.cos_sin.cos;
    f.cs_elem_size = static_cast<int>(dtype_size(table.dtype));
  }
  f.cos_sin_rows = c.cos_sin.kind == CosSinKind::kCache || c.cos_sin.kind == CosSinKind::kHfCosSin;
  f.tokens = g.tokens;
  f.seq = g.seq;
  f.heads = g.hq + g.hk;
  f.half = g.rotary_dim / 2;
  f.head_dim = g.head_dim;
  return f;
}

}  // namespace ropenorm::cuda
