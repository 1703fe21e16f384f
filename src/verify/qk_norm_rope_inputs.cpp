// Device copies of the inputs shared by the QK-norm + RoPE cases (see qk_norm_rope_inputs.h).
#include "verify/qk_norm_rope_inputs.h"

#include "verify/rope_layout.h"

namespace ropenorm::verify {

using namespace rope_layout;

TensorRef rstd_view(const RopeCase& c, void* p, int64_t heads) {
  if (c.batch > 0) {
    return TensorRef(p, DType::kFloat32, {c.batch, c.seq, heads}, {c.seq * heads, heads, 1},
                     Device::cuda(0));
  }
  return TensorRef(p, DType::kFloat32, {c.tokens(), heads}, {heads, 1}, Device::cuda(0));
}

QkNormRopeDeviceInputs upload_qk_norm_rope_inputs(const RopeCase& c, const RopeInputs& in,
                                                  const HostTensor& wq, const HostTensor& wk) {
  const int64_t t = c.tokens(), r = c.rot(), h = r / 2, d = c.head_dim;
  QkNormRopeDeviceInputs dev;
  dev.wq_buf = upload_at(wq.bytes.data(), wq.bytes.size(), 0, 1);
  dev.wk_buf = upload_at(wk.bytes.data(), wk.bytes.size(), 0, 1);
  dev.wq = TensorRef(dev.wq_buf.get(), wq.dtype, {d}, {1}, Device::cuda(0));
  dev.wk = TensorRef(dev.wk_buf.get(), wk.dtype, {d}, {1}, Device::cuda(0));

  // Positions (explicit kinds, or arange + offset and per-sequence offsets).
  const int64_t b = c.batch > 0 ? c.batch : 1;
  auto per_token = [&](void* p, DType dt, int64_t inner) {
    if (c.batch > 0) {
      return inner > 0 ? TensorRef(p, dt, {c.batch, c.seq, inner}, {c.seq * inner, inner, 1},
                                   Device::cuda(0))
                       : TensorRef(p, dt, {c.batch, c.seq}, {c.seq, 1}, Device::cuda(0));
    }
    return inner > 0 ? TensorRef(p, dt, {t, inner}, {inner, 1}, Device::cuda(0))
                     : TensorRef(p, dt, {t}, {1}, Device::cuda(0));
  };
  if (c.source != CosSinKind::kHfCosSinGathered) {
    if (c.pos_kind == RopePosKind::kI32 || c.pos_kind == RopePosKind::kI64) {
      const DType pdt = c.pos_kind == RopePosKind::kI32 ? DType::kInt32 : DType::kInt64;
      HostTensor ph(pdt, t);
      for (int64_t i = 0; i < t; ++i) ph.set(i, static_cast<double>(in.positions[i]));
      dev.pos_buf = upload_at(ph.bytes.data(), ph.bytes.size(), 0, 1);
      dev.pos.positions = per_token(dev.pos_buf.get(), pdt, 0);
    } else {
      dev.pos.offset = in.offset;
      if (c.pos_kind == RopePosKind::kArangeSeqOffs) {
        const DType sdt = c.seq_offs_i64 ? DType::kInt64 : DType::kInt32;
        HostTensor sh(sdt, b);
        for (int64_t i = 0; i < b; ++i) sh.set(i, static_cast<double>(in.seq_offsets[i]));
        dev.seq_buf = upload_at(sh.bytes.data(), sh.bytes.size(), 0, 1);
        dev.pos.seq_offsets = TensorRef(dev.seq_buf.get(), sdt, {b}, {1}, Device::cuda(0));
      }
    }
  }

  // The cos/sin source.
  RopeCosSin& cs = dev.cs;
  cs.kind = c.source;
  switch (c.source) {
    case CosSinKind::kCache:
      dev.cache_buf = upload_at(in.cache.bytes.data(), in.cache.bytes.size(), 0, 1);
      cs.cache =
          TensorRef(dev.cache_buf.get(), c.cs_dtype, {c.table_rows, r}, {r, 1}, Device::cuda(0));
      break;
    case CosSinKind::kHfCosSin:
    case CosSinKind::kHfCosSinGathered: {
      dev.cos_buf = upload_at(in.cos.bytes.data(), in.cos.bytes.size(), 0, 1);
      dev.sin_buf = upload_at(in.sin.bytes.data(), in.sin.bytes.size(), 0, 1);
      if (c.source == CosSinKind::kHfCosSin) {
        cs.cos =
            TensorRef(dev.cos_buf.get(), c.cs_dtype, {c.table_rows, r}, {r, 1}, Device::cuda(0));
        cs.sin =
            TensorRef(dev.sin_buf.get(), c.cs_dtype, {c.table_rows, r}, {r, 1}, Device::cuda(0));
      } else {
        cs.cos = gathered_table_view(c, dev.cos_buf.get());
        cs.sin = gathered_table_view(c, dev.sin_buf.get());
      }
      break;
    }
    case CosSinKind::kInvFreq:
      dev.inv_buf = upload_at(in.inv_freq.data(), in.inv_freq.size() * 4, 0, 1);
      cs.inv_freq = TensorRef(dev.inv_buf.get(), DType::kFloat32, {h}, {1}, Device::cuda(0));
      cs.attention_scaling = c.attention_scaling;
      break;
  }
  return dev;
}

}  // namespace ropenorm::verify
