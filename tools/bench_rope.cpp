// RoPE rows of the main job (see bench_rope.h).
//
// The baseline's check: it rounds cos and sin to q's dtype (Hugging Face's cos.to(x.dtype)), so
// its oracle rotates with those rounded values; it then rounds x * cos and rot * sin separately
// and their sum once more, so under cancellation (a c close to b s) its error is bounded by the
// products' magnitudes, not by the output's ulp. Each element is therefore allowed
// product_term * (ulp(|x * cos|) + ulp(|rot * sin|)) (output-dtype ulps at the exact products)
// before its error is measured in output ulps against the q_out / k_out rows of
// "rope_unfused_baseline" in the tolerance table. The error without that allowance is reported in
// the row's note ("raw").
#include "bench_rope.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>

#include "baseline_rope.h"
#include "bench_common.h"
#include "bench_rms_norm.h"
#include "bench_timing.h"
#include "core/checks.h"
#include "reference/host_float.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/rope_case.h"

namespace ropenorm::bench {

namespace {

using ref::HostTensor;
using verify::DeviceBuffer;
using verify::RopeCase;
using verify::RopeErrorStats;
using verify::RopeInputs;

struct RopeShapeBuffers {
  DeviceBuffer q, k, q_out, k_out, cache, pos, cos, sin, rot;
};

RopeShapeBuffers upload(const RopeCase& c, const RopeInputs& in) {
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

RopeBaselineBuffers baseline_view(const RopeCase& c, const RopeShapeBuffers& b) {
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

double frac_exact(const RopeErrorStats& a, const RopeErrorStats& b) {
  const int64_t n = a.count + b.count;
  return n ? static_cast<double>(a.exact + b.exact) / static_cast<double>(n) : 1.0;
}

void fill_errors(const verify::RopeOutcome& out, ResultRow* row) {
  row->max_err_ulp = std::max(out.q.max_ulp, out.k.max_ulp);
  row->tol_ulp = std::max(out.tol_q, out.tol_k);
  row->frac_exact = frac_exact(out.q, out.k);
  row->passed = out.passed;
  if (!out.passed) row->note += "; " + out.summary;
}

// The baseline's outputs against the oracle (see the file comment); fills the row's errors.
void check_baseline(const RopeCase& c, const RopeInputs& in, const HostTensor& q_out,
                    const HostTensor& k_out, ResultRow* row) {
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
          ref::rope_rotate_ref(x.data(), y.data(), d, r, c.style, cv.data(), sv.data(), false);
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

}  // namespace

void print_rope_row(std::ostream& os, const ResultRow& r) {
  std::ostringstream line;
  print_row(line, r);
  std::string s = line.str();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  os << s << "  " << r.note.substr(0, r.note.find_first_of(",;")) << "\n";
  os.flush();
}

Status bench_rope(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log) {
  const DType dt = DType::kBFloat16;
  const DType cache_dt = DType::kFloat32;
  uint64_t seed = 4096;
  for (int64_t d : o.rope_ds) {
    for (int64_t t : o.rope_ts) {
      std::vector<RopeStyle> styles = {RopeStyle::kNeox};
      if (d == 128) styles.push_back(RopeStyle::kGptj);
      for (RopeStyle style : styles) {
        RopeCase c;
        c.seq = t;
        c.hq = o.rope_hq;
        c.hk = o.rope_hk;
        c.head_dim = d;
        c.style = style;
        c.dtype = dt;
        c.source = CosSinKind::kCache;
        c.cs_dtype = cache_dt;
        c.layout = verify::RopeLayout::kSeparate;
        c.pos_kind = verify::RopePosKind::kI64;
        c.table_rows = t;
        c.seed = seed++;
        const auto in = verify::make_inputs(c);
        const int64_t elem = static_cast<int64_t>(dtype_size(dt));
        const int64_t bytes = 2 * t * (c.hq + c.hk) * d * elem +
                              t * d * static_cast<int64_t>(dtype_size(cache_dt)) +
                              t * static_cast<int64_t>(sizeof(int64_t));
        const std::vector<std::pair<std::string, int64_t>> shape = {
            {"T", t}, {"Hq", c.hq}, {"Hk", c.hk}, {"D", d}};
        const std::string sname = rope_style_name(style);

        // ropenorm: verified through the public API on poisoned outputs.
        ResultRow ours{"rope", "ropenorm", dtype_name(dt), shape};
        ours.bytes = bytes;
        ours.note = sname + "; cos/sin cache f32 [P=T R=D]; random int64 positions";
        fill_errors(verify::run_case(c, in), &ours);

        // The unfused baseline, verified on the same inputs.
        RopeShapeBuffers b = upload(c, in);
        b.q_out.poison();
        b.k_out.poison();
        const RopeBaselineBuffers bv = baseline_view(c, b);
        ROPENORM_TRY(baseline_rope(bv, dt, style, t, c.hq, c.hk, d, nullptr));
        ROPENORM_TRY(verify::sync_device());
        ResultRow base{"rope", "unfused", dtype_name(dt), shape};
        base.bytes = bytes;
        base.note =
            sname + "; 5 launches; cos/sin cache f32 gathered to " + std::string(dtype_name(dt));
        check_baseline(c, in, verify::from_device(b.q_out, dt, t * c.hq * d),
                       verify::from_device(b.k_out, dt, t * c.hk * d), &base);

        if (o.timing) {
          const Device dev = Device::cuda(0);
          const TensorRef q = TensorRef::contiguous(b.q.get(), dt, {t, c.hq, d}, dev);
          const TensorRef k = TensorRef::contiguous(b.k.get(), dt, {t, c.hk, d}, dev);
          const TensorRef q_out = TensorRef::contiguous(b.q_out.get(), dt, {t, c.hq, d}, dev);
          const TensorRef k_out = TensorRef::contiguous(b.k_out.get(), dt, {t, c.hk, d}, dev);
          RopePositions pos;
          pos.positions = TensorRef::contiguous(b.pos.get(), DType::kInt64, {t}, dev);
          RopeCosSin cs;
          cs.kind = CosSinKind::kCache;
          cs.cache = TensorRef::contiguous(b.cache.get(), cache_dt, {c.table_rows, d}, dev);
          RopeParams p;
          p.style = style;
          const Launch ours_launch = [&](cudaStream_t st) {
            return rope(q, k, q_out, k_out, pos, cs, p, st);
          };
          const Launch base_launch = [&](cudaStream_t st) {
            return baseline_rope(bv, dt, style, t, c.hq, c.hk, d, st);
          };
          const bool graph = t <= o.rope_graph_max_t;
          ROPENORM_TRY(time_launch(o, graph, ours_launch, &ours));
          ROPENORM_TRY(time_launch(o, graph, base_launch, &base));
        }
        print_rope_row(log, ours);
        print_rope_row(log, base);
        rows->push_back(ours);
        rows->push_back(base);
      }
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
