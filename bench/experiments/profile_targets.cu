// Profile targets (H200): the kernels whose share of the copy bandwidth is furthest from their
// goal, each at its goal shape through the public API, so that a profiler can take one launch of
// one kernel (`ncu -k regex:KERNEL -s 2 -c 1 ./profile_targets TARGET`): the program runs the
// target's call 3 times (the first two warm the caches' state and the launch path, the third is
// the one to profile), then prints its cold-L2 median over 15 more calls.
//   qk_fwd        qk_norm_rope, bf16, T = 65536, Hq 32, Hk 8, D 128, neox, f32 cache, rstd saved
//   qk_bwd        qk_norm_rope_backward, the same heads, T = 32768, saved rstd, dwq and dwk
//   rope_fwd      rope, bf16, T = 65536, the same heads, f32 cache, out of place
//   rope_fwd_256  the same with D 256 (two head groups on the lean run)
//   rms_bwd_1024  rms_norm_backward, bf16, M = 32768, N = 1024 (the warp-per-row ring), saved rstd
//   rms_bwd_4096  rms_norm_backward, bf16, M = 4096, N = 4096 (the block ring, few rows per block)
//   rms_bwd_32768 rms_norm_backward, bf16, M = 32768, N = 4096 (the block ring, many rows)
//   rms_bwd_32768x4095  the same at N = 4095 (rows of varying phase: partials in a shared table)
//   rms_bwd_1x1024  rms_norm_backward, bf16, M = 1, N = 1024 (one warp; 7.99 us in a graph at
//                 d0d8d65, slower than N = 4096's 6.18 and than the unfused baseline's 7.30)
//   rms_fwd_4096  rms_norm, bf16, M = 4096, N = 4096, rstd saved
//   rms_fwd_1x4096, rms_fwd_512x8192  rms_norm, bf16, the decode rows M = 1 N = 4096 and
//                 M = 512 N = 8192, no rstd (as the main job's rows; the main job replays them in
//                 CUDA graphs, where their data stays in L2: profile with --cache-control none)
// Positions are random in [0, T) (int64); inputs as fill_bf16 draws them. Buffers live until exit.
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/profile_targets.cu build/libropenorm.a -o profile_targets
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backward_experiment.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"
#include "ropenorm/rope.h"

namespace {

using namespace ropenorm;

constexpr int64_t kHq = 32, kHk = 8, kD = 128;

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  return p;
}

TensorRef heads(void* p, int64_t t, int64_t h, int64_t d = kD) {
  return TensorRef::contiguous(p, DType::kBFloat16, {t, h, d}, Device::cuda(0));
}

TensorRef vec(void* p, DType dt, int64_t n) {
  return TensorRef::contiguous(p, dt, {n}, Device::cuda(0));
}

/// The rope inputs of T tokens: int64 positions in [0, T) and an f32 cache [T, d] (cos, sin).
struct RopeInputs {
  RopePositions pos;
  RopeCosSin cs;
  explicit RopeInputs(int64_t t, int64_t d = kD) {
    std::vector<int64_t> p(static_cast<size_t>(t));
    uint64_t s = 12345;
    for (auto& v : p) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(t));
    }
    void* dp = device_alloc(p.size() * 8);
    CK(cudaMemcpy(dp, p.data(), p.size() * 8, cudaMemcpyHostToDevice));
    std::vector<float> c(static_cast<size_t>(t * d));
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const double ang = static_cast<double>(r) * std::pow(10000.0, -2.0 * i / d);
        c[r * d + i] = static_cast<float>(std::cos(ang));
        c[r * d + d / 2 + i] = static_cast<float>(std::sin(ang));
      }
    }
    void* dc = device_alloc(c.size() * 4);
    CK(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
    pos.positions = vec(dp, DType::kInt64, t);
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(dc, DType::kFloat32, {t, d}, Device::cuda(0));
  }
};

