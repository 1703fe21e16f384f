// Cache hints and chunk order on H200: whether a plain streaming kernel moves the forward's mix
// (one stream read, one written) or the RMSNorm backward's (two read, one written) faster with a
// different load or store instruction, or with each block owning a contiguous range instead of the
// grid-stride order the library's persistent kernels use. At ea44bfc (traffic_mix.cu) the plain
// one-to-one kernel moved 4097 GB/s against the memcpy's 4292 at 32768 rows of 4096 bf16; the
// library's kernels load with cp.async.cg and store with st.global.cg and no L2 hint.
// Kernel hint<R, L, S, O, U>: R streams read (1 or 2), one written (the XOR of the chunks read);
// thread t of block b owns 16-byte chunks, U of them in flight per step:
//   O = 0 grid stride: chunk i + j * (grid threads), i the thread's global index;
//   O = 1 block range: block b owns a contiguous range of about n / grid chunks, thread t its
//         chunks t + j * blockDim inside it.
// Loads L: 0 ld.global (plain), 1 ld.global.nc.L1::no_allocate, 2 ld.global.cs,
//   3 ld.global.L1::no_allocate.L2::256B, 4 ld.global.L1::no_allocate.L2::cache_hint (evict_first),
//   5 cp.async.cg to shared and back (the library's form), 6 cp.async.cg.L2::256B,
//   7 cp.async.cg.L2::cache_hint (evict_first).
// Stores S: 0 st.global (plain), 1 st.global.cg (the library's), 2 st.global.cs,
//   3 st.global.L1::no_allocate.L2::cache_hint (evict_first).
// Every variant is timed at 7 grids x 3 depths; the fastest is reported, beside the memcpy of the
// same bytes. Cold L2, CUDA-event medians (experiment_timing.cuh). The output is checked against
// the host's XOR for every variant at its fastest launch.
// At 2b149e0 (cache-hints-2b149e0-nvidia-h200.log): at 32768 rows no variant beat ld + st (130.82
// us for one read and one write, the memcpy 125.25; 188.58 for two reads and one write, the
// memcpy 188.42; the library's cp.async.cg + st.cg 131.01 / 188.93); evict_first and cs cost 3-5%
// on the loads and 0-1% on the stores, the 256-byte prefetch 0.7-6.8%, block ranges 2.6-4.5%
// (docs/performance.md).
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Ibench/experiments \
//        bench/experiments/cache_hints.cu -o cache_hints
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "stream_mix.cuh"

namespace {

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

template <int L>
__device__ __forceinline__ uint4 load(const uint4* p, uint64_t pol) {
  uint4 v;
  if constexpr (L == 0) {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (L == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (L == 2) {
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (L == 3) {
    asm volatile("ld.global.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
  }
  return v;
}

template <int L>
__device__ __forceinline__ void load_async(uint4* dst, const uint4* p, uint64_t pol) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (L == 5) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(p) : "memory");
  } else if constexpr (L == 6) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(p) : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s), "l"(p),
                 "l"(pol)
                 : "memory");
  }
}

