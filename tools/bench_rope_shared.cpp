// Pieces shared by the RoPE rows of the main job (see bench_rope_shared.h).
#include "bench_rope_shared.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>

#include "reference/host_float.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "verify/parallel.h"

namespace ropenorm::bench {

namespace {

using ref::HostTensor;
using verify::DeviceBuffer;
using verify::RopeCase;
using verify::RopeErrorStats;
using verify::RopeInputs;

}  // namespace

RopeCase standard_rope_case(int64_t t, int64_t hq, int64_t hk, int64_t d, RopeStyle style,
                            uint64_t seed) {
  RopeCase c;
  c.seq = t;
  c.hq = hq;
  c.hk = hk;
  c.head_dim = d;
  c.style = style;
  c.dtype = DType::kBFloat16;
  c.source = CosSinKind::kCache;
  c.cs_dtype = DType::kFloat32;
  c.layout = verify::RopeLayout::kSeparate;
  c.pos_kind = verify::RopePosKind::kI64;
  c.table_rows = t;
  c.seed = seed;
  return c;
}

int64_t rope_case_bytes(const RopeCase& c) {
  const int64_t t = c.tokens(), d = c.head_dim;
  const bool gathered = c.source == CosSinKind::kHfCosSinGathered;
  return 2 * t * (c.hq + c.hk) * d * static_cast<int64_t>(dtype_size(c.dtype)) +
         t * d * static_cast<int64_t>(dtype_size(c.cs_dtype)) +
         (gathered ? 0 : t * static_cast<int64_t>(sizeof(int64_t)));
}

RopeCase gathered_rope_case(const RopeCase& c) {
  RopeCase g = c;
  g.source = CosSinKind::kHfCosSinGathered;
  g.cs_dtype = c.dtype;
  return g;
}

RopeCosSin rope_case_gathered(const RopeCase& g, const DeviceBuffer& cos, const DeviceBuffer& sin) {
  RopeCosSin cs;
  cs.kind = CosSinKind::kHfCosSinGathered;
  cs.cos = verify::gathered_table_view(g, cos.get());
  cs.sin = verify::gathered_table_view(g, sin.get());
  return cs;
}

std::vector<std::pair<std::string, int64_t>> rope_case_shape(const RopeCase& c) {
  return {{"T", c.tokens()}, {"Hq", c.hq}, {"Hk", c.hk}, {"D", c.head_dim}};
}

TensorRef rope_heads_view(const RopeCase& c, const DeviceBuffer& buf, int64_t nh) {
  return TensorRef::contiguous(buf.get(), c.dtype, {c.tokens(), nh, c.head_dim}, Device::cuda(0));
}

RopePositions rope_case_positions(const RopeCase& c, const DeviceBuffer& pos) {
  RopePositions p;
  p.positions = TensorRef::contiguous(pos.get(), DType::kInt64, {c.tokens()}, Device::cuda(0));
  return p;
}

RopeCosSin rope_case_cache(const RopeCase& c, const DeviceBuffer& cache) {
  RopeCosSin cs;
  cs.kind = CosSinKind::kCache;
  cs.cache =
      TensorRef::contiguous(cache.get(), c.cs_dtype, {c.table_rows, c.head_dim}, Device::cuda(0));
  return cs;
}

RopeShapeBuffers upload_rope_shape(const RopeCase& c, const RopeInputs& in) {
  const int64_t t = c.tokens(), d = c.head_dim;
  const size_t es = dtype_size(c.dtype);
  RopeShapeBuffers b;
  b.q = verify::to_device(in.q);
  b.k = verify::to_device(in.k);
  b.q_out = DeviceBuffer(in.q.bytes.size());
  b.k_out = DeviceBuffer(in.k.bytes.size());
  b.cache = verify::to_device(in.cache);
  b.pos = DeviceBuffer(static_cast<size_t>(t) * sizeof(int64_t));
  b.pos.upload(in.positions.data(), b.pos.size());
  b.cos = DeviceBuffer(static_cast<size_t>(t * d) * es);
  b.sin = DeviceBuffer(static_cast<size_t>(t * d) * es);
  b.rot = DeviceBuffer(static_cast<size_t>(t * std::max(c.hq, c.hk) * d) * es);
  return b;
}

RopeBaselineBuffers rope_baseline_view(const RopeCase& c, const RopeShapeBuffers& b) {
  return RopeBaselineBuffers{b.q.get(),
                             b.k.get(),
                             b.q_out.get(),
                             b.k_out.get(),
                             b.cache.get(),
                             c.cs_dtype,
                             static_cast<const int64_t*>(b.pos.get()),
                             b.cos.get(),
                             b.sin.get(),
                             b.rot.get()};
}

namespace {

double frac_exact(const RopeErrorStats& a, const RopeErrorStats& b) {
  const int64_t n = a.count + b.count;
  return n ? static_cast<double>(a.exact + b.exact) / static_cast<double>(n) : 1.0;
}

}  // namespace

void fill_rope_errors(const verify::RopeOutcome& out, ResultRow* row) {
  row->max_err_ulp = std::max(out.q.max_ulp, out.k.max_ulp);
  row->tol_ulp = std::max(out.tol_q, out.tol_k);
  row->frac_exact = frac_exact(out.q, out.k);
  row->passed = out.passed;
  if (!out.passed) row->note += "; " + out.summary;
}

void check_rope_baseline(const RopeCase& c, const RopeInputs& in, const HostTensor& q_out,
                         const HostTensor& k_out, bool inverse, ResultRow* row) {
  const DType dt = c.dtype;
  const int64_t t = c.tokens(), d = c.head_dim, r = c.rot(), h = r / 2;
  const bool neox = c.style == RopeStyle::kNeox;
  const double tol_q = ref::tolerance_ulp("rope_unfused_baseline", "q_out", dt);
  const double tol_k = ref::tolerance_ulp("rope_unfused_baseline", "k_out", dt);
  const double term = ref::tolerance_ulp("rope_unfused_baseline", "product_term", dt);
  RopeErrorStats sq, sk, raw;
  std::mutex mu;
  verify::parallel_rows(t, [&](int64_t t0, int64_t t1) {
    RopeErrorStats eq, ek, er;
    std::vector<double> cv(h), sv(h), x(d), y(d);
    for (int64_t tok = t0; tok < t1; ++tok) {
      const int64_t p = in.positions[tok];
      for (int64_t i = 0; i < h; ++i) {
        cv[i] = ref::round_to_dtype(in.cache.get(p * r + i), dt);
        sv[i] = ref::round_to_dtype(in.cache.get(p * r + h + i), dt);
      }
      for (int which = 0; which < 2; ++which) {
        const HostTensor& src = which == 0 ? in.q : in.k;
        const HostTensor& got = which == 0 ? q_out : k_out;
        const int64_t heads = which == 0 ? c.hq : c.hk;
        RopeErrorStats& es = which == 0 ? eq : ek;
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j) x[j] = src.get(base + j);
          ref::rope_rotate_ref(x.data(), y.data(), d, r, c.style, cv.data(), sv.data(), inverse);
          for (int64_t j = 0; j < r; ++j) {
            const int64_t i = neox ? (j < h ? j : j - h) : j / 2;
            const int64_t partner = neox ? (j < h ? j + h : j - h) : (j ^ 1);
            const double allow = term * (ref::ulp_of(std::fabs(x[j] * cv[i]), dt) +
                                         ref::ulp_of(std::fabs(x[partner] * sv[i]), dt));
            const double g = got.get(base + j);
            es.add_allowing(g, y[j], dt, base + j, dt, allow);
            er.add(g, y[j], dt, base + j);
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    sq.merge(eq);
    sk.merge(ek);
    raw.merge(er);
  });
  row->max_err_ulp = std::max(sq.max_ulp, sk.max_ulp);
  row->tol_ulp = std::max(tol_q, tol_k);
  row->frac_exact = frac_exact(sq, sk);
  row->passed = tol_q >= 0 && tol_k >= 0 && term >= 0 && sq.max_ulp <= tol_q && sk.max_ulp <= tol_k;
  std::ostringstream os;
  os << "; err beyond " << term << " ulp of |x*cos|+|rot*sin| (rounded cos/sin); raw max "
     << raw.max_ulp << " ulp";
  if (!row->passed) {
    const RopeErrorStats& w = sq.max_ulp >= sk.max_ulp ? sq : sk;
    os << "; FAIL " << verify::describe(c) << ": q_out max " << sq.max_ulp << "; k_out max "
       << sk.max_ulp << " (tol " << row->tol_ulp << "); worst " << (&w == &sq ? "q_out" : "k_out")
       << " at " << w.worst_index << ": got " << w.worst_got << " ref " << w.worst_ref;
  }
  row->note += os.str();
}

}  // namespace ropenorm::bench
