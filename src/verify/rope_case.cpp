// One RoPE verification case (see rope_case.h).
#include "verify/rope_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "cuda/rope/rope_run.h"
#include "reference/host_float.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/rope_layout.h"

namespace ropenorm::verify {

using namespace rope_layout;

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "rope case: %s\n", what.c_str());
  std::abort();
}

const char* layout_name(RopeLayout l) {
  switch (l) {
    case RopeLayout::kSeparate:
      return "separate";
    case RopeLayout::kPackedQkv:
      return "packed";
    case RopeLayout::kHfBhsd:
      return "bhsd";
  }
  return "?";
}

const char* pos_kind_name(RopePosKind k) {
  switch (k) {
    case RopePosKind::kI32:
      return "i32";
    case RopePosKind::kI64:
      return "i64";
    case RopePosKind::kArange:
      return "arange";
    case RopePosKind::kArangeSeqOffs:
      return "arange+seq_offsets";
  }
  return "?";
}

RopeConfig config_of(const RopeCase& c) {
  RopeConfig cfg;
  cfg.type = RopeType::kDefault;
  cfg.theta = c.theta;
  cfg.rotary_dim = c.rot();
  return cfg;
}

// Rows `rows` of the [P, R] cache in dtype dt; rows not listed are left as 0xFF (NaN) when the
// whole table would be large, so that a kernel reading a wrong row cannot pass.
HostTensor build_cache(const RopeCase& c, const std::set<int64_t>& rows) {
  const int64_t r = c.rot();
  const int64_t p = c.table_rows;
  HostTensor t(c.cs_dtype, p * r);
  const RopeConfig cfg = config_of(c);
  if (p * r <= (int64_t{1} << 22)) {
    const Status st = build_rope_cache(cfg, p, c.cs_dtype, t.bytes.data());
    if (!st.ok()) fatal(st.message());
    return t;
  }
  std::fill(t.bytes.begin(), t.bytes.end(), 0xFF);
  const size_t es = dtype_size(c.cs_dtype);
  for (int64_t row : rows) {
    if (row < 0 || row >= p) continue;
    const Status st = build_rope_cache_range(cfg, row, 1, c.cs_dtype,
                                             t.bytes.data() + static_cast<size_t>(row * r) * es);
    if (!st.ok()) fatal(st.message());
  }
  return t;
}

}  // namespace

TensorRef gathered_table_view(const RopeCase& c, void* p) {
  const int64_t r = c.rot();
  if (c.batch > 0) {
    const int64_t sb = c.gathered_broadcast ? 0 : c.seq * r;
    return TensorRef(p, c.cs_dtype, {c.batch, c.seq, r}, {sb, r, 1}, Device::cuda(0));
  }
  return TensorRef(p, c.cs_dtype, {c.tokens(), r}, {r, 1}, Device::cuda(0));
}

std::string describe(const RopeCase& c) {
  std::ostringstream os;
  os << "rope " << dtype_name(c.dtype);
  if (c.batch > 0)
    os << " B=" << c.batch << " S=" << c.seq;
  else
    os << " T=" << c.seq;
  os << " Hq=" << c.hq << " Hk=" << (c.has_k ? std::to_string(c.hk) : std::string("none"))
     << " D=" << c.head_dim << " R=" << c.rot() << " " << rope_style_name(c.style) << " "
     << cos_sin_kind_name(c.source);
  if (c.source != CosSinKind::kInvFreq)
    os << ":" << dtype_name(c.cs_dtype) << " P=" << c.table_rows;
  if (c.source == CosSinKind::kHfCosSinGathered && c.gathered_rows() != c.tokens()) {
    os << " broadcast over B";
  }
  if (c.source == CosSinKind::kInvFreq && c.attention_scaling != 1.0f) {
    os << " scaling=" << c.attention_scaling;
  }
  os << " " << layout_name(c.layout);
  if (c.source != CosSinKind::kHfCosSinGathered) {
    os << " " << pos_kind_name(c.pos_kind);
    if (c.pos_flat) os << "(flat)";
  }
  if (c.storage_offset) os << " off=" << c.storage_offset;
  if (!c.allow_lean) os << " no-lean";
  if (c.in_place) os << " in-place";
  if (c.inverse) os << " inverse";
  if (c.check_positions) os << " checked";
  if (c.bad_token >= 0) os << " bad_token=" << c.bad_token;
  os << " theta=" << c.theta;
  return os.str();
}

