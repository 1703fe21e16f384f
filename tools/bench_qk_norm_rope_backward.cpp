// Fused QK-norm + RoPE backward rows of the main job (see bench_qk_norm_rope_backward.h).
//
// The composition's check: its rope rounds g_n = rope_inverse(dout) to bf16 (within one bf16 ulp
// e_i of the exact value), and rms_norm_backward then differentiates with the rounded values.
// dx_j depends on g_n through r (w_j + o) g_n[j] - r xh_j sum_i (w_i + o) g_n[i] xh_i / D, so each
// element is allowed r |w_j + o| e_j + r |xh_j| sum_i |w_i + o| |xh_i| e_i / D, plus the fp32
// allowance of the fused kernel's own check (the table's dx_term, or rms_norm_backward's
// dx_scale_term where larger), before its error is measured in output ulps against the one
// table's qk_norm_rope_backward dq / dk rows. Its dw (summed from rounded g_n) is not checked.
#include "bench_qk_norm_rope_backward.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_qk_norm_rope.h"
#include "bench_rope.h"
#include "bench_rope_shared.h"
#include "core/checks.h"
#include "reference/host_float.h"
#include "reference/qk_norm_rope_grad_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/qk_norm_rope_backward_case.h"
#include "verify/qk_norm_rope_case.h"

