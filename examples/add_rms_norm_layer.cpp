// The residual add + RMSNorm in front of a transformer sublayer, in bf16, forward and backward,
// as a training step runs it:
//   - add_rms_norm adds the sublayer input x to the residual stream in place (s = x + residual,
//     rounded once to bf16) and normalises s, saving r for the backward, in one launch;
//   - add_rms_norm_backward takes dy (from the sublayer) and ds (arriving through the residual
//     stream) and writes one gradient, dx, which is the gradient of both x and the residual
//     (they share a dtype), and dw, reduced in a fixed order through a workspace the caller sizes
//     with rms_norm_backward_workspace_size.
//
// It checks what it shows against float64 evaluations of the header's formulas, every output
// poisoned before the call that writes it: s bit for bit (the fp32 sum rounded once to bf16), the
// saved r to fp32's error, y and dx to their bf16 rounding, dw to its rounding plus fp32's
// summation bound, and dw bitwise over two backward runs. Exits 77 (CTest: skipped) when no CUDA
// device is usable.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "example_support.h"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"

namespace {

using example::DeviceBuffer;
using example::ok;
using ropenorm::Device;
using ropenorm::DType;
using ropenorm::TensorRef;

constexpr int64_t M = 37, N = 2048;  // tokens, hidden size

/// bf16 bits of v rounded to float, then to bf16 (nearest even each time; finite values): for the
/// exact sum of two bf16 values, the fp32 sum rounded once to bf16, as the kernel forms s.
uint16_t to_bf16(double v) {
  const float f = static_cast<float>(v);
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

double from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// got is ref rounded once to bf16, up to fp32's error: |got - ref| within 2^-8 |ref| (one
/// rounding to nearest, at most half a bf16 ulp), 2^-18 |ref| (fp32 arithmetic) and `floor`
/// (fp32's absolute error, which matters near zero). False for a NaN.
bool near(double got, double ref, double floor) {
  return std::fabs(got - ref) <=
         (std::ldexp(1.0, -8) + std::ldexp(1.0, -18)) * std::fabs(ref) + floor;
}

/// The inputs, as bf16 bits.
struct Inputs {
  const std::vector<uint16_t>& x;
  const std::vector<uint16_t>& res;
  const std::vector<uint16_t>& w;
  const std::vector<uint16_t>& dy;
  const std::vector<uint16_t>& ds;
};

/// The results against float64 evaluations of the header's formulas, row by row; prints a
/// summary and returns whether everything is within its bound.
bool check(const Inputs& in, const std::vector<uint16_t>& s, const std::vector<uint16_t>& y,
           const std::vector<float>& rstd, const std::vector<uint16_t>& dx,
           const std::vector<uint16_t> (&dw_runs)[2], float eps) {
  const auto& x = in.x;
  const auto& res = in.res;
  const auto& w = in.w;
  const auto& dy = in.dy;
  const auto& ds = in.ds;
  int64_t s_bad = 0, r_bad = 0, y_bad = 0, dx_bad = 0, dw_bad = 0;
  std::vector<double> dw_sum(N, 0.0), dw_abs(N, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> sv(N);
    double ss = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = m * N + n;
      // s = bf16(fp32(x + residual)): the header's rounding, so bit for bit.
      if (s[i] != to_bf16(from_bf16(x[i]) + from_bf16(res[i]))) ++s_bad;
      sv[n] = from_bf16(s[i]);
      ss += sv[n] * sv[n];
    }
    const double r = 1.0 / std::sqrt(ss / N + eps);
    if (!(std::fabs(rstd[m] - r) <= std::ldexp(r, -18))) ++r_bad;  // fp32: a few ulps
    double mean = 0.0;  // mean over n of g * xh, g = dy * w, xh = s * r
    for (int64_t n = 0; n < N; ++n) mean += from_bf16(dy[m * N + n]) * from_bf16(w[n]) * sv[n] * r;
    mean /= N;
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = m * N + n;
      const double xh = sv[n] * r, g = from_bf16(dy[i]) * from_bf16(w[n]);
      if (!near(from_bf16(y[i]), xh * from_bf16(w[n]), 1e-6)) ++y_bad;
      if (!near(from_bf16(dx[i]), r * (g - xh * mean) + from_bf16(ds[i]), 1e-5)) ++dx_bad;
      dw_sum[n] += from_bf16(dy[i]) * xh;
      dw_abs[n] += std::fabs(from_bf16(dy[i]) * xh);
    }
  }
  // dw: an fp32 sum of M terms rounded to bf16; the sum within (M + 32) fp32 ulps of sum |terms|
  // (the summation bound, and each term's few ulps from r and the products).
  for (int64_t n = 0; n < N; ++n) {
    if (!near(from_bf16(dw_runs[1][n]), dw_sum[n], (M + 32) * std::ldexp(dw_abs[n], -24))) {
      ++dw_bad;
    }
  }
  const bool deterministic = dw_runs[0] == dw_runs[1];
  std::printf("add_rms_norm: M=%lld N=%lld bf16; elements off: s %lld (bitwise), r %lld, y %lld\n",
              static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(s_bad),
              static_cast<long long>(r_bad), static_cast<long long>(y_bad));
  std::printf(
      "add_rms_norm_backward: elements off: dx %lld, dw %lld; dw bitwise equal over two "
      "runs: %s\n",
      static_cast<long long>(dx_bad), static_cast<long long>(dw_bad), deterministic ? "yes" : "NO");
  const bool passed = s_bad + r_bad + y_bad + dx_bad + dw_bad == 0 && deterministic;
  std::printf("%s\n", passed ? "passed" : "FAILED");
  return passed;
}

}  // namespace