RopeInputs make_inputs(const RopeCase& c) {
  RopeInputs in;
  const int64_t t = c.tokens(), r = c.rot(), h = r / 2, p = c.table_rows;
  const int64_t b = c.batch > 0 ? c.batch : 1, s = c.seq;
  std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + 17);
  in.q = HostTensor(c.dtype, t * c.hq * c.head_dim);
  ref::fill_normal(in.q, rng);
  if (c.has_k) {
    in.k = HostTensor(c.dtype, t * c.hk * c.head_dim);
    ref::fill_normal(in.k, rng);
  }

  // Positions: random and non-monotone, or arange; the table bounds (0, P - 1) included.
  in.positions.assign(static_cast<size_t>(t), 0);
  std::uniform_int_distribution<int64_t> any_pos(0, p - 1);
  switch (c.pos_kind) {
    case RopePosKind::kI32:
    case RopePosKind::kI64:
      for (int64_t i = 0; i < t; ++i) in.positions[i] = any_pos(rng);
      if (t >= 2) {
        in.positions[0] = p - 1;
        in.positions[t - 1] = 0;
      }
      if (c.bad_token >= 0 && c.bad_token < t) in.positions[c.bad_token] = p;
      break;
    case RopePosKind::kArange:
      in.offset = std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(0, p - s))(rng);
      for (int64_t i = 0; i < t; ++i) in.positions[i] = i % s + in.offset;
      break;
    case RopePosKind::kArangeSeqOffs: {
      const int64_t room = std::max<int64_t>(0, p - s);
      in.offset = std::uniform_int_distribution<int64_t>(0, room / 2)(rng);
      in.seq_offsets.assign(static_cast<size_t>(b), 0);
      for (int64_t i = 0; i < b; ++i) {
        in.seq_offsets[i] = std::uniform_int_distribution<int64_t>(0, room - in.offset)(rng);
      }
      if (b >= 2) in.seq_offsets[b - 1] = room - in.offset;  // reaches P - 1
      if (c.bad_token >= 0 && c.bad_token < t) in.seq_offsets[c.bad_token / s] = p;
      for (int64_t i = 0; i < t; ++i) in.positions[i] = i % s + in.offset + in.seq_offsets[i / s];
      break;
    }
  }

  const std::set<int64_t> rows(in.positions.begin(), in.positions.end());
  const size_t es = dtype_size(c.cs_dtype);
  switch (c.source) {
    case CosSinKind::kCache:
      in.cache = build_cache(c, rows);
      break;
    case CosSinKind::kHfCosSin:
    case CosSinKind::kHfCosSinGathered: {
      // Hugging Face's duplicated halves: cos[.., i] = cos[.., h + i] = c_i (same for sin).
      const HostTensor table = build_cache(c, rows);
      const bool gathered = c.source == CosSinKind::kHfCosSinGathered;
      const int64_t n = gathered ? c.gathered_rows() : p;
      in.cos = HostTensor(c.cs_dtype, n * r);
      in.sin = HostTensor(c.cs_dtype, n * r);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = gathered ? in.positions[i] : i;
        const unsigned char* src = table.bytes.data() + static_cast<size_t>(row * r) * es;
        unsigned char* cd = in.cos.bytes.data() + static_cast<size_t>(i * r) * es;
        unsigned char* sd = in.sin.bytes.data() + static_cast<size_t>(i * r) * es;
        std::memcpy(cd, src, static_cast<size_t>(h) * es);
        std::memcpy(cd + h * es, src, static_cast<size_t>(h) * es);
        std::memcpy(sd, src + h * es, static_cast<size_t>(h) * es);
        std::memcpy(sd + h * es, src + h * es, static_cast<size_t>(h) * es);
      }
      break;
    }
    case CosSinKind::kInvFreq: {
      double scaling = 1.0;
      const Status st = rope_inv_freq_f32(config_of(c), &in.inv_freq, &scaling);
      if (!st.ok()) fatal(st.message());
      break;
    }
  }
  return in;
}

