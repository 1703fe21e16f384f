// RMSNorm rows of the main job (see bench_rms_norm.h).
#include "bench_rms_norm.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "baseline_rms_norm.h"
#include "bench_common.h"
#include "bench_timing.h"
#include "core/checks.h"
#include "ropenorm/rms_norm.h"
#include "verify/device_buffer.h"
#include "verify/rms_norm_case.h"

namespace ropenorm::bench {

namespace {

using verify::DeviceBuffer;
using verify::RmsNormCase;

struct ShapeBuffers {
  DeviceBuffer x, r, w, y, s, tmp, rstd;
};

ShapeBuffers upload(const verify::RmsNormInputs& in, int64_t m, bool fused) {
  ShapeBuffers b;
  b.x = verify::to_device(in.x);
  b.w = verify::to_device(in.weight);
  if (fused) {
    b.r = verify::to_device(in.residual);
    b.s = DeviceBuffer(in.residual.bytes.size());
  }
  b.y = DeviceBuffer(in.x.bytes.size());
  b.tmp = DeviceBuffer(in.x.bytes.size());
  b.rstd = DeviceBuffer(static_cast<size_t>(m) * 4);
  return b;
}

BaselineBuffers baseline_view(const ShapeBuffers& b, bool fused) {
  return BaselineBuffers{b.x.get(),
                         fused ? b.r.get() : nullptr,
                         b.w.get(),
                         b.y.get(),
                         fused ? b.s.get() : nullptr,
                         b.tmp.get(),
                         static_cast<float*>(b.rstd.get())};
}

void fill_errors(const verify::RmsNormOutcome& out, ResultRow* row) {
  row->max_err_ulp = out.y.max_ulp;
  row->tol_ulp = out.tol_y;
  row->frac_exact = out.y.frac_exact();
  row->passed = out.passed;
  if (!out.passed) row->note = out.summary;
}

/// Width of the log's op column: the longest op name (add_rms_norm_backward_shared).
constexpr int kOpWidth = 28;

}  // namespace

void print_header(std::ostream& os) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-*s %-9s %-5s %-28s %-10s %10s %9s %7s %8s %8s %8s %s\n",
                kOpWidth, "op", "impl", "dtype", "shape", "timing", "median_us", "GB/s", "%copy",
                "floor_us", "err_ulp", "exact%", "check");
  os << buf;
}

void print_row(std::ostream& os, const ResultRow& r) {
  std::string shape;
  for (const auto& kv : r.shape)
    shape += (shape.empty() ? "" : " ") + kv.first + "=" + std::to_string(kv.second);
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%-*s %-9s %-5s %-28s %-10s %10.2f %9.1f %7.1f %8.2f %8.2f %8.3f %s\n", kOpWidth,
                r.op.c_str(), r.impl.c_str(), r.dtype.c_str(), shape.c_str(), r.timing.c_str(),
                r.median_us, r.gbps, r.pct_of_copy, r.copy_floor_us, r.max_err_ulp,
                100.0 * r.frac_exact, r.passed ? "PASS" : "FAIL");
  os << buf;
  os.flush();
}

Status bench_rms_norm(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log) {
  const DType dt = DType::kBFloat16;
  uint64_t seed = 2026;
  for (bool fused : {false, true}) {
    for (int64_t n : o.ns) {
      for (int64_t m : o.ms) {
        RmsNormCase c;
        c.m = m;
        c.n = n;
        c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = dt;
        c.fused = fused;
        c.save_rstd = false;
        c.seed = seed++;
        const auto in = verify::make_inputs(c);
        const int64_t elem = static_cast<int64_t>(dtype_size(dt));
        const int64_t bytes = m * n * elem * (fused ? 4 : 2) + n * elem;
        const char* op = fused ? "add_rms_norm" : "rms_norm";

        // ropenorm: verified through the public API on poisoned outputs.
        ResultRow ours{op, "ropenorm", dtype_name(dt), {{"M", m}, {"N", n}}};
        ours.bytes = bytes;
        fill_errors(verify::run_case(c, in), &ours);

        // The unfused baseline, verified on the same inputs (it rounds like hf_llama).
        ShapeBuffers b = upload(in, m, fused);
        b.y.poison();
        if (fused) b.s.poison();
        ROPENORM_TRY(baseline_rms_norm(baseline_view(b, fused), dt, m, n, c.params.eps, nullptr));
        ROPENORM_TRY(verify::sync_device());
        RmsNormCase cb = c;
        cb.params.rounding = Rounding::kHfLlama;
        verify::RmsNormOutcome bo;
        bo.y_out = verify::from_device(b.y, dt, m * n);
        if (fused) bo.residual_out_host = verify::from_device(b.s, dt, m * n);
        verify::check_outputs(cb, in, &bo);
        ResultRow base{op, "unfused", dtype_name(dt), {{"M", m}, {"N", n}}};
        base.bytes = bytes;
        fill_errors(bo, &base);

        if (o.timing) {
          const Device d = Device::cuda(0);
          const TensorRef x = TensorRef::contiguous(b.x.get(), dt, {m, n}, d);
          const TensorRef w = TensorRef::contiguous(b.w.get(), dt, {n}, d);
          const TensorRef y = TensorRef::contiguous(b.y.get(), dt, {m, n}, d);
          const TensorRef r = fused ? TensorRef::contiguous(b.r.get(), dt, {m, n}, d) : TensorRef();
          const TensorRef s = fused ? TensorRef::contiguous(b.s.get(), dt, {m, n}, d) : TensorRef();
          const RmsNormParams p = c.params;
          const Launch ours_launch = [&](cudaStream_t st) {
            return fused ? add_rms_norm(x, r, w, y, s, TensorRef(), p, st)
                         : rms_norm(x, w, y, TensorRef(), p, st);
          };
          const BaselineBuffers bv = baseline_view(b, fused);
          const Launch base_launch = [&](cudaStream_t st) {
            return baseline_rms_norm(bv, dt, m, n, p.eps, st);
          };
          ROPENORM_TRY(time_launch(o, m <= o.graph_max_m, ours_launch, &ours));
          ROPENORM_TRY(time_launch(o, m <= o.graph_max_m, base_launch, &base));
        }
        print_row(log, ours);
        print_row(log, base);
        rows->push_back(ours);
        rows->push_back(base);
      }
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
