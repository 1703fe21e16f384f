// Memory ceilings by read / write mix (H200): how fast a plain streaming kernel moves the bytes of
// the RMSNorm forward (one row tensor read, one written) and backward (two read, one written)
// when the mix is the op's own, against the main job's floor (a cudaMemcpy of half the bytes),
// beside the library's public calls on the same shapes (bf16 rows [M, 4096], bf16 weight, saved
// rstd, bf16 dw). Cold L2, CUDA-event medians as the main job times its rows.
// Kernels: mix<R, W> reads R streams and writes W (0 or 1) of n 16-byte chunks each; thread i owns
// chunks i + j * stride of every stream, U of them in flight per step; the written chunk is the
// XOR of the chunks read (or the chunk index), so no arithmetic limits it. The fastest of several
// grids and depths is reported for each mix. At ea44bfc (traffic-mix-ea44bfc-nvidia-h200.log) no
// mix beat the memcpy at 32768 rows (two read, one written: 188.80 against 188.54 us; the backward
// 202.53), while reads alone ran at 4451 GB/s and writes alone at 4392.
// Row counts from the command line (1 .. 32768; default 4096 32768): 1280 rows of 4096 bf16 are
// the q and k bytes of the QK-norm + RoPE row at T = 1024 (32 + 8 heads of 128 channels; the row
// also reads 0.53 MB of cos/sin rows and positions).
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/traffic_mix.cu build/libropenorm.a -o traffic_mix
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backward_experiment.cuh"

