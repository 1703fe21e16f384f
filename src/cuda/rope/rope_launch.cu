// Public entry point rope: validate, current device, validate the device, no-op on zero size,
// (checked mode: positions read back and checked), plan, dispatch, launch. Nothing is allocated;
// the launch goes on the caller's stream, which only checked mode synchronises.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/rope/rope_typed.h"

namespace ropenorm {

namespace {

constexpr const char* kOp = "rope";

// Stride of dim d, or 0 when the dim has a single index (its stride never multiplies anything
// but 0, so it must not restrict the vector width).
int64_t used_stride(const TensorRef& t, int d) { return t.sizes[d] > 1 ? t.strides[d] : 0; }

// Operand of a [T, H, D] or [B, S, H, D] view (3-D: b is always 0).
cuda::RopeOperand operand(const TensorRef& t) {
  cuda::RopeOperand o{};
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

Status copy_to_host(const TensorRef& t, std::vector<unsigned char>* out, cudaStream_t s) {
  const size_t bytes = static_cast<size_t>(core::span_elements(t)) * dtype_size(t.dtype);
  out->assign(bytes, 0);
  if (bytes == 0) return Status::Ok();
  cudaError_t err = cudaMemcpyAsync(out->data(), t.data, bytes, cudaMemcpyDeviceToHost, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceError,
                  std::string(kOp) + ": reading positions back for the checked mode failed: " +
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

// Checked mode: resolve every token's position on the host and check it.
Status check_positions_on_host(const core::RopeCall& c, const core::RopeGeometry& g,
                               cudaStream_t s) {
  if (c.cos_sin.kind == CosSinKind::kHfCosSinGathered) return Status::Ok();
  const RopePositions& p = c.positions;
  std::vector<int64_t> pos(static_cast<size_t>(g.tokens));
  const char* arg = "offset";
  if (p.positions.defined()) {
    arg = "positions";
    std::vector<unsigned char> host;
    ROPENORM_TRY(copy_to_host(p.positions, &host, s));
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
      ROPENORM_TRY(copy_to_host(p.seq_offsets, &host, s));
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
  return core::check_position_values(arg, pos.data(), g.tokens, g.seq, g.table_rows);
}

}  // namespace

Status rope(const TensorRef& q, const TensorRef& k, const TensorRef& q_out, const TensorRef& k_out,
            const RopePositions& positions, const RopeCosSin& cos_sin, const RopeParams& params,
            Stream stream) {
  core::RopeCall c;
  c.q = q;
  c.k = k;
  c.q_out = q_out;
  c.k_out = k_out;
  c.positions = positions;
  c.cos_sin = cos_sin;
  c.params = params;
  core::RopeGeometry g;
  ROPENORM_TRY(core::validate_rope(c, -1, &g));
  int device = 0;
  ROPENORM_TRY(core::current_device(kOp, &device));
  ROPENORM_TRY(core::validate_rope(c, device, &g));
  if (g.tokens == 0 || g.hq + g.hk == 0) return Status::Ok();
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (params.check_positions) ROPENORM_TRY(check_positions_on_host(c, g, s));

  cuda::RopeKernelArgs a{};
  a.q = operand(q);
  a.q_out = operand(q_out);
  if (k.defined()) {
    a.k = operand(k);
    a.k_out = operand(k_out);
  }
  a.seq = g.seq;
  a.tokens = g.tokens;
  a.hq = static_cast<int>(g.hq);
  a.hk = static_cast<int>(g.hk);
  a.head_dim = static_cast<int>(g.head_dim);
  a.half = static_cast<int>(g.rotary_dim / 2);
  a.gptj = params.style == RopeStyle::kGptj;
  a.inverse = params.inverse;
  a.copy_q_tail = q_out.data != q.data && g.rotary_dim < g.head_dim;
  a.copy_k_tail = k.defined() && k_out.data != k.data && g.rotary_dim < g.head_dim;

  const TensorRef& pt = positions.positions;
  if (pt.defined()) {
    a.pos = pt.data;
    a.pos_i64 = pt.dtype == DType::kInt64;
    if (pt.ndim == 1) {
      a.pos_ss = pt.strides[0];
      a.pos_sb = g.seq * pt.strides[0];
    } else {
      a.pos_sb = pt.strides[0];
      a.pos_ss = pt.strides[1];
    }
  }
  a.offset = positions.offset;
  if (positions.seq_offsets.defined()) {
    a.seq_off = positions.seq_offsets.data;
    a.seq_off_i64 = positions.seq_offsets.dtype == DType::kInt64;
    a.seq_off_stride = positions.seq_offsets.strides[0];
  }

  const int es = static_cast<int>(dtype_size(q.dtype));
  const int64_t h = g.rotary_dim / 2;
  int vec = 1;
  switch (cos_sin.kind) {
    case CosSinKind::kCache: {
      const TensorRef& t = cos_sin.cache;
      a.source = cuda::RopeSource::kCache;
      a.cs_dtype = t.dtype;
      a.cos = t.data;
      a.sin =
          static_cast<const unsigned char*>(t.data) + h * static_cast<int64_t>(dtype_size(t.dtype));
      a.cos_row = a.sin_row = used_stride(t, 0);
      const int cs = static_cast<int>(dtype_size(t.dtype));
      vec = core::rope_vector_width(h, g.head_dim, es,
                                    {{q.data, es, {a.q.sb, a.q.ss, a.q.sh}},
                                     {q_out.data, es, {a.q_out.sb, a.q_out.ss, a.q_out.sh}},
                                     {a.k.data, es, {a.k.sb, a.k.ss, a.k.sh}},
                                     {a.k_out.data, es, {a.k_out.sb, a.k_out.ss, a.k_out.sh}},
                                     {t.data, cs, {a.cos_row}}});
      break;
    }
    case CosSinKind::kHfCosSin:
    case CosSinKind::kHfCosSinGathered: {
      const TensorRef& tc = cos_sin.cos;
      const TensorRef& ts = cos_sin.sin;
      const bool gathered = cos_sin.kind == CosSinKind::kHfCosSinGathered;
      a.source = gathered ? cuda::RopeSource::kGathered : cuda::RopeSource::kTable;
      a.cs_dtype = tc.dtype;
      a.cos = tc.data;
      a.sin = ts.data;
      if (!gathered) {
        a.cos_row = used_stride(tc, 0);
        a.sin_row = used_stride(ts, 0);
      } else if (tc.ndim == 3) {
        a.cos_sb = used_stride(tc, 0);
        a.cos_ss = used_stride(tc, 1);
        a.sin_sb = used_stride(ts, 0);
        a.sin_ss = used_stride(ts, 1);
      } else {
        a.cos_ss = used_stride(tc, 0);
        a.sin_ss = used_stride(ts, 0);
      }
      const int cs = static_cast<int>(dtype_size(tc.dtype));
      vec = core::rope_vector_width(h, g.head_dim, es,
                                    {{q.data, es, {a.q.sb, a.q.ss, a.q.sh}},
                                     {q_out.data, es, {a.q_out.sb, a.q_out.ss, a.q_out.sh}},
                                     {a.k.data, es, {a.k.sb, a.k.ss, a.k.sh}},
                                     {a.k_out.data, es, {a.k_out.sb, a.k_out.ss, a.k_out.sh}},
                                     {tc.data, cs, {a.cos_row, a.cos_sb, a.cos_ss}},
                                     {ts.data, cs, {a.sin_row, a.sin_sb, a.sin_ss}}});
      break;
    }
    case CosSinKind::kInvFreq:
      a.source = cuda::RopeSource::kInvFreq;
      a.cs_dtype = DType::kFloat32;
      a.inv_freq = static_cast<const float*>(cos_sin.inv_freq.data);
      a.scaling = cos_sin.attention_scaling;
      vec = core::rope_vector_width(h, g.head_dim, es,
                                    {{q.data, es, {a.q.sb, a.q.ss, a.q.sh}},
                                     {q_out.data, es, {a.q_out.sb, a.q_out.ss, a.q_out.sh}},
                                     {a.k.data, es, {a.k.sb, a.k.ss, a.k.sh}},
                                     {a.k_out.data, es, {a.k_out.sb, a.k_out.ss, a.k_out.sh}}});
      break;
  }
  const core::RopePlan plan = core::plan_rope(g.tokens, g.hq + g.hk, h, vec);

  return core::dispatch_float_dtype<cuda::f16, cuda::bf16>(
      q.dtype, kOp, "q", [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return cuda::launch_rope_typed<T>(a, plan, s);
      });
}

}  // namespace ropenorm
