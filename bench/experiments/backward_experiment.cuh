// Helpers shared by the RMSNorm backward experiments (not part of the build): contiguous bf16
// row views, deterministic bf16 inputs, a status check that stops the program, the views of one
// backward shape (with the forward's rstd), and the row kernel's arguments for contiguous bf16
// rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/rms_norm_backward_plan.h"
#include "core/row_layout.h"
#include "cuda/rms_norm_backward/rms_norm_backward_args.h"
#include "experiment_timing.cuh"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

/// [m, n] contiguous rows of dtype dt on device 0.
inline ropenorm::TensorRef rows(void* p, ropenorm::DType dt, int64_t m, int64_t n) {
  return ropenorm::TensorRef::contiguous(p, dt, {m, n}, ropenorm::Device::cuda(0));
}

/// count bf16 values of either sign with magnitudes in about [0.25, 2), from seed.
inline void fill_bf16(void* p, size_t count, unsigned seed) {
  std::vector<uint16_t> h(count);
  unsigned s = seed;
  for (auto& v : h) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3c00 + ((s >> 9) & 0x7ff) - 0x400);
    if (s & 0x80000000u) v |= 0x8000;
  }
  CK(cudaMemcpy(p, h.data(), count * 2, cudaMemcpyHostToDevice));
}

/// Stops the program with the message of a failed status.
inline void check(const ropenorm::Status& st, const char* what) {
  if (!st.ok()) {
    std::printf("%s: %s\n", what, st.message().c_str());
    std::exit(1);
  }
}

/// Device buffers for backward shapes up to [max_m, max_n] (bf16 rows and weights, fp32 rstd and
/// workspace), x, dy, ds and w filled with fill_bf16 draws (seeds 1, 2, 3, 4); never freed.
struct BwdBuffers {
  void *x, *dy, *ds, *dx, *dres, *w, *dw, *rstd, *ws;
  size_t ws_bytes;
};
inline BwdBuffers alloc_bwd_buffers(int64_t max_m, int64_t max_n) {
  const size_t elems = static_cast<size_t>(max_m) * static_cast<size_t>(max_n);
  const size_t n = static_cast<size_t>(max_n);
  BwdBuffers b{};
  for (void** p : {&b.x, &b.dy, &b.ds, &b.dx, &b.dres}) CK(cudaMalloc(p, elems * 2));
  CK(cudaMalloc(&b.w, n * 2));
  CK(cudaMalloc(&b.dw, n * 2));
  CK(cudaMalloc(&b.rstd, static_cast<size_t>(max_m) * 4));
  b.ws_bytes = ropenorm::rms_norm_backward_workspace_size(max_m, max_n, -1);
  CK(cudaMalloc(&b.ws, b.ws_bytes));
  fill_bf16(b.x, elems, 1);
  fill_bf16(b.dy, elems, 2);
  fill_bf16(b.ds, elems, 3);
  fill_bf16(b.w, n, 4);
  return b;
}

/// Views of one backward shape [m, n] over an experiment's buffers: bf16 x and weight, fp32 rstd
/// (filled by the forward, whose y goes to dx) and workspace, bf16 dw.
struct BwdShape {
  ropenorm::TensorRef x, w, rstd, ws, dw;
};
inline BwdShape bwd_shape(void* x, void* w, void* rstd, void* dx, void* ws, size_t ws_bytes,
                          void* dw, int64_t m, int64_t n) {
  using ropenorm::Device;
  using ropenorm::DType;
  using ropenorm::TensorRef;
  BwdShape v;
  v.x = rows(x, DType::kBFloat16, m, n);
  v.w = TensorRef::contiguous(w, DType::kBFloat16, {n}, Device::cuda(0));
  v.rstd = TensorRef::contiguous(rstd, DType::kFloat32, {m}, Device::cuda(0));
  ropenorm::RmsNormParams fp;
  fp.eps = 1e-6f;
  check(ropenorm::rms_norm(v.x, v.w, rows(dx, DType::kBFloat16, m, n), v.rstd, fp), "rms_norm");
  v.ws = TensorRef::contiguous(ws, DType::kFloat32, {static_cast<int64_t>(ws_bytes / 4)},
                               Device::cuda(0));
  v.dw = TensorRef::contiguous(dw, DType::kBFloat16, {n}, Device::cuda(0));
  return v;
}

/// Kernel arguments of contiguous bf16 rows [m, n]: dy, x (s), ds (fused add, else null), bf16
/// weight, saved rstd, dx, dres (fused add, else null), dw partials; eps 1e-6, no weight offset.
inline ropenorm::cuda::RmsNormBwdKernelArgs bwd_args(void* dy, void* x, void* ds, void* w,
                                                     void* rstd, void* dx, void* dres, void* ws,
                                                     int64_t m, int64_t n) {
  using ropenorm::DType;
  ropenorm::cuda::RmsNormBwdKernelArgs a{};
  a.dy = dy;
  a.x = x;
  a.ds = ds;
  a.weight = w;
  a.rstd = static_cast<const float*>(rstd);
  a.dx = dx;
  a.dres = dres;
  a.partials = static_cast<float*>(ws);
  a.dy_rows = ropenorm::core::make_row_layout(rows(dy, DType::kBFloat16, m, n));
  a.x_rows = a.ds_rows = a.dx_rows = a.dres_rows = a.dy_rows;
  a.m = m;
  a.n = n;
  a.lanes = ropenorm::core::bwd_table_lanes(n, 8);
  a.w_dtype = a.dx_dtype = a.dres_dtype = DType::kBFloat16;
  a.eps = 1e-6f;
  a.w_offset = 0.0f;
  return a;
}