/// QK-norm + RoPE buffers of T tokens (inputs, outputs, weights, rstd, gradients, workspace).
struct QkBuffers {
  int64_t t;
  void *q, *k, *qo, *ko, *wq, *wk, *rq, *rk, *dwq, *dwk, *ws;
  size_t ws_bytes;
  explicit QkBuffers(int64_t tokens) : t(tokens) {
    const size_t qn = static_cast<size_t>(t * kHq * kD), kn = static_cast<size_t>(t * kHk * kD);
    q = device_alloc(qn * 2);
    k = device_alloc(kn * 2);
    qo = device_alloc(qn * 2);
    ko = device_alloc(kn * 2);
    wq = device_alloc(kD * 2);
    wk = device_alloc(kD * 2);
    rq = device_alloc(static_cast<size_t>(t * kHq) * 4);
    rk = device_alloc(static_cast<size_t>(t * kHk) * 4);
    dwq = device_alloc(kD * 2);
    dwk = device_alloc(kD * 2);
    ws_bytes = qk_norm_rope_backward_workspace_size(t, kHq, kHk, kD, 0);
    ws = device_alloc(ws_bytes);
    fill_bf16(q, qn, 1);
    fill_bf16(k, kn, 2);
    fill_bf16(qo, qn, 3);
    fill_bf16(ko, kn, 4);
    fill_bf16(wq, kD, 5);
    fill_bf16(wk, kD, 6);
  }
  TensorRef rstd_q() const {
    return TensorRef::contiguous(rq, DType::kFloat32, {t, kHq}, Device::cuda(0));
  }
  TensorRef rstd_k() const {
    return TensorRef::contiguous(rk, DType::kFloat32, {t, kHk}, Device::cuda(0));
  }
};