int main() {
  if (!example::device_usable()) return example::kSkipped;
  const Device dev = Device::cuda(0);
  const size_t rows = M * N, b = sizeof(uint16_t);

  // bf16 host data: the sublayer input, the residual stream, the weight and the two gradients.
  std::mt19937 gen(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<uint16_t> x(rows), res(rows), w(N), dy(rows), ds(rows);
  for (auto* v : {&x, &res, &dy, &ds}) {
    for (uint16_t& e : *v) e = to_bf16(static_cast<float>(normal(gen)));
  }
  for (uint16_t& e : w) e = to_bf16(static_cast<float>(1.0 + 0.1 * normal(gen)));

  DeviceBuffer d_x(rows * b), d_res(rows * b), d_w(N * b), d_y(rows * b), d_rstd(M * 4),
      d_dy(rows * b), d_ds(rows * b), d_dx(rows * b), d_dw(N * b);
  for (const DeviceBuffer* p : {&d_x, &d_res, &d_w, &d_y, &d_rstd, &d_dy, &d_ds, &d_dx, &d_dw}) {
    if (!ok(p->error, "cudaMalloc")) return 1;
  }
  cudaError_t err = d_x.upload(x);
  if (err == cudaSuccess) err = d_res.upload(res);
  if (err == cudaSuccess) err = d_w.upload(w);
  if (err == cudaSuccess) err = d_dy.upload(dy);
  if (err == cudaSuccess) err = d_ds.upload(ds);
  if (!ok(err, "copying the inputs")) return 1;

  const auto bf16 = [&](const DeviceBuffer& p, std::initializer_list<int64_t> sizes) {
    return TensorRef::contiguous(p.ptr, DType::kBFloat16, sizes, dev);
  };
  const TensorRef tx = bf16(d_x, {M, N}), tres = bf16(d_res, {M, N}), tw = bf16(d_w, {N}),
                  ty = bf16(d_y, {M, N}), tdy = bf16(d_dy, {M, N}), tds = bf16(d_ds, {M, N}),
                  tdx = bf16(d_dx, {M, N}), tdw = bf16(d_dw, {N});
  const TensorRef trstd = TensorRef::contiguous(d_rstd.ptr, DType::kFloat32, {M}, dev);

  // Every output is poisoned (NaN) before the call that writes it: an element left unwritten
  // fails the checks below.
  if (!ok(d_y.poison(), "cudaMemset") || !ok(d_rstd.poison(), "cudaMemset")) return 1;

  // Forward: residual <- s = x + residual (in place), y = rms_norm(s), r saved.
  ropenorm::RmsNormParams p;
  p.eps = 1e-5f;
  if (!ok(ropenorm::add_rms_norm(tx, tres, tw, ty, /*residual_out=*/tres, trstd, p),
          "add_rms_norm")) {
    return 1;
  }

  // Backward: one gradient for x and the residual (dresidual absent), dw through the workspace.
  const size_t ws_bytes = ropenorm::rms_norm_backward_workspace_size(M, N);
  DeviceBuffer d_ws(ws_bytes);
  if (!ok(d_ws.error, "allocating the workspace")) return 1;
  const TensorRef ws =
      TensorRef::contiguous(d_ws.ptr, DType::kFloat32, {static_cast<int64_t>(ws_bytes / 4)}, dev);
  ropenorm::RmsNormBackwardParams bp;
  bp.eps = p.eps;
  std::vector<uint16_t> dw_runs[2];
  for (std::vector<uint16_t>& dw : dw_runs) {
    if (!ok(d_dx.poison(), "cudaMemset") || !ok(d_dw.poison(), "cudaMemset")) return 1;
    if (!ok(ropenorm::add_rms_norm_backward(tdy, tds, /*s=*/tres, tw, trstd, tdx,
                                            /*dresidual=*/TensorRef(), tdw, ws, bp),
            "add_rms_norm_backward")) {
      return 1;
    }
    if (!ok(d_dw.download(&dw), "reading dw")) return 1;
  }
  std::vector<uint16_t> s, y, dx;
  std::vector<float> rstd;
  err = d_res.download(&s);
  if (err == cudaSuccess) err = d_rstd.download(&rstd);
  if (err == cudaSuccess) err = d_y.download(&y);
  if (err == cudaSuccess) err = d_dx.download(&dx);
  if (!ok(err, "reading the results")) return 1;

  std::printf("workspace: %zu bytes\n", ws_bytes);
  return check({x, res, w, dy, ds}, s, y, rstd, dx, dw_runs, p.eps) ? 0 : 1;
}