namespace {

template <int R, int W, int U>
__global__ void mix(const uint4* __restrict__ a, const uint4* __restrict__ b, uint4* __restrict__ c,
                    size_t n, unsigned* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint4 keep = make_uint4(0, 0, 0, 0);
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + u * stride;
      v[u] = make_uint4(static_cast<unsigned>(k), 0, 0, 0);
      if (k < n) {
        if constexpr (R >= 1) v[u] = a[k];
        if constexpr (R >= 2) {
          const uint4 q = b[k];
          v[u].x ^= q.x;
          v[u].y ^= q.y;
          v[u].z ^= q.z;
          v[u].w ^= q.w;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + u * stride;
      if constexpr (W == 1) {
        if (k < n) c[k] = v[u];
      } else {
        keep.x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      }
    }
  }
  if (W == 0 && keep.x == 0x9e3779b9u) *sink = keep.x;
}

template <int R, int W>
float best_mix(const uint4* a, const uint4* b, uint4* c, size_t n, unsigned* sink, int sms,
               char* how) {
  float best = 1e30f;
  for (int per_sm : {1, 2, 4, 8}) {
    for (int threads : {256, 512, 1024}) {
      if (per_sm * threads > 2048) continue;
      const int blocks = per_sm * sms;
      const float t[3] = {
          time_med([&] { mix<R, W, 1><<<blocks, threads>>>(a, b, c, n, sink); }, true, 21),
          time_med([&] { mix<R, W, 2><<<blocks, threads>>>(a, b, c, n, sink); }, true, 21),
          time_med([&] { mix<R, W, 4><<<blocks, threads>>>(a, b, c, n, sink); }, true, 21)};
      for (int u = 0; u < 3; ++u) {
        if (t[u] < best) {
          best = t[u];
          std::snprintf(how, 64, "%d x %d, %d in flight", blocks, threads, 1 << u);
        }
      }
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using ropenorm::DType;
  std::vector<int64_t> ms;  // row counts (default 4096 and 32768; at most 32768)
  for (int i = 1; i < argc; ++i) {
    const int64_t m = std::atoll(argv[i]);
    if (m < 1 || m > 32768) {
      std::printf("row counts are 1 .. 32768, not %s\n", argv[i]);
      return 2;
    }
    ms.push_back(m);
  }
  if (ms.empty()) ms = {4096, 32768};
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t n_cols = 4096, max_m = 32768;
  BwdBuffers b = alloc_bwd_buffers(max_m, n_cols);
  unsigned* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  void *copy_src = nullptr, *copy_dst = nullptr;  // the memcpy floors: 3 streams' half each
  const size_t copy_bytes = 3 * static_cast<size_t>(max_m * n_cols * 2) / 2;
  CK(cudaMalloc(&copy_src, copy_bytes));
  CK(cudaMalloc(&copy_dst, copy_bytes));
  CK(cudaMemset(copy_src, 0x3c, copy_bytes));
  std::printf("copy bandwidth (1 GiB memcpy) %.1f GB/s, %d SMs\n",
              copy_bandwidth_gbps(size_t{1} << 30), sms);
  std::printf("%-8s %-28s %10s %10s %9s  %s\n", "M", "what", "MB moved", "us", "GB/s", "launch");
  auto row = [&](int64_t m, const char* what, double bytes, float us, const char* how) {
    std::printf("%-8lld %-28s %10.2f %10.2f %9.0f  %s\n", static_cast<long long>(m), what,
                bytes / 1e6, us, bytes / us / 1e3, how);
  };
  for (int64_t m : ms) {
    const size_t stream_bytes = static_cast<size_t>(m * n_cols * 2), chunks = stream_bytes / 16;
    const auto* x = static_cast<const uint4*>(b.x);
    const auto* dy = static_cast<const uint4*>(b.dy);
    auto* dx = static_cast<uint4*>(b.dx);
    char how[64];
    for (int mult : {2, 3}) {
      const size_t half = mult * stream_bytes / 2;
      const float mc = time_med(
          [&] { cudaMemcpyAsync(copy_dst, copy_src, half, cudaMemcpyDeviceToDevice); }, true, 21);
      row(m, mult == 2 ? "memcpy of 2 streams' bytes" : "memcpy of 3 streams' bytes", 2.0 * half,
          mc, "cudaMemcpyAsync");
    }
    float t = best_mix<1, 1>(x, nullptr, dx, chunks, sink, sms, how);
    row(m, "read 1, write 1", 2.0 * stream_bytes, t, how);
    t = best_mix<2, 1>(x, dy, dx, chunks, sink, sms, how);
    row(m, "read 2, write 1", 3.0 * stream_bytes, t, how);
    t = best_mix<2, 0>(x, dy, nullptr, chunks, sink, sms, how);
    row(m, "read 2", 2.0 * stream_bytes, t, how);
    t = best_mix<0, 1>(nullptr, nullptr, dx, chunks, sink, sms, how);
    row(m, "write 1", 1.0 * stream_bytes, t, how);

    const BwdShape v = bwd_shape(b.x, b.w, b.rstd, b.dx, b.ws, b.ws_bytes, b.dw, m, n_cols);
    const ropenorm::TensorRef xr = rows(b.x, DType::kBFloat16, m, n_cols);
    const ropenorm::TensorRef dyr = rows(b.dy, DType::kBFloat16, m, n_cols);
    const ropenorm::TensorRef dxr = rows(b.dx, DType::kBFloat16, m, n_cols);
    ropenorm::RmsNormParams fp;
    fp.eps = 1e-6f;
    t = time_med([&] { check(ropenorm::rms_norm(xr, v.w, dxr, v.rstd, fp), "rms_norm"); }, true,
                 21);
    row(m, "rms_norm (library)", 2.0 * stream_bytes + m * 4.0 + n_cols * 2.0, t, "public call");
    ropenorm::RmsNormBackwardParams bp;
    bp.eps = 1e-6f;
    t = time_med(
        [&] {
          check(ropenorm::rms_norm_backward(dyr, xr, v.w, v.rstd, dxr, v.dw, v.ws, bp),
                "rms_norm_backward");
        },
        true, 21);
    row(m, "rms_norm_backward (library)", 3.0 * stream_bytes + m * 4.0 + n_cols * 4.0, t,
        "public call");
  }
  return 0;
}