template <int S>
__device__ __forceinline__ void store(uint4* p, uint4 v, uint64_t pol) {
  if constexpr (S == 0) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else if constexpr (S == 1) {
    asm volatile("st.global.cg.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else if constexpr (S == 2) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else {
    asm volatile(
        "st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(p),
        "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(pol)
        : "memory");
  }
}

template <int R, int L, int S, int O, int U>
__global__ void hint(const uint4* __restrict__ a, const uint4* __restrict__ b,
                     uint4* __restrict__ c, size_t n) {
  extern __shared__ uint4 slots[];  // L >= 5: [u][r][thread]
  const uint64_t pol = (L == 4 || L == 7 || S == 3) ? evict_first_policy() : 0;
  size_t lo, hi, step, start;
  if constexpr (O == 0) {
    lo = 0;
    hi = n;
    step = static_cast<size_t>(gridDim.x) * blockDim.x;
    start = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  } else {
    const size_t per = (n + gridDim.x - 1) / gridDim.x;
    lo = blockIdx.x * per;
    hi = lo + per < n ? lo + per : n;
    step = blockDim.x;
    start = lo + threadIdx.x;
  }
  for (size_t i = start; i < hi; i += U * step) {
    uint4 v[U];
    if constexpr (L >= 5) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const size_t k = i + u * step;
        if (k < hi) {
          load_async<L>(&slots[(u * R) * blockDim.x + threadIdx.x], a + k, pol);
          if constexpr (R == 2) {
            load_async<L>(&slots[(u * R + 1) * blockDim.x + threadIdx.x], b + k, pol);
          }
        }
      }
      asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
#pragma unroll
      for (int u = 0; u < U; ++u) {
        v[u] = slots[(u * R) * blockDim.x + threadIdx.x];
        if constexpr (R == 2) v[u] = xor4(v[u], slots[(u * R + 1) * blockDim.x + threadIdx.x]);
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const size_t k = i + u * step;
        if (k < hi) {
          v[u] = load<L>(a + k, pol);
          if constexpr (R == 2) v[u] = xor4(v[u], load<L>(b + k, pol));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = i + u * step;
      if (k < hi) store<S>(c + k, v[u], pol);
    }
  }
}

struct Best {
  float us = 1e30f;
  int blocks = 0, threads = 0, depth = 0;
};

template <int R, int L, int S, int O, int U>
void try_depth(const uint4* a, const uint4* b, uint4* c, size_t n, int blocks, int threads,
               Best& best) {
  const size_t smem = L >= 5 ? static_cast<size_t>(U) * R * threads * 16 : 0;
  if (smem > 100 * 1024) return;
  auto k = hint<R, L, S, O, U>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
  const float t = time_med([&] { k<<<blocks, threads, smem>>>(a, b, c, n); }, true, 15);
  if (t < best.us) best = {t, blocks, threads, U};
}

template <int R, int L, int S, int O>
Best best_of(const uint4* a, const uint4* b, uint4* c, size_t n, int sms) {
  Best best;
  const int grids[7][2] = {{1, 512}, {1, 1024}, {2, 512}, {2, 1024}, {4, 256}, {4, 512}, {8, 256}};
  for (const auto& g : grids) {
    try_depth<R, L, S, O, 1>(a, b, c, n, g[0] * sms, g[1], best);
    try_depth<R, L, S, O, 2>(a, b, c, n, g[0] * sms, g[1], best);
    try_depth<R, L, S, O, 4>(a, b, c, n, g[0] * sms, g[1], best);
  }
  return best;
}

const char* kLoadName[8] = {"ld",          "ld.nc.L1na",  "ld.cs",         "ld.L2::256B",
                            "ld.evict1st", "cp.async.cg", "cp.async.256B", "cp.async.evict1st"};
const char* kStoreName[4] = {"st", "st.cg", "st.cs", "st.evict1st"};

template <int R, int L, int S, int O>
void report(const MixCase& x) {
  const Best b = best_of<R, L, S, O>(x.a, x.b, x.c, x.n, x.sms);
  // Verify the fastest launch's output.
  CK(cudaMemset(x.c, 0, x.n * 16));
  const size_t smem = L >= 5 ? static_cast<size_t>(b.depth) * R * b.threads * 16 : 0;
  auto run = [&](auto k) { k<<<b.blocks, b.threads, smem>>>(x.a, x.b, x.c, x.n); };
  if (b.depth == 1) run(hint<R, L, S, O, 1>);
  if (b.depth == 2) run(hint<R, L, S, O, 2>);
  if (b.depth == 4) run(hint<R, L, S, O, 4>);
  const unsigned long long bad = wrong(x);
  std::printf("  %-18s %-12s %-6s %9.2f us %6.0f GB/s  %4d x %4d, %d in flight, %llu wrong\n",
              kLoadName[L], kStoreName[S], O == 0 ? "grid" : "block", b.us, x.bytes / b.us / 1e3,
              b.blocks, b.threads, b.depth, bad);
}

template <int R, int L, int S>
void both_orders(const MixCase& x) {
  report<R, L, S, 0>(x);
  report<R, L, S, 1>(x);
}

template <int R, int L>
void all_stores(const MixCase& x) {
  both_orders<R, L, 0>(x);
  both_orders<R, L, 1>(x);
  both_orders<R, L, 2>(x);
  both_orders<R, L, 3>(x);
}

template <int R>
void all_variants(const MixCase& x) {
  all_stores<R, 0>(x);
  all_stores<R, 1>(x);
  all_stores<R, 2>(x);
  all_stores<R, 3>(x);
  all_stores<R, 4>(x);
  all_stores<R, 5>(x);
  all_stores<R, 6>(x);
  all_stores<R, 7>(x);
}

}  // namespace

int main() {
  run_mixes(make_uint4(0, 0, 0, 0), [](const MixCase& x, int r) {
    if (r == 1) {
      all_variants<1>(x);
    } else {
      all_variants<2>(x);
    }
  });
  return 0;
}
