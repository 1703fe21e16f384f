// The harness the streaming-mix experiments share (cache_hints.cu, bulk_copy.cu; not part of the
// build): two source streams of random 16-byte chunks and one output, the expected output of a
// mix (one stream XOR a key, or the two streams' XOR), a device-side count of wrong chunks, and
// the run over the standard sizes (bf16 rows [M, 4096] for M = 32768 and 4096, one and two
// streams read) with the memcpy of each case's bytes timed beside it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "experiment_timing.cuh"

__host__ __device__ __forceinline__ uint4 xor4(uint4 a, uint4 b) {
  return make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
}

__global__ void count_wrong(const uint4* got, const uint4* want, size_t n,
                            unsigned long long* bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 g = got[i], w = want[i];
    mine += (g.x != w.x) | (g.y != w.y) | (g.z != w.z) | (g.w != w.w);
  }
  if (mine != 0) atomicAdd(bad, mine);
}

/// One case: streams a (and b when two are read) of n chunks into c; `want` (on the device) is
/// what c must hold; `bytes` the bytes the case moves.
struct MixCase {
  const uint4 *a, *b;
  uint4* c;
  size_t n;
  int sms;
  double bytes;
  const uint4* want;
  unsigned long long* bad;
};

/// Chunks of c that differ from want.
inline unsigned long long wrong(const MixCase& x) {
  CK(cudaMemset(x.bad, 0, 8));
  count_wrong<<<4 * x.sms, 512>>>(x.c, x.want, x.n, x.bad);
  unsigned long long bad = 0;
  CK(cudaMemcpy(&bad, x.bad, 8, cudaMemcpyDeviceToHost));
  return bad;
}

/// Prints the 1 GiB copy bandwidth, then for M = 32768 and 4096 rows of 4096 bf16 and r = 1, 2
/// streams read prints the memcpy of the case's bytes and calls run(case, r). With one stream
/// read the expected output is a XOR key, with two a XOR b.
template <class Run>
void run_mixes(uint4 key, Run&& run) {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("copy bandwidth (1 GiB memcpy) %.1f GB/s, %d SMs\n",
              copy_bandwidth_gbps(size_t{1} << 30), sms);
  const size_t max_bytes = size_t{32768} * 4096 * 2;
  uint4 *a, *b, *c, *want_d;
  unsigned long long* bad;
  CK(cudaMalloc(&bad, 8));
  CK(cudaMalloc(&want_d, max_bytes));
  CK(cudaMalloc(&a, max_bytes));
  CK(cudaMalloc(&b, max_bytes));
  CK(cudaMalloc(&c, max_bytes));
  std::vector<uint4> ha(max_bytes / 16), hb(max_bytes / 16);
  unsigned s = 12345u;
  for (size_t i = 0; i < ha.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    ha[i] = make_uint4(s, s ^ 0x5bd1e995u, static_cast<unsigned>(i), s >> 7);
    hb[i] = make_uint4(~s, s * 3u, s + 11u, static_cast<unsigned>(i >> 3));
  }
  CK(cudaMemcpy(a, ha.data(), max_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, hb.data(), max_bytes, cudaMemcpyHostToDevice));
  void *cs, *cd;
  CK(cudaMalloc(&cs, 3 * max_bytes / 2));
  CK(cudaMalloc(&cd, 3 * max_bytes / 2));
  for (int64_t m : {int64_t{32768}, int64_t{4096}}) {
    const size_t stream = static_cast<size_t>(m) * 4096 * 2, n = stream / 16;
    for (int r : {1, 2}) {
      const size_t half = (r + 1) * stream / 2;
      const float mc =
          time_med([&] { cudaMemcpyAsync(cd, cs, half, cudaMemcpyDeviceToDevice); }, true, 21);
      std::printf(
          "M = %lld rows of 4096 bf16, read %d, write 1: memcpy of the bytes %.2f us "
          "(%.0f GB/s)\n",
          static_cast<long long>(m), r, mc, 2.0 * half / mc / 1e3);
      std::vector<uint4> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = xor4(ha[i], r == 1 ? key : hb[i]);
      CK(cudaMemcpy(want_d, want.data(), n * 16, cudaMemcpyHostToDevice));
      run(MixCase{a, b, c, n, sms, static_cast<double>((r + 1) * stream), want_d, bad}, r);
    }
  }
}