namespace ropenorm::bench {

namespace {

using ref::HostTensor;
using verify::DeviceBuffer;

constexpr float kEps = 1e-6f;
constexpr const char* kOp = "qk_norm_rope_backward";

// The composition's dq / dk against the oracle (see the file comment); fills the row's errors.
void check_composition(const verify::QkNormRopeBackwardCase& bc,
                       const verify::QkNormRopeBackwardInputs& in, const std::vector<float>& rq,
                       const std::vector<float>& rk, const HostTensor& dq, const HostTensor& dk,
                       ResultRow* row) {
  const verify::RopeCase& c = bc.rope;
  const DType dt = c.dtype;
  const int64_t t = c.tokens(), d = c.head_dim, r = c.rot(), h = r / 2;
  const double tol_q = ref::tolerance_ulp(kOp, "dq", dt);
  const double tol_k = ref::tolerance_ulp(kOp, "dk", dt);
  const double term =
      std::max(ref::tolerance_ulp(kOp, "dx_term", DType::kFloat32),
               ref::tolerance_ulp("rms_norm_backward", "dx_scale_term", DType::kFloat32));
  ref::ErrorStats sq, sk;
  std::mutex mu;
  verify::parallel_rows(t, [&](int64_t t0, int64_t t1) {
    ref::ErrorStats eq, ek;
    std::vector<double> cv(h), sv(h), x(d), dy(d), w(d), dx(d), gn(d), e(d);
    for (int64_t tok = t0; tok < t1; ++tok) {
      const int64_t p = in.rope.positions[tok];
      for (int64_t i = 0; i < h; ++i) {
        cv[i] = in.rope.cache.get(p * r + i);
        sv[i] = in.rope.cache.get(p * r + h + i);
      }
      for (int which = 0; which < 2; ++which) {
        const HostTensor& src = which == 0 ? in.rope.q : in.rope.k;
        const HostTensor& grad = which == 0 ? in.dq_out : in.dk_out;
        const HostTensor& wt = which == 0 ? in.wq : in.wk;
        const HostTensor& got = which == 0 ? dq : dk;
        const std::vector<float>& saved = which == 0 ? rq : rk;
        const int64_t heads = which == 0 ? c.hq : c.hk;
        ref::ErrorStats& es = which == 0 ? eq : ek;
        for (int64_t j = 0; j < d; ++j) w[j] = wt.get(j);
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j) {
            x[j] = src.get(base + j);
            dy[j] = grad.get(base + j);
          }
          const double given = static_cast<double>(saved[tok * heads + hd]);
          double rr = 0.0;
          ref::qk_norm_rope_grad_row_ref(x.data(), dy.data(), w.data(), d, r, c.style, cv.data(),
                                         sv.data(), kEps, 0.0, &given, dx.data(), nullptr,
                                         gn.data(), &rr);
          double spread = 0.0, m_abs = 0.0;
          for (int64_t i = 0; i < d; ++i) {
            e[i] = ref::ulp_of(std::fabs(gn[i]), dt);
            spread += std::fabs(w[i]) * std::fabs(x[i] * rr) * e[i];
            m_abs += std::fabs(gn[i] * w[i]) * std::fabs(x[i] * rr);
          }
          spread /= static_cast<double>(d);
          m_abs /= static_cast<double>(d);
          for (int64_t j = 0; j < d; ++j) {
            const double xh = std::fabs(x[j] * rr);
            const double s_j = rr * (std::fabs(gn[j] * w[j]) + xh * m_abs);
            const double allow = rr * (std::fabs(w[j]) * e[j] + xh * spread) +
                                 term * ref::ulp_of(s_j, DType::kFloat32);
            es.add_allowing(got.get(base + j), dx[j], dt, base + j, dt, allow);
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
  row->passed = tol_q >= 0 && tol_k >= 0 && term >= 0 && sq.max_ulp <= tol_q && sk.max_ulp <= tol_k;
  if (!row->passed) {
    std::ostringstream os;
    os << "; FAIL dq max " << sq.max_ulp << " dk max " << sk.max_ulp << " (tol " << row->tol_ulp
       << ")";
    row->note += os.str();
  }
}

// The row's error fields from a backward outcome (dq, dk and both dw in their own units).
void fill_from_outcome(const verify::QkNormRopeBackwardOutcome& out, ResultRow* row) {
  row->max_err_ulp = std::max({out.dq.max_ulp, out.dk.max_ulp, out.dwq_err, out.dwk_err});
  row->tol_ulp = std::max({out.tol_dq, out.tol_dk, out.tol_dw});
  const int64_t n = out.dq.count + out.dk.count;
  row->frac_exact = n ? static_cast<double>(out.dq.exact + out.dk.exact) / n : 1.0;
  row->passed = out.passed;
  if (!out.passed) row->note += "; " + out.summary;
}

struct Buffers {
  DeviceBuffer q, k, wq, wk, gq, gk, dq, dk, dwq, dwk, ws, q_rstd, k_rstd, cache, pos;
  DeviceBuffer q_out, k_out, tq, tk, ws_rq, ws_rk;  // forward outputs; composition scratch
};

}  // namespace

Status bench_qk_norm_rope_backward(const BenchOptions& o, std::vector<ResultRow>* rows,
                                   std::ostream& log) {
  const int64_t d = 128;
  uint64_t seed = 9101;
  for (int64_t t : {int64_t{1}, int64_t{1024}, int64_t{32768}}) {
    // The forward's case, and the backward of the same shape and parameters.
    const verify::QkNormRopeCase fc = qk_norm_rope_bench_case(o, t, d, seed++);
    verify::QkNormRopeBackwardCase bc;
    bc.rope = fc.rope;
    bc.w_dtype = fc.w_dtype;
    bc.eps = fc.eps;
    bc.with_rstd = true;
    bc.want_dw = true;
    const verify::RopeCase& c = bc.rope;
    const DType dt = c.dtype;
    const auto in = verify::make_inputs(bc);
    const int64_t elem = static_cast<int64_t>(dtype_size(dt));
    const int64_t heads = c.hq + c.hk;
    // The forward's bytes (a rotation's, and the saved rstd); the backward reads one more
    // q- and k-sized tensor (dq', dk', q, k in; dq, dk out).
    const int64_t fwd_bytes = rope_case_bytes(c) + t * heads * 4;
    const int64_t bwd_bytes = fwd_bytes + t * heads * d * elem;
    const auto shape = rope_case_shape(c);

    // ropenorm, verified through the public API on poisoned outputs.
    ResultRow ours{"qk_norm_rope_backward", "ropenorm", dtype_name(dt), shape};
    ours.bytes = bwd_bytes;
    ours.note =
        "neox; one launch + one dw column-sum launch (dwq and dwk); bf16 weights; cache f32 [P=T "
        "R=D]; rstd saved";
    fill_from_outcome(verify::run_case(bc, in), &ours);

    // The forward on the same inputs (for the fwd + bwd rows).
    verify::QkNormRopeInputs fin;
    fin.rope = in.rope;
    fin.wq = in.wq;
    fin.wk = in.wk;
    const verify::QkNormRopeOutcome fwd = verify::run_case(fc, fin);

    // Device buffers for the composition and for timing; the saved rstd is the exact r in fp32.
    std::vector<float> rq(static_cast<size_t>(t * c.hq)), rk(static_cast<size_t>(t * c.hk));
    for (int which = 0; which < 2; ++which) {
      const HostTensor& x = which == 0 ? in.rope.q : in.rope.k;
      std::vector<float>& rs = which == 0 ? rq : rk;
      for (size_t i = 0; i < rs.size(); ++i) {
        double ss = 0.0;
        for (int64_t j = 0; j < d; ++j) ss += x.get(i * d + j) * x.get(i * d + j);
        rs[i] = static_cast<float>(1.0 / std::sqrt(ss / d + kEps));
      }
    }
    Buffers b;
    b.q = verify::to_device(in.rope.q);
    b.k = verify::to_device(in.rope.k);
    b.wq = verify::to_device(in.wq);
    b.wk = verify::to_device(in.wk);
    b.gq = verify::to_device(in.dq_out);
    b.gk = verify::to_device(in.dk_out);
    b.dq = DeviceBuffer(in.rope.q.bytes.size());
    b.dk = DeviceBuffer(in.rope.k.bytes.size());
    b.tq = DeviceBuffer(in.rope.q.bytes.size());
    b.tk = DeviceBuffer(in.rope.k.bytes.size());
    b.q_out = DeviceBuffer(in.rope.q.bytes.size());
    b.k_out = DeviceBuffer(in.rope.k.bytes.size());
    b.dwq = DeviceBuffer(static_cast<size_t>(d) * elem);
    b.dwk = DeviceBuffer(static_cast<size_t>(d) * elem);
    b.q_rstd = DeviceBuffer(rq.size() * 4);
    b.k_rstd = DeviceBuffer(rk.size() * 4);
    b.q_rstd.upload(rq.data(), rq.size() * 4);
    b.k_rstd.upload(rk.data(), rk.size() * 4);
    b.cache = verify::to_device(in.rope.cache);
    b.pos = DeviceBuffer(static_cast<size_t>(t) * sizeof(int64_t));
    b.pos.upload(in.rope.positions.data(), b.pos.size());
    const size_t ws_bytes = qk_norm_rope_backward_workspace_size(t, c.hq, c.hk, d);
    b.ws = DeviceBuffer(std::max<size_t>(ws_bytes, 4));
    const size_t wrq = rms_norm_backward_workspace_size(t * c.hq, d);
    const size_t wrk = rms_norm_backward_workspace_size(t * c.hk, d);
    b.ws_rq = DeviceBuffer(std::max<size_t>(wrq, 4));
    b.ws_rk = DeviceBuffer(std::max<size_t>(wrk, 4));

    const Device dev = Device::cuda(0);
    auto heads_view = [&](const DeviceBuffer& buf, int64_t nh) {
      return rope_heads_view(c, buf, nh);
    };
    auto rows_view = [&](const DeviceBuffer& buf, int64_t nh) {
      return TensorRef::contiguous(buf.get(), dt, {t * nh, d}, dev);
    };
    const TensorRef q = heads_view(b.q, c.hq), k = heads_view(b.k, c.hk);
    const TensorRef gq = heads_view(b.gq, c.hq), gk = heads_view(b.gk, c.hk);
    const TensorRef dq = heads_view(b.dq, c.hq), dk = heads_view(b.dk, c.hk);
    const TensorRef tq = heads_view(b.tq, c.hq), tk = heads_view(b.tk, c.hk);
    const TensorRef q_out = heads_view(b.q_out, c.hq), k_out = heads_view(b.k_out, c.hk);
    const TensorRef wq = TensorRef::contiguous(b.wq.get(), dt, {d}, dev);
    const TensorRef wk = TensorRef::contiguous(b.wk.get(), dt, {d}, dev);
    const TensorRef dwq = TensorRef::contiguous(b.dwq.get(), dt, {d}, dev);
    const TensorRef dwk = TensorRef::contiguous(b.dwk.get(), dt, {d}, dev);
    const TensorRef q_rstd = TensorRef::contiguous(b.q_rstd.get(), DType::kFloat32, {t, c.hq}, dev);
    const TensorRef k_rstd = TensorRef::contiguous(b.k_rstd.get(), DType::kFloat32, {t, c.hk}, dev);
    const TensorRef qr_flat =
        TensorRef::contiguous(b.q_rstd.get(), DType::kFloat32, {t * c.hq}, dev);
    const TensorRef kr_flat =
        TensorRef::contiguous(b.k_rstd.get(), DType::kFloat32, {t * c.hk}, dev);
    const TensorRef ws = TensorRef::contiguous(b.ws.get(), DType::kFloat32,
                                               {static_cast<int64_t>(ws_bytes / 4)}, dev);
    const TensorRef ws_rq =
        TensorRef::contiguous(b.ws_rq.get(), DType::kFloat32, {static_cast<int64_t>(wrq / 4)}, dev);
    const TensorRef ws_rk =
        TensorRef::contiguous(b.ws_rk.get(), DType::kFloat32, {static_cast<int64_t>(wrk / 4)}, dev);
    const RopePositions pos = rope_case_positions(c, b.pos);
    const RopeCosSin cs = rope_case_cache(c, b.cache);
    RopeParams rp;
    RopeParams rp_inv;
    rp_inv.inverse = true;
    QkNormParams np;
    np.eps = kEps;
    RmsNormParams rn;
    rn.eps = kEps;
    RmsNormBackwardParams rbn;
    rbn.eps = kEps;

    const Launch ours_bwd = [&](cudaStream_t st) {
      return qk_norm_rope_backward(gq, gk, q, k, wq, wk, q_rstd, k_rstd, dq, dk, dwq, dwk, ws, pos,
                                   cs, rp, np, st);
    };
    const Launch ours_fwd_bwd = [&](cudaStream_t st) {
      ROPENORM_TRY(qk_norm_rope(q, k, wq, wk, q_out, k_out, q_rstd, k_rstd, pos, cs, rp, np, st));
      return ours_bwd(st);
    };
    const Launch comp_bwd = [&](cudaStream_t st) {
      ROPENORM_TRY(rope(gq, gk, tq, tk, pos, cs, rp_inv, st));
      ROPENORM_TRY(rms_norm_backward(rows_view(b.tq, c.hq), rows_view(b.q, c.hq), wq, qr_flat,
                                     rows_view(b.dq, c.hq), dwq, ws_rq, rbn, st));
      return rms_norm_backward(rows_view(b.tk, c.hk), rows_view(b.k, c.hk), wk, kr_flat,
                               rows_view(b.dk, c.hk), dwk, ws_rk, rbn, st);
    };
    const Launch comp_fwd_bwd = [&](cudaStream_t st) {
      ROPENORM_TRY(rms_norm(rows_view(b.q, c.hq), wq, rows_view(b.q_out, c.hq), qr_flat, rn, st));
      ROPENORM_TRY(rms_norm(rows_view(b.k, c.hk), wk, rows_view(b.k_out, c.hk), kr_flat, rn, st));
      ROPENORM_TRY(rope(q_out, k_out, q_out, k_out, pos, cs, rp, st));
      return comp_bwd(st);
    };

    ResultRow comp{"qk_norm_rope_backward", "unfused", dtype_name(dt), shape};
    comp.bytes = bwd_bytes;
    comp.note =
        "neox; 3 ops: ropenorm rope (inverse, bf16 out), rms_norm_backward (q rows), "
        "rms_norm_backward (k rows); dw not checked";
    b.dq.poison();
    b.dk.poison();
    ROPENORM_TRY(comp_bwd(nullptr));
    ROPENORM_TRY(verify::sync_device());
    check_composition(bc, in, rq, rk, verify::from_device(b.dq, dt, t * c.hq * d),
                      verify::from_device(b.dk, dt, t * c.hk * d), &comp);

    ResultRow ours_fb{"qk_norm_rope_fwd_bwd", "ropenorm", dtype_name(dt), shape};
    ours_fb.bytes = fwd_bytes + bwd_bytes;
    ours_fb.note = "neox; qk_norm_rope then qk_norm_rope_backward (2 fused launches + 2 dw sums)";
    ours_fb.max_err_ulp = std::max({ours.max_err_ulp, fwd.q.max_ulp, fwd.k.max_ulp});
    ours_fb.tol_ulp = std::max({ours.tol_ulp, fwd.tol_q, fwd.tol_k});
    ours_fb.frac_exact = ours.frac_exact;
    ours_fb.passed = ours.passed && fwd.passed;
    if (!fwd.passed) ours_fb.note += "; forward: " + fwd.summary;
    ResultRow comp_fb{"qk_norm_rope_fwd_bwd", "unfused", dtype_name(dt), shape};
    comp_fb.bytes = fwd_bytes + bwd_bytes;
    comp_fb.note =
        "neox; rms_norm (q), rms_norm (k), rope in place, then the 3 backward ops; error: the "
        "backward part (the forward composition is checked in the qk_norm_rope rows)";
    comp_fb.max_err_ulp = comp.max_err_ulp;
    comp_fb.tol_ulp = comp.tol_ulp;
    comp_fb.frac_exact = comp.frac_exact;
    comp_fb.passed = comp.passed;

    if (o.timing) {
      const bool graph = t <= o.rope_graph_max_t;
      ROPENORM_TRY(time_launch(o, graph, ours_bwd, &ours));
      ROPENORM_TRY(time_launch(o, graph, comp_bwd, &comp));
      ROPENORM_TRY(time_launch(o, graph, ours_fwd_bwd, &ours_fb));
      ROPENORM_TRY(time_launch(o, graph, comp_fwd_bwd, &comp_fb));
    }
    for (const ResultRow* r : {&ours, &comp, &ours_fb, &comp_fb}) {
      print_rope_row(log, *r);
      rows->push_back(*r);
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
