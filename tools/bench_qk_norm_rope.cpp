// Fused QK-norm + RoPE rows of the main job (see bench_qk_norm_rope.h).
//
// The composition's check: its rms_norm rounds each normalised value n to bf16 (within one bf16
// ulp of the exact n, as the rms_norm rows verify), and rope then rotates the rounded values.
// Its oracle therefore rotates the float64 n rounded to bf16, and each element is allowed
// ulp(n_a) * |c| + ulp(n_b) * |s| (one ulp of each rotated input, carried through the rotation)
// before its error is measured in output ulps against the one table's "rope" q_out / k_out rows.
#include "bench_qk_norm_rope.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_rope.h"
#include "bench_rope_shared.h"
#include "core/checks.h"
#include "reference/host_float.h"
#include "reference/rms_norm_ref.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/qk_norm_rope_case.h"

namespace ropenorm::bench {

namespace {

using ref::HostTensor;
using verify::DeviceBuffer;

constexpr float kEps = 1e-6f;

struct QkBuffers {
  DeviceBuffer q, k, wq, wk, q_out, k_out, q_rstd, k_rstd, cache, pos;
};

// The composition's outputs against the oracle (see the file comment); fills the row's errors.
void check_composition(const verify::QkNormRopeCase& qc, const verify::QkNormRopeInputs& in,
                       const HostTensor& q_out, const HostTensor& k_out, ResultRow* row) {
  const verify::RopeCase& c = qc.rope;
  const DType dt = c.dtype;
  const int64_t t = c.tokens(), d = c.head_dim, r = c.rot(), h = r / 2;
  const bool neox = c.style == RopeStyle::kNeox;
  const double tol_q = ref::tolerance_ulp("rope", "q_out", dt);
  const double tol_k = ref::tolerance_ulp("rope", "k_out", dt);
  ref::ErrorStats sq, sk;
  std::mutex mu;
  verify::parallel_rows(t, [&](int64_t t0, int64_t t1) {
    ref::ErrorStats eq, ek;
    std::vector<double> cv(h), sv(h), x(d), w(d), n(d), y(d);
    double rstd = 0;
    for (int64_t tok = t0; tok < t1; ++tok) {
      const int64_t p = in.rope.positions[tok];
      for (int64_t i = 0; i < h; ++i) {
        cv[i] = in.rope.cache.get(p * r + i);
        sv[i] = in.rope.cache.get(p * r + h + i);
      }
      for (int which = 0; which < 2; ++which) {
        const HostTensor& src = which == 0 ? in.rope.q : in.rope.k;
        const HostTensor& wt = which == 0 ? in.wq : in.wk;
        const HostTensor& got = which == 0 ? q_out : k_out;
        const int64_t heads = which == 0 ? c.hq : c.hk;
        ref::ErrorStats& es = which == 0 ? eq : ek;
        for (int64_t j = 0; j < d; ++j) w[j] = wt.get(j);
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j) x[j] = src.get(base + j);
          ref::rms_norm_row_ref(x.data(), w.data(), d, kEps, 0.0, Rounding::kExact, dt, n.data(),
                                &rstd);
          for (int64_t j = 0; j < d; ++j) n[j] = ref::round_to_dtype(n[j], dt);
          ref::rope_rotate_ref(n.data(), y.data(), d, r, c.style, cv.data(), sv.data(), false);
          for (int64_t j = 0; j < d; ++j) {
            double allow = ref::ulp_of(std::fabs(n[j]), dt);
            if (j < r) {
              const int64_t i = neox ? (j < h ? j : j - h) : j / 2;
              const int64_t partner = neox ? (j < h ? j + h : j - h) : (j ^ 1);
              allow = ref::ulp_of(std::fabs(n[j]), dt) * std::fabs(cv[i]) +
                      ref::ulp_of(std::fabs(n[partner]), dt) * std::fabs(sv[i]);
            }
            es.add_allowing(got.get(base + j), y[j], dt, base + j, dt, allow);
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    sq.merge(eq);
    sk.merge(ek);
  });
  row->max_err_ulp = std::max(sq.max_ulp, sk.max_ulp);
  row->tol_ulp = std::max(tol_q, tol_k);
  row->frac_exact = (sq.count + sk.count)
                        ? static_cast<double>(sq.exact + sk.exact) / (sq.count + sk.count)
                        : 1.0;
  row->passed = tol_q >= 0 && tol_k >= 0 && sq.max_ulp <= tol_q && sk.max_ulp <= tol_k;
  if (!row->passed) {
    std::ostringstream os;
    os << "; FAIL q_out max " << sq.max_ulp << " k_out max " << sk.max_ulp << " (tol "
       << row->tol_ulp << ")";
    row->note += os.str();
  }
}

/// ropenorm's row of op for case qc: its call verified against the oracle (run_case), the bytes
/// and a note naming the cos/sin source and ending in `rstd`.
ResultRow verified_row(const char* op, const verify::QkNormRopeCase& qc,
                       const verify::QkNormRopeInputs& in, int64_t bytes, const char* rstd) {
  ResultRow row{op, "ropenorm", dtype_name(qc.rope.dtype), rope_case_shape(qc.rope)};
  row.bytes = bytes;
  const std::string source = qc.rope.source == CosSinKind::kHfCosSinGathered
                                 ? std::string("Hugging Face cos/sin ") +
                                       dtype_name(qc.rope.cs_dtype) + " gathered per token [T R=D]"
                                 : std::string("cos/sin cache f32 [P=T R=D]");
  row.note = "neox; one launch; bf16 weights; " + source + "; " + rstd;
  const verify::QkNormRopeOutcome out = verify::run_case(qc, in);
  row.max_err_ulp = std::max(out.q.max_ulp, out.k.max_ulp);
  row.tol_ulp = std::max(out.tol_q, out.tol_k);
  const int64_t n = out.q.count + out.k.count;
  row.frac_exact = n ? static_cast<double>(out.q.exact + out.k.exact) / n : 1.0;
  row.passed = out.passed;
  if (!out.passed) row.note += "; " + out.summary;
  return row;
}

}  // namespace

verify::QkNormRopeCase qk_norm_rope_bench_case(const BenchOptions& o, int64_t t, int64_t d,
                                               uint64_t seed) {
  verify::QkNormRopeCase qc;
  qc.rope = standard_rope_case(t, o.rope_hq, o.rope_hk, d, RopeStyle::kNeox, seed);
  qc.w_dtype = qc.rope.dtype;
  qc.eps = kEps;
  qc.with_rstd = true;
  return qc;
}

Status bench_qk_norm_rope(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log) {
  uint64_t seed = 9001;
  for (int64_t d : o.qk_ds) {
    for (int64_t t : o.rope_ts) {
      const verify::QkNormRopeCase qc = qk_norm_rope_bench_case(o, t, d, seed++);
      const verify::RopeCase& c = qc.rope;
      const DType dt = c.dtype;
      const auto in = verify::make_inputs(qc);
      // The rotation's bytes and the saved rstd (one float per head vector).
      const int64_t bytes = rope_case_bytes(c) + t * (c.hq + c.hk) * 4;
      const auto shape = rope_case_shape(c);

      // ropenorm, with the rstd saved (a training forward) and without it (a serving forward, as
      // the peers' kernels run: the same kernel with the rstd store skipped; its bytes are the
      // rotation's alone), each verified through the public API on poisoned outputs.
      verify::QkNormRopeCase qc_serve = qc;
      qc_serve.with_rstd = false;
      ResultRow ours = verified_row("qk_norm_rope", qc, in, bytes, "rstd saved");
      ResultRow serve =
          verified_row("qk_norm_rope_no_rstd", qc_serve, in, rope_case_bytes(c), "rstd not saved");
      // And with Hugging Face's cos/sin gathered per token (the transformers integration's
      // source), the rstd saved.
      verify::QkNormRopeCase qc_gathered = qc;
      qc_gathered.rope = gathered_rope_case(c);
      const auto in_gathered = verify::make_inputs(qc_gathered);
      ResultRow gathered =
          verified_row("qk_norm_rope_gathered", qc_gathered, in_gathered,
                       rope_case_bytes(qc_gathered.rope) + t * (c.hq + c.hk) * 4, "rstd saved");

      // Device buffers for the composition and for timing.
      QkBuffers b;
      b.q = verify::to_device(in.rope.q);
      b.k = verify::to_device(in.rope.k);
      b.wq = verify::to_device(in.wq);
      b.wk = verify::to_device(in.wk);
      b.q_out = DeviceBuffer(in.rope.q.bytes.size());
      b.k_out = DeviceBuffer(in.rope.k.bytes.size());
      b.q_rstd = DeviceBuffer(static_cast<size_t>(t * c.hq) * 4);
      b.k_rstd = DeviceBuffer(static_cast<size_t>(t * c.hk) * 4);
      b.cache = verify::to_device(in.rope.cache);
      b.pos = DeviceBuffer(static_cast<size_t>(t) * sizeof(int64_t));
      b.pos.upload(in.rope.positions.data(), b.pos.size());

      const Device dev = Device::cuda(0);
      const TensorRef q = rope_heads_view(c, b.q, c.hq), k = rope_heads_view(c, b.k, c.hk);
      const TensorRef q_out = rope_heads_view(c, b.q_out, c.hq);
      const TensorRef k_out = rope_heads_view(c, b.k_out, c.hk);
      const TensorRef wq = TensorRef::contiguous(b.wq.get(), dt, {d}, dev);
      const TensorRef wk = TensorRef::contiguous(b.wk.get(), dt, {d}, dev);
      const TensorRef q_rstd =
          TensorRef::contiguous(b.q_rstd.get(), DType::kFloat32, {t, c.hq}, dev);
      const TensorRef k_rstd =
          TensorRef::contiguous(b.k_rstd.get(), DType::kFloat32, {t, c.hk}, dev);
      const RopePositions pos = rope_case_positions(c, b.pos);
      const RopeCosSin cs = rope_case_cache(c, b.cache);
      RopeParams rp;
      QkNormParams np;
      np.eps = kEps;
      RmsNormParams rn;
      rn.eps = kEps;
      // The composition works on [rows, D] views of the same buffers.
      const TensorRef q_rows = TensorRef::contiguous(b.q.get(), dt, {t * c.hq, d}, dev);
      const TensorRef k_rows = TensorRef::contiguous(b.k.get(), dt, {t * c.hk, d}, dev);
      const TensorRef qo_rows = TensorRef::contiguous(b.q_out.get(), dt, {t * c.hq, d}, dev);
      const TensorRef ko_rows = TensorRef::contiguous(b.k_out.get(), dt, {t * c.hk, d}, dev);
      const TensorRef qr_flat =
          TensorRef::contiguous(b.q_rstd.get(), DType::kFloat32, {t * c.hq}, dev);
      const TensorRef kr_flat =
          TensorRef::contiguous(b.k_rstd.get(), DType::kFloat32, {t * c.hk}, dev);
      auto fused = [&](const TensorRef& qr, const TensorRef& kr) -> Launch {
        return [&, qr, kr](cudaStream_t st) {
          return qk_norm_rope(q, k, wq, wk, q_out, k_out, qr, kr, pos, cs, rp, np, st);
        };
      };
      const Launch ours_launch = fused(q_rstd, k_rstd);
      const Launch serve_launch = fused(TensorRef{}, TensorRef{});
      const DeviceBuffer gcos = verify::to_device(in_gathered.rope.cos);
      const DeviceBuffer gsin = verify::to_device(in_gathered.rope.sin);
      const RopeCosSin gcs = rope_case_gathered(qc_gathered.rope, gcos, gsin);
      const Launch gathered_launch = [&](cudaStream_t st) {
        return qk_norm_rope(q, k, wq, wk, q_out, k_out, q_rstd, k_rstd, RopePositions{}, gcs, rp,
                            np, st);
      };
      const Launch comp_launch = [&](cudaStream_t st) {
        ROPENORM_TRY(rms_norm(q_rows, wq, qo_rows, qr_flat, rn, st));
        ROPENORM_TRY(rms_norm(k_rows, wk, ko_rows, kr_flat, rn, st));
        return rope(q_out, k_out, q_out, k_out, pos, cs, rp, st);
      };

      ResultRow comp{"qk_norm_rope", "unfused", dtype_name(dt), shape};
      comp.bytes = bytes;
      comp.note = "neox; 3 launches: ropenorm rms_norm (q), rms_norm (k), rope in place";
      b.q_out.poison();
      b.k_out.poison();
      ROPENORM_TRY(comp_launch(nullptr));
      ROPENORM_TRY(verify::sync_device());
      check_composition(qc, in, verify::from_device(b.q_out, dt, t * c.hq * d),
                        verify::from_device(b.k_out, dt, t * c.hk * d), &comp);

      if (o.timing) {
        const bool graph = t <= o.rope_graph_max_t;
        ROPENORM_TRY(time_launch(o, graph, ours_launch, &ours));
        ROPENORM_TRY(time_launch(o, graph, serve_launch, &serve));
        ROPENORM_TRY(time_launch(o, graph, gathered_launch, &gathered));
        ROPENORM_TRY(time_launch(o, graph, comp_launch, &comp));
      }
      print_rope_row(log, ours);
      print_rope_row(log, serve);
      print_rope_row(log, gathered);
      print_rope_row(log, comp);
      rows->push_back(ours);
      rows->push_back(serve);
      rows->push_back(gathered);
      rows->push_back(comp);
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