/// Runs the named target: 3 calls, then the cold-L2 median of 15; false for an unknown name.
bool run_target(const std::string& name) {
  std::function<void()> call;
  const RmsNormParams fp{};
  RmsNormBackwardParams bp;
  bp.eps = fp.eps;
  if (name == "qk_fwd" || name == "qk_bwd" || name == "rope_fwd") {
    const int64_t t = name == "qk_bwd" ? 32768 : 65536;
    auto* b = new QkBuffers(t);
    auto* r = new RopeInputs(t);
    const RopeParams rp{};
    const QkNormParams np{};
    const TensorRef q = heads(b->q, t, kHq), k = heads(b->k, t, kHk);
    const TensorRef qo = heads(b->qo, t, kHq), ko = heads(b->ko, t, kHk);
    const TensorRef wq = vec(b->wq, DType::kBFloat16, kD), wk = vec(b->wk, DType::kBFloat16, kD);
    check(qk_norm_rope(q, k, wq, wk, qo, ko, b->rstd_q(), b->rstd_k(), r->pos, r->cs, rp, np),
          "qk_norm_rope (rstd for the backward)");
    if (name == "qk_fwd") {
      call = [=] {
        check(qk_norm_rope(q, k, wq, wk, qo, ko, b->rstd_q(), b->rstd_k(), r->pos, r->cs, rp, np),
              "qk_norm_rope");
      };
    } else if (name == "rope_fwd") {
      call = [=] { check(rope(q, k, qo, ko, r->pos, r->cs, rp), "rope"); };
    } else {
      // dq', dk' in the output buffers; dq, dk written in place over them.
      const TensorRef wsr = vec(b->ws, DType::kFloat32, static_cast<int64_t>(b->ws_bytes / 4));
      call = [=] {
        check(qk_norm_rope_backward(qo, ko, q, k, wq, wk, b->rstd_q(), b->rstd_k(), qo, ko,
                                    vec(b->dwq, DType::kBFloat16, kD),
                                    vec(b->dwk, DType::kBFloat16, kD), wsr, r->pos, r->cs, rp, np),
              "qk_norm_rope_backward");
      };
    }
  } else if (name == "rope_fwd_256") {
    constexpr int64_t t = 65536, d = 256;
    const size_t qn = static_cast<size_t>(t * kHq * d), kn = static_cast<size_t>(t * kHk * d);
    void *q = device_alloc(qn * 2), *k = device_alloc(kn * 2);
    void *qo = device_alloc(qn * 2), *ko = device_alloc(kn * 2);
    fill_bf16(q, qn, 1);
    fill_bf16(k, kn, 2);
    const auto* r = new RopeInputs(t, d);
    const RopeParams rp{};
    call = [=] {
      check(rope(heads(q, t, kHq, d), heads(k, t, kHk, d), heads(qo, t, kHq, d),
                 heads(ko, t, kHk, d), r->pos, r->cs, rp),
            "rope D 256");
    };
  } else if (name == "rms_fwd_1x4096" || name == "rms_fwd_512x8192") {
    const int64_t m = name == "rms_fwd_1x4096" ? 1 : 512;
    const int64_t n = name == "rms_fwd_1x4096" ? 4096 : 8192;
    const size_t elems = static_cast<size_t>(m * n);
    void* x = device_alloc(elems * 2);
    void* y = device_alloc(elems * 2);
    void* w = device_alloc(static_cast<size_t>(n) * 2);
    fill_bf16(x, elems, 1);
    fill_bf16(w, static_cast<size_t>(n), 3);
    const TensorRef tx = rows(x, DType::kBFloat16, m, n), ty = rows(y, DType::kBFloat16, m, n);
    const TensorRef tw = vec(w, DType::kBFloat16, n);
    call = [=] { check(rms_norm(tx, tw, ty, TensorRef(), fp), "rms_norm"); };
  } else if (name == "rms_bwd_1024" || name == "rms_bwd_4096" || name == "rms_fwd_4096" ||
             name == "rms_bwd_1x1024" || name == "rms_bwd_32768" || name == "rms_bwd_32768x4095") {
    const int64_t m =
        name == "rms_bwd_1024" || name == "rms_bwd_32768" || name == "rms_bwd_32768x4095"
            ? 32768
            : (name == "rms_bwd_1x1024" ? 1 : 4096);
    const int64_t n = name == "rms_bwd_1024" || name == "rms_bwd_1x1024"
                          ? 1024
                          : (name == "rms_bwd_32768x4095" ? 4095 : 4096);
    const size_t elems = static_cast<size_t>(m * n);
    void* x = device_alloc(elems * 2);
    void* dy = device_alloc(elems * 2);
    void* dx = device_alloc(elems * 2);
    void* w = device_alloc(static_cast<size_t>(n) * 2);
    void* dw = device_alloc(static_cast<size_t>(n) * 2);
    void* rs = device_alloc(static_cast<size_t>(m) * 4);
    const size_t ws_bytes = rms_norm_backward_workspace_size(m, n, -1);
    void* ws = device_alloc(ws_bytes);
    fill_bf16(x, elems, 1);
    fill_bf16(dy, elems, 2);
    fill_bf16(w, static_cast<size_t>(n), 3);
    const TensorRef tx = rows(x, DType::kBFloat16, m, n), tdy = rows(dy, DType::kBFloat16, m, n);
    const TensorRef tdx = rows(dx, DType::kBFloat16, m, n);
    const TensorRef tw = vec(w, DType::kBFloat16, n), tdw = vec(dw, DType::kBFloat16, n);
    const TensorRef tr = vec(rs, DType::kFloat32, m);
    const TensorRef tws = vec(ws, DType::kFloat32, static_cast<int64_t>(ws_bytes / 4));
    check(rms_norm(tx, tw, tdx, tr, fp), "rms_norm (rstd for the backward)");
    if (name == "rms_fwd_4096") {
      call = [=] { check(rms_norm(tx, tw, tdx, tr, fp), "rms_norm"); };
    } else {
      call = [=] {
        check(rms_norm_backward(tdy, tx, tw, tr, tdx, tdw, tws, bp), "rms_norm_backward");
      };
    }
  } else {
    return false;
  }
  for (int i = 0; i < 3; ++i) call();
  CK(cudaDeviceSynchronize());
  std::printf("%-14s cold-L2 median %8.2f us\n", name.c_str(), time_med(call, true, 15));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf(
        "usage: %s TARGET...  (qk_fwd qk_bwd rope_fwd rope_fwd_256 rms_bwd_1024 rms_bwd_4096 "
        "rms_bwd_32768 rms_bwd_32768x4095 rms_bwd_1x1024 rms_fwd_4096 rms_fwd_1x4096 "
        "rms_fwd_512x8192)\n",
        argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    if (!run_target(argv[i])) {
      std::printf("unknown target %s\n", argv[i]);
      return 2;
    }
  }
  return 0;
}
