// The cos/sin table kept in L2: the lean runs read a token's cos/sin row through L1 with the
// default L2 policy, so between two reads of the same row (a repeated position in one call, or the
// same positions in the next call: the backward after the forward, or the next layer) some 1.3 GB
// of q and k streamed past it had evicted it. Built against two builds of the library (2b149e0's,
// and the same with an L2 evict_last policy on cp_async_16_cached, the copies that go through L1),
// this program timed the main job's rows that read the table (bf16, 32 + 8 heads, D = 128, neox,
// f32 cache of P = T rows, random int64 positions in [0, T), cold L2) and checked whether an L2
// flush evicts what the hinted copies left there (table-l2-2b149e0-nvidia-h200.log: rope forward
// + inverse T = 32768 340.99 / 340.86 -> 334.72 / 334.46 us; the flush evicts the rows). Since
// 0f6e678 the library keeps an f32 table's rows in L2 itself (LeanRunRing::fetch_cos_sin), so
// against today's library the program times that, and the probe still applies:
//   probe: after one call, the flush, then a read of the whole table, timed; against the same
//   read after the flush alone. Flushes: "read" (the main job's: normal loads of 2 x L2 bytes),
//   "reset+read" (cudaCtxResetPersistingL2Cache first), "read last" (the flush's loads carry an
//   L2 evict_last policy themselves).
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/table_l2.cu build/libropenorm.a -o table_l2
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>

#include "decode_inputs.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"

namespace {

using namespace ropenorm;

/// Reads n 16-byte chunks at p (kLast: under an L2 evict_last policy): the flushes, and the
/// table's timed read.
template <bool kLast>
__global__ void read_chunks(const uint4* p, size_t n, unsigned* sink) {
  uint64_t pol = 0;
  if (kLast) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint4 v;
    if (kLast) {
      asm volatile("ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p + i), "l"(pol));
    } else {
      v = p[i];
    }
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

}  // namespace

int main() {
  constexpr int64_t kD = 128, kHq = 32, kHk = 8;
  std::mt19937_64 rng(7);
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  std::printf("copy bandwidth %.1f GB/s, L2 %d MB\n", copy_bandwidth_gbps(size_t{1} << 30),
              l2 >> 20);
  const size_t flush_n = 2 * static_cast<size_t>(l2) / 16;
  uint4* fbuf;
  unsigned* sink;
  CK(cudaMalloc(&fbuf, flush_n * 16));
  CK(cudaMemset(fbuf, 0, flush_n * 16));
  CK(cudaMalloc(&sink, 4));
  const int64_t tmax = 65536;
  const auto hq = random_bf16(rng, tmax * kHq * kD), hk = random_bf16(rng, tmax * kHk * kD);
  cuda::bf16 *q = device_bf16(hq), *k = device_bf16(hk), *gq = device_bf16(hq),
             *gk = device_bf16(hk);
  cuda::bf16 *yq = device_bf16({}, tmax * kHq * kD), *yk = device_bf16({}, tmax * kHk * kD),
             *dq = device_bf16({}, tmax * kHq * kD), *dk = device_bf16({}, tmax * kHk * kD);
  cuda::bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  float *rq, *rk;
  CK(cudaMalloc(&rq, tmax * kHq * 4));
  CK(cudaMalloc(&rk, tmax * kHk * 4));
  for (int64_t t : {int64_t{32768}, int64_t{65536}}) {
    const DeviceCosSin csd = device_cos_sin(rng, t, kD, t);
    const StandardViews sv(csd, t, w);
    RopeParams fwd, inv;
    inv.inverse = true;
    QkNormParams np;
    auto rope_f = [&] {
      check(rope(sv.view(q, kHq), sv.view(k, kHk), sv.view(yq, kHq), sv.view(yk, kHk), sv.rp,
                 sv.cache, fwd, nullptr),
            "rope");
    };
    auto rope_b = [&] {
      check(rope(sv.view(gq, kHq), sv.view(gk, kHk), sv.view(dq, kHq), sv.view(dk, kHk), sv.rp,
                 sv.cache, inv, nullptr),
            "rope inverse");
    };
    auto qk = [&] {
      check(qk_norm_rope(sv.view(q, kHq), sv.view(k, kHk), sv.wq, sv.wk, sv.view(yq, kHq),
                         sv.view(yk, kHk), sv.rstd(rq, kHq), sv.rstd(rk, kHk), sv.rp, sv.cache, fwd,
                         np, nullptr),
            "qk_norm_rope");
    };
    std::printf("T = %lld: rope %.2f us | rope forward + inverse %.2f | qk_norm_rope %.2f\n",
                static_cast<long long>(t), time_med(rope_f, true, 21),
                time_med([&] { rope_f(), rope_b(); }, true, 21), time_med(qk, true, 21));
    // The probe: the table's read after a call and a flush, against after a flush alone.
    const size_t table_n = static_cast<size_t>(t) * kD * 4 / 16;
    auto probe = [&](bool call_first, int how) {
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      std::vector<float> v;
      for (int i = 0; i < 11; ++i) {
        read_chunks<false><<<1024, 512>>>(fbuf, flush_n, sink);
        if (call_first) rope_f();
        if (how == 1) CK(cudaCtxResetPersistingL2Cache());
        if (how == 2) {
          read_chunks<true><<<1024, 512>>>(fbuf, flush_n, sink);
        } else {
          read_chunks<false><<<1024, 512>>>(fbuf, flush_n, sink);
        }
        CK(cudaEventRecord(e0));
        read_chunks<false><<<528, 512>>>(reinterpret_cast<const uint4*>(csd.cache), table_n, sink);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms * 1e3f);
      }
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf(
        "  table read (%.1f MB): flush alone %.2f us; after rope then flush: read %.2f, "
        "reset+read %.2f, read last %.2f; flush alone, read last %.2f\n",
        table_n * 16 / 1e6, probe(false, 0), probe(true, 0), probe(true, 1), probe(true, 2),
        probe(false, 2));
    CK(cudaFree(csd.cache));
    CK(cudaFree(csd.pos));
  }
  return 0;
}
