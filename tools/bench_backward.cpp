// RMSNorm backward rows of the main job (see bench_backward.h).
#include "bench_backward.h"

#include <algorithm>
#include <string>

#include "baseline_rms_norm.h"
#include "baseline_rms_norm_backward.h"
#include "bench_common.h"
#include "bench_rms_norm.h"
#include "bench_timing.h"
#include "core/checks.h"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"
#include "verify/device_buffer.h"
#include "verify/rms_norm_backward_case.h"

namespace ropenorm::bench {

namespace {

using verify::DeviceBuffer;
using verify::RmsNormBackwardCase;
using verify::RmsNormBackwardOutcome;

constexpr int64_t kNs[] = {1024, 4096, 8192, 4095};
constexpr int64_t kMs[] = {1, 4096, 32768};

bool listed(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Device copies of one shape's inputs, our outputs and the baseline's intermediates.
struct Buffers {
  DeviceBuffer dy, x, ds, w, rstd, y, dx, dres, dw, ws;                  // ropenorm
  DeviceBuffer t, b_rstd, b_y, dt, pw, dxa, drs, b_dx, b_dx_norm, b_dw;  // baseline
};

Buffers upload(const verify::RmsNormBackwardInputs& in, int64_t m, int64_t n, bool fused) {
  Buffers b;
  const size_t rows_bytes = in.x.bytes.size();
  b.dy = verify::to_device(in.dy);
  b.x = verify::to_device(in.x);
  if (fused) b.ds = verify::to_device(in.ds);
  b.w = verify::to_device(in.weight);
  b.rstd = verify::to_device(in.rstd);
  b.y = DeviceBuffer(rows_bytes);
  b.dx = DeviceBuffer(rows_bytes);
  if (fused) b.dres = DeviceBuffer(rows_bytes);
  b.dw = DeviceBuffer(in.weight.bytes.size());
  b.ws = DeviceBuffer(std::max<size_t>(rms_norm_backward_workspace_size(m, n), 4));
  b.t = DeviceBuffer(rows_bytes);
  b.b_rstd = DeviceBuffer(static_cast<size_t>(m) * 4);
  b.b_y = DeviceBuffer(rows_bytes);
  b.dt = DeviceBuffer(rows_bytes);
  b.pw = DeviceBuffer(rows_bytes);
  b.dxa = DeviceBuffer(static_cast<size_t>(m * n) * 4);
  b.drs = DeviceBuffer(static_cast<size_t>(m) * 4);
  b.b_dx = DeviceBuffer(rows_bytes);
  if (fused) b.b_dx_norm = DeviceBuffer(rows_bytes);
  b.b_dw = DeviceBuffer(in.weight.bytes.size());
  return b;
}

BaselineBuffers forward_view(const Buffers& b) {
  return BaselineBuffers{b.x.get(),
                         nullptr,
                         b.w.get(),
                         b.b_y.get(),
                         nullptr,
                         b.t.get(),
                         static_cast<float*>(b.b_rstd.get())};
}

BaselineBackwardBuffers backward_view(const Buffers& b, bool fused) {
  BaselineBackwardBuffers v{};
  v.dy = b.dy.get();
  v.x = b.x.get();
  v.weight = b.w.get();
  v.rstd = static_cast<const float*>(b.b_rstd.get());
  v.t = b.t.get();
  v.ds = fused ? b.ds.get() : nullptr;
  v.dt = b.dt.get();
  v.pw = b.pw.get();
  v.dxa = static_cast<float*>(b.dxa.get());
  v.drs = static_cast<float*>(b.drs.get());
  v.dx = b.b_dx.get();
  v.dx_norm = fused ? b.b_dx_norm.get() : nullptr;
  v.dw = b.b_dw.get();
  return v;
}

void fill_errors(const RmsNormBackwardOutcome& out, ResultRow* row) {
  row->max_err_ulp = out.dx.max_ulp;
  row->tol_ulp = out.tol_dx;
  row->frac_exact = out.dx.frac_exact();
  row->passed = out.passed;
  row->note = "err: dx; dw max " + std::to_string(out.dw.max_ulp) + " ulp";
  if (!out.passed) row->note += "; " + out.summary;
}

// Reads dx (and dresidual) and dw back and checks them against the oracle.
RmsNormBackwardOutcome check_device(const RmsNormBackwardCase& c,
                                    const verify::RmsNormBackwardInputs& in, const DeviceBuffer& dx,
                                    const DeviceBuffer* dres, const DeviceBuffer& dw) {
  RmsNormBackwardOutcome out;
  const DType dt = c.x_dtype;
  out.dx_out = verify::from_device(dx, dt, c.m * c.n);
  if (c.fused) out.dres_out = verify::from_device(*dres, dt, c.m * c.n);
  out.dw_out = verify::from_device(dw, c.w_dtype, c.n);
  verify::check_backward_outputs(c, in, &out);
  return out;
}

}  // namespace

Status bench_backward(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log) {
  const DType dt = DType::kBFloat16;
  const Device d = Device::cuda(0);
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  uint64_t seed = 4096;
  for (bool fused : {false, true}) {
    for (int64_t n : kNs) {
      if (!listed(o.ns, n)) continue;
      for (int64_t m : kMs) {
        if (!listed(o.ms, m)) continue;
        RmsNormBackwardCase c;
        c.m = m;
        c.n = n;
        c.x_dtype = c.dy_dtype = c.w_dtype = c.dx_dtype = c.dres_dtype = dt;
        c.fused = fused;
        c.has_ds = fused;
        c.seed = seed++;
        const auto in = verify::make_backward_inputs(c);
        const char* op = fused ? "add_rms_norm_backward" : "rms_norm_backward";
        const std::vector<std::pair<std::string, int64_t>> shape = {{"M", m}, {"N", n}};
        // Backward: dy, x (, ds) read, dx (, dresidual) written; w, rstd read; dw written.
        const int64_t bytes = m * n * es * (fused ? 5 : 3) + 2 * n * es + m * 4;

        // ropenorm, verified through the public API on poisoned outputs.
        ResultRow ours{op, "ropenorm", dtype_name(dt), shape};
        ours.bytes = bytes;
        fill_errors(verify::run_backward_case(c, in), &ours);

        // The unfused baseline after its own forward (which saves t and r), verified against
        // the oracle with r recomputed in float64.
        Buffers b = upload(in, m, n, fused);
        b.b_dx.poison();
        b.b_dw.poison();
        const BaselineBuffers fv = forward_view(b);
        const BaselineBackwardBuffers bv = backward_view(b, fused);
        const float eps = c.params.eps;
        ROPENORM_TRY(baseline_rms_norm(fv, dt, m, n, eps, nullptr));
        ROPENORM_TRY(baseline_rms_norm_backward(bv, dt, m, n, nullptr));
        ROPENORM_TRY(verify::sync_device());
        RmsNormBackwardCase cb = c;
        cb.give_rstd = false;
        const auto bo = check_device(cb, in, b.b_dx, fused ? &b.b_dx : nullptr, b.b_dw);
        ResultRow base{op, "unfused", dtype_name(dt), shape};
        base.bytes = bytes;
        fill_errors(bo, &base);

        const TensorRef dy = TensorRef::contiguous(b.dy.get(), dt, {m, n}, d);
        const TensorRef x = TensorRef::contiguous(b.x.get(), dt, {m, n}, d);
        const TensorRef ds = fused ? TensorRef::contiguous(b.ds.get(), dt, {m, n}, d) : TensorRef();
        const TensorRef w = TensorRef::contiguous(b.w.get(), dt, {n}, d);
        const TensorRef rstd = TensorRef::contiguous(b.rstd.get(), DType::kFloat32, {m}, d);
        const TensorRef y = TensorRef::contiguous(b.y.get(), dt, {m, n}, d);
        const TensorRef dx = TensorRef::contiguous(b.dx.get(), dt, {m, n}, d);
        const TensorRef dres =
            fused ? TensorRef::contiguous(b.dres.get(), dt, {m, n}, d) : TensorRef();
        const TensorRef dw = TensorRef::contiguous(b.dw.get(), dt, {n}, d);
        const TensorRef ws = TensorRef::contiguous(b.ws.get(), DType::kFloat32,
                                                   {static_cast<int64_t>(b.ws.size() / 4)}, d);
        const RmsNormBackwardParams bp{};
        const Launch ours_launch = [&](cudaStream_t st) {
          return fused ? add_rms_norm_backward(dy, ds, x, w, rstd, dx, dres, dw, ws, bp, st)
                       : rms_norm_backward(dy, x, w, rstd, dx, dw, ws, bp, st);
        };
        const Launch base_launch = [&](cudaStream_t st) {
          return baseline_rms_norm_backward(bv, dt, m, n, st);
        };
        const bool graph = m <= o.graph_max_m;
        if (o.timing) {
          ROPENORM_TRY(time_launch(o, graph, ours_launch, &ours));
          ROPENORM_TRY(time_launch(o, graph, base_launch, &base));
        }
        print_row(log, ours);
        print_row(log, base);
        rows->push_back(ours);
        rows->push_back(base);
        if (fused) {
          // The same call with dresidual absent: dx alone, the gradient of both x and residual
          // where they share a dtype (the torch autograd's form): one row tensor written less.
          RmsNormBackwardCase cs = c;
          cs.want_dres = false;
          ResultRow shared{"add_rms_norm_backward_shared", "ropenorm", dtype_name(dt), shape};
          shared.bytes = bytes - m * n * es;
          fill_errors(verify::run_backward_case(cs, in), &shared);
          const Launch shared_launch = [&](cudaStream_t st) {
            return add_rms_norm_backward(dy, ds, x, w, rstd, dx, TensorRef(), dw, ws, bp, st);
          };
          if (o.timing) ROPENORM_TRY(time_launch(o, graph, shared_launch, &shared));
          print_row(log, shared);
          rows->push_back(shared);
          continue;
        }

        // Forward + backward together: the backward reads the forward kernel's rstd.
        RmsNormParams fp;
        fp.eps = c.params.eps;
        const Launch ours_total = [&](cudaStream_t st) {
          ROPENORM_TRY(rms_norm(x, w, y, rstd, fp, st));
          return rms_norm_backward(dy, x, w, rstd, dx, dw, ws, bp, st);
        };
        const Launch base_total = [&](cudaStream_t st) {
          ROPENORM_TRY(baseline_rms_norm(fv, dt, m, n, eps, st));
          return baseline_rms_norm_backward(bv, dt, m, n, st);
        };
        // Forward reads x, w and writes y, rstd; the backward as above.
        const int64_t total_bytes = bytes + 2 * m * n * es + n * es + m * 4;
        ResultRow ours_fb{"rms_norm_fwd_bwd", "ropenorm", dtype_name(dt), shape};
        ours_fb.bytes = total_bytes;
        b.dx.poison();
        b.dw.poison();
        ROPENORM_TRY(ours_total(nullptr));
        ROPENORM_TRY(verify::sync_device());
        RmsNormBackwardCase ce = c;
        ce.give_rstd = false;  // end to end: the oracle's own r
        fill_errors(check_device(ce, in, b.dx, nullptr, b.dw), &ours_fb);
        ResultRow base_fb{"rms_norm_fwd_bwd", "unfused", dtype_name(dt), shape};
        base_fb.bytes = total_bytes;
        fill_errors(bo, &base_fb);
        if (o.timing) {
          ROPENORM_TRY(time_launch(o, graph, ours_total, &ours_fb));
          ROPENORM_TRY(time_launch(o, graph, base_total, &base_fb));
        }
        print_row(log, ours_fb);
        print_row(log, base_fb);
        rows->push_back(ours_fb);
        rows->push_back(base_fb);
      }
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
