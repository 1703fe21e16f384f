// Copy floors at the main job's short-run sizes (H200): how long a plain device-to-device copy of
// the bytes an op moves takes, cold L2, timed as the main job times its rows (CUDA-event medians,
// the L2 evicted before every run). For a row that moves B bytes (half read, half written), the
// copy moves B / 2 bytes from one buffer to another: cudaMemcpyAsync, and a grid-stride copy
// kernel of 16-byte chunks (each thread's chunks i, i + stride, ..., with 1 .. 4 chunks in flight
// per thread) at several grids, so that the fastest of them is the floor a kernel of that many
// bytes can expect on this machine.
// Sizes: RoPE bf16 Hq 32 Hk 8 D 128 (T = 1024: 21504000 bytes; T = 2048, 4096, 16384) and
// QK-norm + RoPE (T = 1024 with its saved rstd excluded: the same q/k bytes).
// At 5b97eb9 (copy-sizes-nvidia-h200.log) the memcpy was within 1% of the best kernel at every
// size (T = 1024 D = 128: 8.10 against 8.03 us), so the main job times a memcpy per row
// (copy_floor_us).
// Ownership: thread i of the copy kernel owns chunks i + j * stride of the source and the
// destination. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 bench/experiments/copy_sizes.cu \
//        -o copy_sizes
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "experiment_timing.cuh"

namespace {

/// Copies n 16-byte chunks, kUnroll of them in flight per thread per step.
template <int kUnroll>
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

template <int kUnroll>
float time_copy_kernel(const uint4* s, uint4* d, size_t n, int blocks, int threads) {
  return time_med([&] { copy_kernel<kUnroll><<<blocks, threads>>>(s, d, n); }, true, 31);
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("copy bandwidth (1 GiB memcpy) %.1f GB/s, %d SMs\n",
              copy_bandwidth_gbps(size_t{1} << 30), sms);
  struct Size {
    const char* name;
    size_t moved;
  };
  const Size sizes[] = {{"rope T=1024 D=128", 21504000}, {"rope T=2048 D=128", 43008000},
                        {"rope T=4096 D=128", 86016000}, {"rope T=16384 D=128", 344064000},
                        {"rope T=1024 D=64", 10756096},  {"rope T=1024 D=256", 42999808}};
  std::printf("%-20s %10s %10s | best kernel (blocks x threads, chunks in flight)\n", "bytes of",
              "moved MB", "memcpy us");
  for (const Size& z : sizes) {
    const size_t half = z.moved / 2 / 16 * 16, n = half / 16;
    uint4 *s = nullptr, *d = nullptr;
    CK(cudaMalloc(&s, half));
    CK(cudaMalloc(&d, half));
    CK(cudaMemset(s, 0x3c, half));
    const float mc =
        time_med([&] { cudaMemcpyAsync(d, s, half, cudaMemcpyDeviceToDevice); }, true, 31);
    float best = 1e30f;
    int bb = 0, bt = 0, bu = 0;
    for (int per_sm : {1, 2, 4, 8, 16}) {
      for (int threads : {256, 512, 1024}) {
        if (per_sm * threads > 2048) continue;
        const int blocks = per_sm * sms;
        const float t1 = time_copy_kernel<1>(s, d, n, blocks, threads);
        const float t2 = time_copy_kernel<2>(s, d, n, blocks, threads);
        const float t4 = time_copy_kernel<4>(s, d, n, blocks, threads);
        const float t = std::min(t1, std::min(t2, t4));
        if (t < best) {
          best = t;
          bb = blocks;
          bt = threads;
          bu = t == t1 ? 1 : (t == t2 ? 2 : 4);
        }
      }
    }
    std::printf("%-20s %10.2f %10.2f | %.2f us (%d x %d, %d), %.0f GB/s\n", z.name, z.moved / 1e6,
                mc, best, bb, bt, bu, z.moved / best / 1e3);
    CK(cudaFree(s));
    CK(cudaFree(d));
  }
  return 0;
}
