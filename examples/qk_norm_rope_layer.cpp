// The attention prologue of a Qwen3-style layer with ropenorm, forward and backward, as a
// training step runs it:
//   - q and k are views of the packed QKV projection output [T, (Hq + 2 Hk) * D] (no copies);
//   - qk_norm_rope normalises every head vector with its own r, rotates it and writes the rotated
//     q and k for attention, saving r for the backward, in one launch;
//   - qk_norm_rope_backward takes the gradients arriving from attention and writes dq and dk
//     straight into the packed gradient of QKV, with dwq and dwk reduced in a fixed order through
//     a workspace the caller sizes with qk_norm_rope_backward_workspace_size (no allocation
//     inside the library).
// Float32 data keeps the host side short; bf16 and f16 tensors are passed the same way.
//
// It checks what it shows: both passes against a float64 evaluation of the headers' formulas
// (from the same cos/sin table), every output poisoned before the call that writes it, the packed
// gradient's v third left alone, and dwq / dwk bitwise equal over two backward runs. Exits 77
// (CTest: skipped) when no CUDA device is usable.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "example_support.h"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "ropenorm/rope_cache.h"

namespace {

using example::DeviceBuffer;
using example::ok;
using ropenorm::Device;
using ropenorm::DType;
using ropenorm::TensorRef;

constexpr int64_t T = 64, Hq = 8, Hk = 2, D = 128, P = 4096;  // P: cos/sin table rows
constexpr int64_t kRow = (Hq + 2 * Hk) * D;                   // one token of packed QKV

/// One head vector in float64, from the formulas in qk_norm_rope.h and qk_norm_rope_backward.h
/// (NeoX pairs over all D channels, R = D, as this program calls it; the table's cos / sin at the
/// token's position; weight factor w + o): the forward's output, and for the gradient g_out of
/// that output, the head's dx and its terms of dw.
struct HeadReference {
  std::vector<double> out, dx, dw_terms;
};

HeadReference reference_head(const float* x, const float* w, float o, const float* table_row,
                             float eps, const float* g_out) {
  double ss = 0.0;
  for (int64_t d = 0; d < D; ++d) ss += double(x[d]) * x[d];
  const double r = 1.0 / std::sqrt(ss / D + eps);
  std::vector<double> xh(D), n(D), g_n(D);
  for (int64_t d = 0; d < D; ++d) {
    xh[d] = x[d] * r;
    n[d] = xh[d] * (w[d] + o);
  }
  HeadReference ref{std::vector<double>(D), std::vector<double>(D), std::vector<double>(D)};
  const int64_t h = D / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double c = table_row[i], s = table_row[h + i];
    ref.out[i] = n[i] * c - n[h + i] * s;  // the rotation
    ref.out[h + i] = n[h + i] * c + n[i] * s;
    g_n[i] = g_out[i] * c + g_out[h + i] * s;  // its transpose (sin negated)
    g_n[h + i] = -g_out[i] * s + g_out[h + i] * c;
  }
  double mean = 0.0;  // mean over d of g * xh, with g = g_n * w
  for (int64_t d = 0; d < D; ++d) mean += g_n[d] * (w[d] + o) * xh[d] / D;
  for (int64_t d = 0; d < D; ++d) {
    ref.dx[d] = r * (g_n[d] * (w[d] + o) - xh[d] * mean);
    ref.dw_terms[d] = g_n[d] * xh[d];
  }
  return ref;
}

/// *worst = the larger of the two errors; a NaN (an element never written) stays.
void keep_worst(double e, double* worst) {
  if (!std::isnan(*worst) && (std::isnan(e) || e > *worst)) *worst = e;
}

/// Keeps the largest |got - ref| / (1 + |ref|).
void track(double got, double ref, double* worst) {
  keep_worst(std::fabs(got - ref) / (1.0 + std::fabs(ref)), worst);
}

}  // namespace