RopeOutcome run_case(const RopeCase& c, const RopeInputs& in) {
  RopeOutcome out;
  const int64_t t = c.tokens(), r = c.rot(), h = r / 2, d = c.head_dim;
  const int64_t b = c.batch > 0 ? c.batch : 1, off = c.storage_offset;
  const size_t es = dtype_size(c.dtype);
  const Placement pl = place_of(c);

  // Input images (0xFF outside the views) and device buffers.
  std::vector<std::vector<unsigned char>> img;
  for (int64_t n : pl.buf_elems) img.emplace_back(static_cast<size_t>(n) * es, 0xFF);
  scatter(in.q, c, pl.q, &img[pl.q.buf]);
  if (c.has_k) scatter(in.k, c, pl.k, &img[pl.k.buf]);
  std::vector<DeviceBuffer> inb, outb;
  for (const auto& im : img) {
    inb.emplace_back(im.size());
    if (!im.empty()) inb.back().upload(im.data(), im.size());
  }
  if (!c.in_place) {
    for (const auto& im : img) {
      outb.emplace_back(im.size());
      outb.back().poison();
    }
  }
  std::vector<DeviceBuffer>& ob = c.in_place ? inb : outb;

  const TensorRef q = head_view(c, pl.q, inb[pl.q.buf].get());
  const TensorRef q_out = head_view(c, pl.q, ob[pl.q.buf].get());
  const TensorRef k = c.has_k ? head_view(c, pl.k, inb[pl.k.buf].get()) : TensorRef();
  const TensorRef k_out = c.has_k ? head_view(c, pl.k, ob[pl.k.buf].get()) : TensorRef();

  // Positions.
  RopePositions pos;
  DeviceBuffer pos_buf, seq_buf;
  const bool explicit_pos = c.pos_kind == RopePosKind::kI32 || c.pos_kind == RopePosKind::kI64;
  if (c.source != CosSinKind::kHfCosSinGathered) {
    if (explicit_pos) {
      const DType pdt = c.pos_kind == RopePosKind::kI32 ? DType::kInt32 : DType::kInt64;
      HostTensor ph(pdt, t);
      for (int64_t i = 0; i < t; ++i) ph.set(i, static_cast<double>(in.positions[i]));
      pos_buf = upload_at(ph.bytes.data(), ph.bytes.size(), off, dtype_size(pdt));
      void* p0 = pos_buf.at(off, pdt);
      pos.positions = (c.batch > 0 && !c.pos_flat)
                          ? TensorRef(p0, pdt, {c.batch, c.seq}, {c.seq, 1}, Device::cuda(0))
                          : TensorRef(p0, pdt, {t}, {1}, Device::cuda(0));
    } else {
      pos.offset = in.offset;
      if (c.pos_kind == RopePosKind::kArangeSeqOffs) {
        const DType sdt = c.seq_offs_i64 ? DType::kInt64 : DType::kInt32;
        HostTensor sh(sdt, b);
        for (int64_t i = 0; i < b; ++i) sh.set(i, static_cast<double>(in.seq_offsets[i]));
        seq_buf = upload_at(sh.bytes.data(), sh.bytes.size(), off, dtype_size(sdt));
        pos.seq_offsets = TensorRef(seq_buf.at(off, sdt), sdt, {b}, {1}, Device::cuda(0));
      }
    }
  }

  // cos/sin source.
  RopeCosSin cs;
  cs.kind = c.source;
  DeviceBuffer cache_buf, cos_buf, sin_buf, inv_buf;
  const size_t ces = dtype_size(c.cs_dtype);
  switch (c.source) {
    case CosSinKind::kCache:
      cache_buf = upload_at(in.cache.bytes.data(), in.cache.bytes.size(), off, ces);
      cs.cache = TensorRef(cache_buf.at(off, c.cs_dtype), c.cs_dtype, {c.table_rows, r}, {r, 1},
                           Device::cuda(0));
      break;
    case CosSinKind::kHfCosSin:
    case CosSinKind::kHfCosSinGathered: {
      cos_buf = upload_at(in.cos.bytes.data(), in.cos.bytes.size(), off, ces);
      sin_buf = upload_at(in.sin.bytes.data(), in.sin.bytes.size(), off, ces);
      void* cp = cos_buf.at(off, c.cs_dtype);
      void* sp = sin_buf.at(off, c.cs_dtype);
      if (c.source == CosSinKind::kHfCosSin) {
        cs.cos = TensorRef(cp, c.cs_dtype, {c.table_rows, r}, {r, 1}, Device::cuda(0));
        cs.sin = TensorRef(sp, c.cs_dtype, {c.table_rows, r}, {r, 1}, Device::cuda(0));
      } else {
        cs.cos = gathered_table_view(c, cp);
        cs.sin = gathered_table_view(c, sp);
      }
      break;
    }
    case CosSinKind::kInvFreq:
      inv_buf = upload_at(in.inv_freq.data(), in.inv_freq.size() * 4, off, 4);
      cs.inv_freq =
          TensorRef(inv_buf.at(off, DType::kFloat32), DType::kFloat32, {h}, {1}, Device::cuda(0));
      cs.attention_scaling = c.attention_scaling;
      break;
  }

  RopeParams params;
  params.style = c.style;
  params.rotary_dim = c.rotary_dim;
  params.inverse = c.inverse;
  params.check_positions = c.check_positions;

  out.status = cuda::run_rope(core::RopeCall{q, k, q_out, k_out, pos, cs, params}, c.allow_lean,
                              Stream{}, &out.plan);
  if (out.status.ok()) out.status = sync_device();
  if (!out.status.ok()) {
    // Nothing may have been written: every output buffer must still hold its initial bytes.
    for (size_t i = 0; i < ob.size(); ++i) {
      const auto now = download_all(ob[i]);
      for (size_t j = 0; j < now.size(); ++j) {
        if (now[j] != (c.in_place ? img[i][j] : 0xFF)) ++out.pad_written;
      }
    }
    out.summary = describe(c) + ": call failed: " + out.status.message();
    if (out.pad_written) out.summary += "; " + std::to_string(out.pad_written) + " bytes written";
    return out;
  }

  // Read back; bytes outside the views must still be 0xFF, inputs unchanged.
  out.pad_written += read_back(ob, c, pl, nullptr, &out.q_out, &out.k_out);
  if (!c.in_place) {
    for (size_t i = 0; i < inb.size(); ++i) {
      const auto cur = download_all(inb[i]);
      for (size_t j = 0; j < cur.size(); ++j) out.input_changed += cur[j] != img[i][j];
    }
  }

  // Oracle, token by token.
  out.tol_q = ref::tolerance_ulp("rope", "q_out", c.dtype);
  out.tol_k = ref::tolerance_ulp("rope", "k_out", c.dtype);
  const bool in_kernel = c.source == CosSinKind::kInvFreq;
  out.tol_term = in_kernel ? ref::tolerance_ulp("rope", "inv_freq_pair_term", DType::kFloat32) : 0;
  const double scaling = static_cast<double>(c.attention_scaling);
  std::mutex mu;
  parallel_rows(t, [&](int64_t t0, int64_t t1) {
    RopeErrorStats eq, ek;
    int64_t tails = 0;
    std::vector<double> cv(h), sv(h), ang(h), x(d), y(d);
    for (int64_t tok = t0; tok < t1; ++tok) {
      kernel_cos_sin(c, in, tok, cv.data(), sv.data(), ang.data());
      for (int which = 0; which < (c.has_k ? 2 : 1); ++which) {
        const HostTensor& src = which == 0 ? in.q : in.k;
        const HostTensor& got = which == 0 ? out.q_out : out.k_out;
        const int64_t heads = which == 0 ? c.hq : c.hk;
        RopeErrorStats& es_ = which == 0 ? eq : ek;
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j) x[j] = src.get(base + j);
          ref::rope_rotate_ref(x.data(), y.data(), d, r, c.style, cv.data(), sv.data(), c.inverse);
          for (int64_t j = 0; j < r; ++j) {
            double allow = 0.0;
            if (in_kernel) {
              const int64_t i = c.style == RopeStyle::kNeox ? (j < h ? j : j - h) : j / 2;
              const int64_t ia = c.style == RopeStyle::kNeox ? i : 2 * i;
              const int64_t ib = c.style == RopeStyle::kNeox ? i + h : 2 * i + 1;
              const double norm = std::hypot(x[ia], x[ib]) * std::fabs(scaling);
              allow = out.tol_term * ref::ulp_of(norm, DType::kFloat32);
            }
            es_.add_allowing(got.get(base + j), y[j], c.dtype, base + j, c.dtype, allow);
          }
          for (int64_t j = r; j < d; ++j) tails += got.bits(base + j) != src.bits(base + j);
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out.q.merge(eq);
    out.k.merge(ek);
    out.tail_mismatch += tails;
  });

  std::ostringstream os;
  os << describe(c) << ": q_out max " << out.q.max_ulp << " ulp (tol " << out.tol_q << ", exact "
     << (out.q.count ? 100.0 * out.q.exact / out.q.count : 100.0) << "%)";
  bool ok = out.tol_q >= 0 && out.q.max_ulp <= out.tol_q && out.tol_term >= 0;
  if (c.has_k) {
    os << ", k_out max " << out.k.max_ulp << " ulp (tol " << out.tol_k << ")";
    ok = ok && out.tol_k >= 0 && out.k.max_ulp <= out.tol_k;
  }
  if (in_kernel) os << " (+" << out.tol_term << " f32 ulps of |pair|)";
  if (out.tail_mismatch) os << ", " << out.tail_mismatch << " pass-through elements changed";
  if (out.pad_written) os << ", " << out.pad_written << " bytes written outside the views";
  if (out.input_changed) os << ", " << out.input_changed << " input bytes changed";
  ok = ok && out.tail_mismatch == 0 && out.pad_written == 0 && out.input_changed == 0;
  const RopeErrorStats& worst = out.q.max_ulp >= out.k.max_ulp ? out.q : out.k;
  if (!ok && worst.worst_index >= 0) {
    os << " [worst " << (&worst == &out.q ? "q_out" : "k_out") << " at " << worst.worst_index
       << ": got " << worst.worst_got << " ref " << worst.worst_ref << "]";
  }
  out.passed = ok;
  out.summary = os.str();
  return out;
}

}  // namespace ropenorm::verify
