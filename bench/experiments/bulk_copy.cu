// Bulk (TMA) copies against per-thread loads and stores on H200: whether tiles moved by
// cp.async.bulk (global -> shared under an mbarrier, shared -> global in bulk groups) stream the
// forward's mix (one read, one written) nearer the memcpy than per-thread 16-byte accesses, which
// reached 4104 GB/s against the memcpy's 4286 at 32768 rows of 4096 bf16 whatever the cache hint
// (cache_hints.cu, cache-hints-2b149e0-*). Every thread of the block touches each 16-byte chunk of
// a tile in shared memory between its load and its store (XOR of the streams read, or of a
// constant when one is read), as a kernel that computes would.
// Kernel bulk<R>: block b owns tiles b + j * grid of `tile` bytes each; a ring of S stages, each
// holding R tiles (one per stream read); thread 0 issues the loads S tiles ahead and the store of
// each tile after the block's barrier, refilling a stage once its store has been read out
// (cp.async.bulk.wait_group.read 1: one store in flight). Thread t touches chunks t + k * blockDim
// of the stage.
// Kernel wide<R>: per-thread accesses with each thread's 4 chunks contiguous (64 bytes), grid
// stride, for comparison with cache_hints.cu's strided chunks.
// Cold L2, CUDA-event medians (experiment_timing.cuh); every configuration's output is checked.
// At 2b149e0 (bulk-copy-2b149e0-nvidia-h200.log, 0 values wrong everywhere): at 32768 rows the
// bulk tiles took 131.23 us for one read and one write (4 KB tiles, 6 stages), as the per-thread
// forms, against the memcpy's 125.38, and 188.03 for two reads and one write (the memcpy 188.54);
// 64 contiguous bytes per thread 168.51 / 206.78.
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Ibench/experiments \
//        bench/experiments/bulk_copy.cu -o bulk_copy
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "stream_mix.cuh"

namespace {

__device__ __forceinline__ uint32_t sa(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra wait_%=;\n}\n" ::"r"(sa(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(sa(dst)),
      "l"(src), "r"(bytes), "r"(sa(bar))
      : "memory");
}

__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(sa(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

constexpr unsigned kKey = 0x2545f491u;

template <int R>
__global__ void __launch_bounds__(512)
    bulk(const uint4* a, const uint4* b, uint4* c, size_t n_tiles, unsigned tile, int stages) {
  extern __shared__ __align__(128) unsigned char smem[];
  auto* bars = reinterpret_cast<uint64_t*>(smem);  // stages barriers, then the ring
  unsigned char* ring = smem + 128;
  const unsigned stage_bytes = R * tile, chunks = tile / 16;
  auto stage = [&](int s) { return reinterpret_cast<uint4*>(ring + s * stage_bytes); };
  const size_t first = blockIdx.x, step = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](size_t t, int s) {
    mbar_expect(&bars[s], stage_bytes);
    bulk_load(stage(s), a + t * chunks, tile, &bars[s]);
    if constexpr (R == 2) bulk_load(stage(s) + chunks, b + t * chunks, tile, &bars[s]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      const size_t t = first + s * step;
      if (t < n_tiles) issue(t, s);
    }
  }
  int j = 0;
  for (size_t t = first; t < n_tiles; t += step, ++j) {
    const int s = j % stages;
    mbar_wait(&bars[s], (j / stages) & 1);
    uint4* st = stage(s);
    for (unsigned k = threadIdx.x; k < chunks; k += blockDim.x) {
      st[k] = R == 2 ? xor4(st[k], st[chunks + k]) : xor4(st[k], make_uint4(kKey, 0, kKey, 0));
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      bulk_store(c + t * chunks, st, tile);
      if (j >= 1) {
        bulk_wait_read<1>();  // the previous tile's store has read its stage out
        const int sp = (j - 1) % stages;
        const size_t tn = t - step + stages * step;
        if (tn < n_tiles) issue(tn, sp);
      }
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

template <int R, int U>
__global__ void __launch_bounds__(1024)
    wide(const uint4* __restrict__ a, const uint4* __restrict__ b, uint4* __restrict__ c,
         size_t n) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x * 4 * U;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < n;
       i += step) {
    uint4 v[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + static_cast<size_t>(u) * step / U;
      if (k < n) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          v[u][q] =
              R == 2 ? xor4(a[k + q], b[k + q]) : xor4(a[k + q], make_uint4(kKey, 0, kKey, 0));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + static_cast<size_t>(u) * step / U;
      if (k < n) {
#pragma unroll
        for (int q = 0; q < 4; ++q) c[k + q] = v[u][q];
      }
    }
  }
}

template <int R>
void run_bulk(const MixCase& x) {
  auto k = bulk<R>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  for (unsigned tile : {4096u, 8192u, 16384u, 32768u}) {
    for (int stages : {2, 3, 4, 6}) {
      for (int per_sm : {1, 2, 3, 4}) {
        const size_t smem = 128 + static_cast<size_t>(stages) * R * tile;
        if (per_sm * (smem + 1024) > 228 * 1024) continue;
        for (int threads : {128, 256, 512}) {
          const int blocks = per_sm * x.sms;
          const size_t n_tiles = x.n * 16 / tile;
          const float us =
              time_med([&] { k<<<blocks, threads, smem>>>(x.a, x.b, x.c, n_tiles, tile, stages); },
                       true, 15);
          CK(cudaMemset(x.c, 0, x.n * 16));
          k<<<blocks, threads, smem>>>(x.a, x.b, x.c, n_tiles, tile, stages);
          CK(cudaDeviceSynchronize());
          std::printf("  bulk  tile %5u  %d stages  %4d x %3d  %9.2f us %6.0f GB/s  %llu wrong\n",
                      tile, stages, blocks, threads, us, x.bytes / us / 1e3, wrong(x));
        }
      }
    }
  }
}

template <int R, int U>
void run_wide(const MixCase& x) {
  const int grids[6][2] = {{1, 512}, {1, 1024}, {2, 512}, {4, 256}, {4, 512}, {8, 256}};
  for (const auto& g : grids) {
    const int blocks = g[0] * x.sms;
    const float us = time_med([&] { wide<R, U><<<blocks, g[1]>>>(x.a, x.b, x.c, x.n); }, true, 15);
    CK(cudaMemset(x.c, 0, x.n * 16));
    wide<R, U><<<blocks, g[1]>>>(x.a, x.b, x.c, x.n);
    CK(cudaDeviceSynchronize());
    std::printf("  wide  64 B per thread x %d        %4d x %4d  %9.2f us %6.0f GB/s  %llu wrong\n",
                U, blocks, g[1], us, x.bytes / us / 1e3, wrong(x));
  }
}

}  // namespace

int main() {
  run_mixes(make_uint4(kKey, 0, kKey, 0), [](const MixCase& x, int r) {
    if (r == 1) {
      run_wide<1, 1>(x);
      run_wide<1, 2>(x);
      run_bulk<1>(x);
    } else {
      run_wide<2, 1>(x);
      run_wide<2, 2>(x);
      run_bulk<2>(x);
    }
  });
  return 0;
}