int main() {
  if (!example::device_usable()) return example::kSkipped;
  const Device dev = Device::cuda(0);

  // The host side: inputs, weights, positions and the cos/sin table of Qwen3's rope parameters.
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qkv(T * kRow), wq(D), wk(D), grad_q(T * Hq * D), grad_k(T * Hk * D);
  for (auto* v : {&qkv, &wq, &wk, &grad_q, &grad_k}) {
    for (float& x : *v) x = normal(gen);
  }
  std::vector<int64_t> positions(T);
  for (int64_t t = 0; t < T; ++t) positions[t] = 1000 + 3 * t;  // any positions in [0, P)
  ropenorm::RopeConfig cfg;
  cfg.theta = 1000000.0;
  cfg.rotary_dim = D;
  std::vector<float> table(P * D);
  if (!ok(ropenorm::build_rope_cache(cfg, P, DType::kFloat32, table.data()), "build_rope_cache")) {
    return 1;
  }

  // Device buffers: packed QKV and its gradient, the rotated q and k, r per head, the weights
  // and their gradients, the table and the positions.
  const size_t f = sizeof(float);
  DeviceBuffer d_qkv(qkv.size() * f), d_dqkv(qkv.size() * f), d_qrot(grad_q.size() * f),
      d_krot(grad_k.size() * f), d_gq(grad_q.size() * f), d_gk(grad_k.size() * f), d_qr(T * Hq * f),
      d_kr(T * Hk * f), d_wq(D * f), d_wk(D * f), d_dwq(D * f), d_dwk(D * f),
      d_table(table.size() * f), d_pos(T * sizeof(int64_t));
  for (const DeviceBuffer* b : {&d_qkv, &d_dqkv, &d_qrot, &d_krot, &d_gq, &d_gk, &d_qr, &d_kr,
                                &d_wq, &d_wk, &d_dwq, &d_dwk, &d_table, &d_pos}) {
    if (!ok(b->error, "cudaMalloc")) return 1;
  }
  cudaError_t err = d_qkv.upload(qkv);
  if (err == cudaSuccess) err = d_wq.upload(wq);
  if (err == cudaSuccess) err = d_wk.upload(wk);
  if (err == cudaSuccess) err = d_gq.upload(grad_q);
  if (err == cudaSuccess) err = d_gk.upload(grad_k);
  if (err == cudaSuccess) err = d_table.upload(table);
  if (err == cudaSuccess) err = d_pos.upload(positions);
  if (!ok(err, "copying the inputs")) return 1;

  // q and k as views of the packed buffer: [T, H, D] with a token stride of one packed row.
  const TensorRef q(d_qkv.as<float>(), DType::kFloat32, {T, Hq, D}, {kRow, D, 1}, dev);
  const TensorRef k(d_qkv.as<float>() + Hq * D, DType::kFloat32, {T, Hk, D}, {kRow, D, 1}, dev);
  const TensorRef q_rot = TensorRef::contiguous(d_qrot.ptr, DType::kFloat32, {T, Hq, D}, dev);
  const TensorRef k_rot = TensorRef::contiguous(d_krot.ptr, DType::kFloat32, {T, Hk, D}, dev);
  const TensorRef q_rstd = TensorRef::contiguous(d_qr.ptr, DType::kFloat32, {T, Hq}, dev);
  const TensorRef k_rstd = TensorRef::contiguous(d_kr.ptr, DType::kFloat32, {T, Hk}, dev);
  const TensorRef w_q = TensorRef::contiguous(d_wq.ptr, DType::kFloat32, {D}, dev);
  const TensorRef w_k = TensorRef::contiguous(d_wk.ptr, DType::kFloat32, {D}, dev);

  ropenorm::RopePositions pos;
  pos.positions = TensorRef::contiguous(d_pos.ptr, DType::kInt64, {T}, dev);
  ropenorm::RopeCosSin cos_sin;
  cos_sin.kind = ropenorm::CosSinKind::kCache;
  cos_sin.cache = TensorRef::contiguous(d_table.ptr, DType::kFloat32, {P, D}, dev);
  ropenorm::RopeParams rope_params;  // NeoX pairs (rotate_half), full rotary_dim
  ropenorm::QkNormParams norm_params;
  norm_params.eps = 1e-6f;

  // Every output is poisoned (NaN) before the call that writes it: an element left unwritten
  // fails the checks below.
  for (const DeviceBuffer* b : {&d_qrot, &d_krot, &d_qr, &d_kr}) {
    if (!ok(b->poison(), "cudaMemset")) return 1;
  }

  // Forward, out of place (the backward reads the forward's inputs), r saved.
  if (!ok(ropenorm::qk_norm_rope(q, k, w_q, w_k, q_rot, k_rot, q_rstd, k_rstd, pos, cos_sin,
                                 rope_params, norm_params),
          "qk_norm_rope")) {
    return 1;
  }

  // Backward: dq and dk land in the packed gradient of QKV. Its v third is not written here: it
  // is poisoned with the rest before each run, and checked untouched below.
  const TensorRef dq_out = TensorRef::contiguous(d_gq.ptr, DType::kFloat32, {T, Hq, D}, dev);
  const TensorRef dk_out = TensorRef::contiguous(d_gk.ptr, DType::kFloat32, {T, Hk, D}, dev);
  const TensorRef dq(d_dqkv.as<float>(), DType::kFloat32, {T, Hq, D}, {kRow, D, 1}, dev);
  const TensorRef dk(d_dqkv.as<float>() + Hq * D, DType::kFloat32, {T, Hk, D}, {kRow, D, 1}, dev);
  const TensorRef dwq = TensorRef::contiguous(d_dwq.ptr, DType::kFloat32, {D}, dev);
  const TensorRef dwk = TensorRef::contiguous(d_dwk.ptr, DType::kFloat32, {D}, dev);
  const size_t ws_bytes = ropenorm::qk_norm_rope_backward_workspace_size(T, Hq, Hk, D);
  DeviceBuffer d_ws(ws_bytes);
  if (!ok(d_ws.error, "allocating the workspace")) return 1;
  const TensorRef workspace =
      TensorRef::contiguous(d_ws.ptr, DType::kFloat32, {static_cast<int64_t>(ws_bytes / f)}, dev);
  std::vector<float> dw_runs[2][2];  // [run][dwq, dwk]
  for (auto& dw : dw_runs) {
    for (const DeviceBuffer* b : {&d_dqkv, &d_dwq, &d_dwk}) {
      if (!ok(b->poison(), "cudaMemset")) return 1;
    }
    if (!ok(ropenorm::qk_norm_rope_backward(dq_out, dk_out, q, k, w_q, w_k, q_rstd, k_rstd, dq, dk,
                                            dwq, dwk, workspace, pos, cos_sin, rope_params,
                                            norm_params),
            "qk_norm_rope_backward")) {
      return 1;
    }
    err = d_dwq.download(&dw[0]);
    if (err == cudaSuccess) err = d_dwk.download(&dw[1]);
    if (!ok(err, "reading dwq / dwk")) return 1;
  }

  // Everything against float64, head by head: q' and k', dq and dk in the packed gradient, the
  // sums of dwq and dwk, and the v third of the packed gradient still NaN.
  std::vector<float> q_out, k_out, dqkv;
  err = d_qrot.download(&q_out);
  if (err == cudaSuccess) err = d_krot.download(&k_out);
  if (err == cudaSuccess) err = d_dqkv.download(&dqkv);
  if (!ok(err, "reading the results")) return 1;
  double worst_fwd = 0.0, worst_dx = 0.0, worst_dw = 0.0;
  std::vector<double> dw_sum(2 * D, 0.0), dw_abs(2 * D, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hq + Hk; ++h) {
      const bool is_q = h < Hq;
      const int64_t head = is_q ? t * Hq + h : t * Hk + (h - Hq);
      const HeadReference ref = reference_head(
          qkv.data() + t * kRow + h * D, is_q ? wq.data() : wk.data(), norm_params.weight_offset,
          table.data() + positions[t] * D, norm_params.eps,
          is_q ? grad_q.data() + head * D : grad_k.data() + head * D);
      const float* out = is_q ? q_out.data() + head * D : k_out.data() + head * D;
      const float* dx = dqkv.data() + t * kRow + h * D;
      for (int64_t d = 0; d < D; ++d) {
        track(out[d], ref.out[d], &worst_fwd);
        track(dx[d], ref.dx[d], &worst_dx);
        dw_sum[(is_q ? 0 : D) + d] += ref.dw_terms[d];
        dw_abs[(is_q ? 0 : D) + d] += std::fabs(ref.dw_terms[d]);
      }
    }
  }
  // dwq and dwk: fp32 sums of T * H terms (H = Hq or Hk), each term within a few ulps (r, the
  // rotation, the products), so within (T * H + 16) ulps of 1 + sum |terms|.
  bool dw_ok = true;
  for (int64_t d = 0; d < 2 * D; ++d) {
    const double got = dw_runs[1][d < D ? 0 : 1][d % D];
    const double e = std::fabs(got - dw_sum[d]) / (1.0 + dw_abs[d]);
    const double terms = double(T * (d < D ? Hq : Hk));
    dw_ok = dw_ok && e <= (terms + 16.0) * std::ldexp(1.0, -24);  // false for a NaN
    keep_worst(e, &worst_dw);
  }
  bool v_untouched = true;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = (Hq + Hk) * D; j < kRow; ++j) {
      uint32_t bits = 0;
      std::memcpy(&bits, &dqkv[t * kRow + j], sizeof bits);
      v_untouched = v_untouched && bits == 0xFFFFFFFFu;
    }
  }
  // q', k', dq and dk: fp32 arithmetic, a few ulps of their values (1e-5 leaves room; a wrong or
  // missing element is off by about its own size).
  const bool forward_ok = worst_fwd <= 1e-5;
  const bool backward_ok = worst_dx <= 1e-5 && dw_ok && v_untouched;
  bool deterministic = true;  // bit for bit
  for (int i = 0; i < 2; ++i) {
    deterministic =
        deterministic && std::memcmp(dw_runs[0][i].data(), dw_runs[1][i].data(), D * f) == 0;
  }
  std::printf("qk_norm_rope: T=%lld Hq=%lld Hk=%lld D=%lld f32, worst error against float64 %.3g\n",
              static_cast<long long>(T), static_cast<long long>(Hq), static_cast<long long>(Hk),
              static_cast<long long>(D), worst_fwd);
  std::printf(
      "qk_norm_rope_backward: worst error of dq / dk %.3g, of dwq / dwk %.3g; v's gradient "
      "untouched: %s; dwq / dwk bitwise equal over two runs: %s; workspace %zu bytes\n",
      worst_dx, worst_dw, v_untouched ? "yes" : "NO", deterministic ? "yes" : "NO", ws_bytes);
  const bool passed = forward_ok && backward_ok && deterministic;
  std::printf("%s\n", passed ? "passed" : "FAILED");
  return passed ? 0 : 1;
}
