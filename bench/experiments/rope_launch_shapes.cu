// RoPE and QK-norm + RoPE launch-shape experiment (H200): times the production kernels
// (rope_kernel, qk_norm_rope_vec_kernel, qk_norm_rope_pair_kernel) at several heads-per-thread
// and register-budget instantiations, and two diagnostic kernels with the RoPE kernel's access
// pattern (kMath = 0: loads and stores only; 1: plain fp32 rotation), on q [T, 32, 128] and
// k [T, 8, 128] bf16 with an fp32 cos/sin cache, cold L2 (CUDA-graph replay for T = 1); checks
// that every variant writes the same bits; and a software-pipelined RoPE variant (a persistent
// grid whose threads load the next token before they rotate the current one), from its
// specialised form one generalisation at a time, and the same pipeline with the pair kernel's
// per-head norm (qk_pipelined_kernel). Not part of the build:
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rope_launch_shapes.cu src/core/rope_plan.cpp -o rope_launch_shapes
// Its output at f2b72c8: bench/results/rope-launch-shapes-nvidia-h200.log; at 1dbff34 (with the
// library's pipelined kernel of that commit):
// bench/results/rope-launch-shapes-1dbff34-nvidia-h200.log; with these switches:
// bench/results/rope-launch-shapes-16f10cf-nvidia-h200.log.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "experiment_timing.cuh"
using namespace ropenorm;
using namespace ropenorm::cuda;
namespace ropenorm::cuda {
int device_cc_major() { return 9; }
}  // namespace ropenorm::cuda
const int HQ = 32, HK = 8, D = 128;
struct Bufs {
  bf16 *q, *k, *qo, *ko;
  float* cache;
  bf16 *wq, *wk;
  int64_t* pos;  // pos[t] = t, for variants that load positions
};
RopeKernelArgs make_args(const Bufs& b, int64_t T) {
  RopeKernelArgs a{};
  a.q = {b.q, 0, HQ * D, D};
  a.k = {b.k, 0, HK * D, D};
  a.q_out = {b.qo, 0, HQ * D, D};
  a.k_out = {b.ko, 0, HK * D, D};
  a.seq = T;
  a.tokens = T;
  a.hq = HQ;
  a.hk = HK;
  a.head_dim = D;
  a.half = D / 2;
  a.gptj = false;
  a.inverse = false;
  a.copy_q_tail = a.copy_k_tail = false;
  a.pos = nullptr;
  a.offset = 0;
  a.seq_off = nullptr;
  a.source = RopeSource::kCache;
  a.cos = b.cache;
  a.sin = b.cache + D / 2;
  a.cs_dtype = DType::kFloat32;
  a.cos_row = D;
  a.sin_row = D;
  a.inv_freq = nullptr;
  a.scaling = 1.f;
  return a;
}
// Runs kernel k (PDL launch) on args, timed (CUDA-graph replay for T = 1, cold L2 otherwise),
// after poisoning q_out; compares q_out with ref (the first variant of a T fills ref).
struct Measured {
  float us;
  int regs;
  size_t diff;  // q_out elements that differ from ref
};
template <typename K, typename Args>
Measured measure(K k, dim3 grid, dim3 block, const Args& args, const Bufs& b, int64_t T,
                 std::vector<uint16_t>& ref) {
  auto run = [&](cudaStream_t s) { CK(launch_with_pdl(k, grid, block, 0, s, args)); };
  CK(cudaMemset(b.qo, 0xff, T * HQ * D * 2));
  Measured m{};
  m.us = T == 1 ? time_graph(run) : time_med([&] { run(0); }, true);
  std::vector<uint16_t> out(T * HQ * D);
  CK(cudaMemcpy(out.data(), b.qo, out.size() * 2, cudaMemcpyDeviceToHost));
  if (ref.empty()) {
    ref = out;
  } else {
    for (size_t i = 0; i < out.size(); ++i) m.diff += ref[i] != out[i];
  }
  cudaFuncAttributes fa;
  cudaFuncGetAttributes(&fa, k);
  m.regs = fa.numRegs;
  return m;
}
QkNormRopeArgs make_qk_args(const Bufs& b, int64_t T) {
  QkNormRopeArgs qa{};
  qa.rope = make_args(b, T);
  qa.wq = b.wq;
  qa.wk = b.wk;
  qa.wq_dtype = qa.wk_dtype = DType::kBFloat16;
  qa.eps = 1e-6f;
  qa.weight_offset = 0.f;
  qa.q_rstd = qa.k_rstd = nullptr;
  qa.group = D / 8;
  qa.slots = D / 2;
  return qa;
}
template <int KH, int MB, bool kSingle = true>
void rope_variant(const Bufs& b, int64_t T, std::vector<uint16_t>& ref, double bytes, double copy) {
  const int bx = 8;
  const int by = std::min<int>((HQ + HK + KH - 1) / KH, 256 / bx);
  const int bz = std::min<int64_t>(std::min(256 / (bx * by), 64), T);
  const Measured m = measure(rope_kernel<bf16, 8, KH, MB, false, kSingle>, dim3((T + bz - 1) / bz),
                             dim3(bx, by, bz), make_args(b, T), b, T, ref);
  printf(
      "rope single=%d KH=%d MB=%d T=%6ld regs=%3d block=%dx%dx%d  %8.2f us  %6.0f GB/s  %5.1f%% "
      "copy  %s\n",
      (int)kSingle, KH, MB, (long)T, m.regs, bx, by, bz, m.us, bytes / m.us / 1e3,
      100 * bytes / m.us / 1e3 / copy, m.diff == 0 ? "same" : "DIFF");
}
template <int KH, int MB>
void qk_variant(const Bufs& b, int64_t T, std::vector<uint16_t>& ref, double bytes, double copy) {
  QkNormRopeArgs qa = make_qk_args(b, T);
  const int G = D / 8;
  const int maxg = 256 / G;
  const int ng = std::min(maxg, (HQ + HK + KH - 1) / KH);
  const int tpb = std::min<int64_t>(maxg / ng, T);
  qa.groups_per_token = ng;
  const dim3 block(tpb * ng * G);
  const Measured m = measure(qk_norm_rope_vec_kernel<bf16, KH, MB>, dim3((T + tpb - 1) / tpb),
                             block, qa, b, T, ref);
  printf(
      "qk   KH=%d MB=%d T=%6ld regs=%3d threads=%3d      %8.2f us  %6.0f GB/s  %5.1f%% copy  %s\n",
      KH, MB, (long)T, m.regs, block.x, m.us, bytes / m.us / 1e3, 100 * bytes / m.us / 1e3 / copy,
      m.diff == 0 ? "same" : "DIFF");
}
template <int MB>
void qk_pair_variant(const Bufs& b, int64_t T, std::vector<uint16_t>& ref, double bytes,
                     double copy) {
  const core::RopePlan pl = core::plan_rope(T, HQ + HK, D / 2, 8);
  const Measured m =
      measure(qk_norm_rope_pair_kernel<bf16, 8, 2, MB, false, true>, rope_launch_grid(pl),
              rope_launch_block(pl), make_qk_args(b, T), b, T, ref);
  printf(
      "qkpair single=%d MB=%d T=%6ld regs=%3d block=%dx%dx%d %8.2f us  %6.0f GB/s  %5.1f%% copy  "
      "diff-vs-vec=%zu of %ld\n",
      (int)pl.single, MB, (long)T, m.regs, pl.bx, pl.by, pl.bz, m.us, bytes / m.us / 1e3,
      100 * bytes / m.us / 1e3 / copy, m.diff, (long)(T * HQ * D));
}
template <int KH, int kMath>
__global__ void __launch_bounds__(256, 2) pattern_kernel(const RopeKernelArgs a) {
  const int heads = a.hq + a.hk;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
  if (t >= a.tokens) return;
  const RopeTokenPtrs<bf16> tp = rope_token_ptrs<bf16>(a, 0, t);
  const int i0 = threadIdx.x * 8;
  const int h0 = threadIdx.y * KH;
  RopeHeadRegs<bf16, 8> r[KH];
#pragma unroll
  for (int u = 0; u < KH; ++u)
    if (h0 + u < heads) rope_load_head<bf16, 8>(a, tp, h0 + u, i0, a.half + i0, r[u]);
  float c[8], sn[8];
  if (kMath) rope_cos_sin_loaded<8>(a, t, 0, t, i0, c, sn);
#pragma unroll
  for (int u = 0; u < KH; ++u) {
    const int hh = h0 + u;
    if (hh >= heads) continue;
    bf16* y = hh < a.hq ? tp.q_out + hh * a.q_out.sh : tp.k_out + (hh - a.hq) * a.k_out.sh;
    if (kMath == 0) {
      store_chunk<bf16, 8>(y + i0, r[u].x0.v);
      store_chunk<bf16, 8>(y + a.half + i0, r[u].x1.v);
    } else {
      float x0[8], x1[8], y0[8], y1[8];
      widen<bf16, 8>(r[u].x0, x0);
      widen<bf16, 8>(r[u].x1, x1);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        y0[k] = fmaf(x0[k], c[k], -x1[k] * sn[k]);
        y1[k] = fmaf(x0[k], sn[k], x1[k] * c[k]);
      }
      store_pack<bf16, 8>(y + i0, y0);
      store_pack<bf16, 8>(y + a.half + i0, y1);
    }
  }
}
template <int KH, int kMath>
void pattern_variant(const Bufs& b, int64_t T, double bytes, double copy) {
  RopeKernelArgs a = make_args(b, T);
  const int bx = 8;
  int by = (HQ + HK + KH - 1) / KH;
  int bz = std::max<int64_t>(1, std::min<int64_t>(256 / (bx * by), T));
  dim3 grid((T + bz - 1) / bz), block(bx, by, bz);
  auto k = pattern_kernel<KH, kMath>;
  float us = time_med([&] { CK(launch_with_pdl(k, grid, block, 0, 0, a)); }, true);
  cudaFuncAttributes fa;
  cudaFuncGetAttributes(&fa, k);
  printf(
      "pattern KH=%d math=%d T=%6ld regs=%3d block=%dx%dx%d  %8.2f us  %6.0f GB/s  %5.1f%% copy\n",
      KH, kMath, (long)T, fa.numRegs, bx, by, bz, us, bytes / us / 1e3,
      100 * bytes / us / 1e3 / copy);
}
// Blocks of a persistent grid for kernel k at `threads` per block: as many as are resident at
// once on the device (per_sm per multiprocessor), at most T.
int64_t persistent_grid(const void* k, int threads, int64_t T, int* per_sm) {
  int sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, k, threads, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return std::min<int64_t>(T, static_cast<int64_t>(*per_sm) * sms);
}
// The next token's registers (heads, cos, sin) become the current ones.
template <int KH, int V>
__device__ __forceinline__ void next_round(RopeHeadRegs<bf16, V> (&cur)[KH],
                                           const RopeHeadRegs<bf16, V> (&nxt)[KH], float (&cc)[V],
                                           float (&cs)[V], const float (&nc)[V],
                                           const float (&ns)[V]) {
#pragma unroll
  for (int u = 0; u < KH; ++u) cur[u] = nxt[u];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    cc[k] = nc[k];
    cs[k] = ns[k];
  }
}
// Software-pipelined variant (experiment): a persistent grid; thread row y of a block owns KH
// heads, lane x one pair vector, slice z a token, then every gridDim.x * bz-th token after it.
// The next token's head loads and cos/sin loads are issued before the current token is rotated
// and stored, so loads stay in flight through the arithmetic. Same helpers (loads, Kahan
// rotation, stores) as the production kernel: the same bits. The switches turn its
// specialisations into general forms, one at a time (everything general, at 1dbff34: 446 us at
// T = 65536 against 342 us specialised; at 16f10cf the run-time source, the 256-thread bound and
// a position loaded one round ahead cost nothing, a position loaded with its token 49 us, (b, s)
// tokens 57 us, the lane predicate alone 80 us, the pass-through copy alone 82 us; why is open:
// docs/performance.md).
//  - kGSource: the cos/sin source chosen at run time (rope_cos_sin: computed or loaded), not
//    the table only;
//  - kGTokens: token t split into (b, s) and its position looked up (rope_token_coords,
//    rope_position), not b = 0 and p = t;
//  - kPos: flat tokens with the position loaded from an int64 array (pos[t] = t here, so the
//    bits stay those of p = t): 1 when the token is loaded, 2 one round ahead;
//  - kLane: the lane predicate (threads without a pair vector);
//  - kTail: the pass-through copy;
//  - kBound256: the library's launch bound (256 threads, MB blocks), not this block's size.
// KH = 1 (one head per thread row) halves the head registers a token keeps live: does the
// general form pipeline then?
template <int KH>
constexpr int kPipelinedThreads = 8 * ((HQ + HK + KH - 1) / KH);
template <int KH, int MB, bool kGSource, bool kGTokens, int kPos, bool kLane, bool kTail,
          bool kBound256>
__global__ void __launch_bounds__(kBound256 ? 256 : kPipelinedThreads<KH>, MB)
    pipelined_kernel(const RopeKernelArgs a) {
  constexpr int V = 8;
  const int heads = a.hq + a.hk;
  const int h0 = threadIdx.y * KH;
  const int i0 = threadIdx.x * V;
  const int oa = i0, ob = a.half + i0;
  const bool lane = !kLane || static_cast<int>(threadIdx.x) < a.half / V;
  const bool any_tail = kTail && a.head_dim > 2 * a.half && (a.copy_q_tail || a.copy_k_tail);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.z;
  int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
  griddep_wait();
  if (t >= a.tokens) return;
  const int64_t* pos = static_cast<const int64_t*>(a.pos);
  RopeHeadRegs<bf16, V> cur[KH], nxt[KH];
  float cc[V], cs[V], nc[V], ns[V];
  auto coords = [&](int64_t tt, int64_t& bb, int64_t& ss) {
    if constexpr (kGTokens) {
      rope_token_coords(a, tt, bb, ss);
    } else {
      bb = 0;
      ss = tt;
    }
  };
  // kPos 2: the position of the token after next, loaded one round ahead.
  int64_t p_next = 0;
  if constexpr (kPos == 2) p_next = t + step < a.tokens ? pos[t + step] : 0;
  auto position = [&](int64_t bb, int64_t ss) -> int64_t {
    if constexpr (kGTokens) return a.source == RopeSource::kGathered ? 0 : rope_position(a, bb, ss);
    if constexpr (kPos == 1) return pos[ss];
    return ss;
  };
  auto load = [&](const RopeTokenPtrs<bf16>& tp, int64_t bb, int64_t ss, int64_t p,
                  RopeHeadRegs<bf16, V>(&r)[KH], float(&c)[V], float(&sn)[V]) {
    rope_load_heads<bf16, V, KH>(a, tp, h0, heads, oa, ob, r);
    if constexpr (kGSource) {
      rope_cos_sin<V>(a, p, bb, ss, i0, c, sn);
    } else {
      rope_cos_sin_loaded<V>(a, p, bb, ss, i0, c, sn);
    }
  };
  int64_t b, s;
  coords(t, b, s);
  RopeTokenPtrs<bf16> tp = rope_token_ptrs<bf16>(a, b, s);
  if (lane) load(tp, b, s, kPos == 2 ? pos[t] : position(b, s), cur, cc, cs);
  while (true) {
    const int64_t tn = t + step;
    const bool more = tn < a.tokens;
    int64_t bn = b, sn = s;
    RopeTokenPtrs<bf16> tpn = tp;
    if (more) {
      coords(tn, bn, sn);
      tpn = rope_token_ptrs<bf16>(a, bn, sn);
      int64_t pn = 0;
      if constexpr (kPos == 2) {
        pn = p_next;
        p_next = tn + step < a.tokens ? pos[tn + step] : 0;
      } else {
        pn = position(bn, sn);
      }
      if (lane) load(tpn, bn, sn, pn, nxt, nc, ns);
    }
    if (lane) {
#pragma unroll
      for (int u = 0; u < KH; ++u) {
        if (h0 + u < heads) rope_store_head<bf16, V, false>(a, tp, h0 + u, oa, ob, cur[u], cc, cs);
      }
    }
    if (any_tail) rope_copy_tail<bf16, V, KH>(a, b, s);
    if (!more) break;
    t = tn;
    b = bn;
    s = sn;
    tp = tpn;
    next_round<KH, V>(cur, nxt, cc, cs, nc, ns);
  }
}
template <int KH, int MB, bool kGSource = false, bool kGTokens = false, int kPos = 0,
          bool kLane = false, bool kTail = false, bool kBound256 = false>
void pipelined_variant(const Bufs& b, int64_t T, std::vector<uint16_t>& ref, double bytes,
                       double copy) {
  const int bx = 8;
  const int by = (HQ + HK + KH - 1) / KH;
  const int bz = 1;
  auto k = pipelined_kernel<KH, MB, kGSource, kGTokens, kPos, kLane, kTail, kBound256>;
  int per_sm = 0;
  const int64_t grid = persistent_grid(reinterpret_cast<const void*>(k), bx * by * bz, T, &per_sm);
  RopeKernelArgs args = make_args(b, T);
  if (kPos != 0) {
    args.pos = b.pos;
    args.pos_i64 = true;
    args.pos_sb = 0;
    args.pos_ss = 1;
  }
  const Measured m = measure(k, dim3(grid), dim3(bx, by, bz), args, b, T, ref);
  printf(
      "pipelined KH=%d MB=%d source=%d tokens=%d pos=%d lane=%d tail=%d bound256=%d T=%6ld "
      "regs=%3d block=%dx%dx%d grid=%ld (%d/SM)  %8.2f us  %6.0f GB/s  %5.1f%% copy  %s\n",
      KH, MB, (int)kGSource, (int)kGTokens, kPos, (int)kLane, (int)kTail, (int)kBound256, (long)T,
      m.regs, bx, by, bz, (long)grid, per_sm, m.us, bytes / m.us / 1e3,
      100 * bytes / m.us / 1e3 / copy, m.diff == 0 ? "same" : "DIFF");
}
// Software-pipelined QK-norm + RoPE (experiment): the specialised pipelined RoPE kernel above
// (flat tokens, p = t, table source, every lane a pair vector, no pass-through) with the pair
// kernel's per-head norm (qk_pair_head) before the rotation. (Holding the weight factors in
// registers instead, a variant since removed, ran slower: 465.5 / 493.4 us against 446.4 at
// T = 65536, bench/results/rope-launch-shapes-16f10cf-nvidia-h200.log.)
template <int MB>
__global__ void __launch_bounds__(kPipelinedThreads<2>, MB)
    qk_pipelined_kernel(const QkNormRopeArgs args) {
  constexpr int V = 8, KH = 2;
  const RopeKernelArgs& a = args.rope;
  const int heads = a.hq + a.hk;
  const int h0 = threadIdx.y * KH;
  const int i0 = threadIdx.x * V;
  const int oa = i0, ob = a.half + i0;
  const int g = blockDim.x;
  const int tid = threadIdx.x + blockDim.x * threadIdx.y;
  const int lane_id = tid & 31;
  const unsigned mask = ((1u << g) - 1u) << (lane_id & ~(g - 1));
  const int64_t step = gridDim.x;
  int64_t t = blockIdx.x;
  griddep_wait();
  if (t >= a.tokens) return;
  RopeHeadRegs<bf16, V> cur[KH], nxt[KH];
  float cc[V], cs[V], nc[V], ns[V];
  auto load = [&](const RopeTokenPtrs<bf16>& tp, int64_t tt, RopeHeadRegs<bf16, V>(&r)[KH],
                  float(&c)[V], float(&sn)[V]) {
    rope_load_heads<bf16, V, KH>(a, tp, h0, heads, oa, ob, r);
    rope_cos_sin_loaded<V>(a, tt, 0, tt, i0, c, sn);
  };
  RopeTokenPtrs<bf16> tp = rope_token_ptrs<bf16>(a, 0, t);
  load(tp, t, cur, cc, cs);
  while (true) {
    const int64_t tn = t + step;
    const bool more = tn < a.tokens;
    RopeTokenPtrs<bf16> tpn = tp;
    if (more) {
      tpn = rope_token_ptrs<bf16>(a, 0, tn);
      load(tpn, tn, nxt, nc, ns);
    }
#pragma unroll
    for (int u = 0; u < KH; ++u) {
      const int hh = h0 + u;
      if (hh < heads)
        qk_pair_head<bf16, V, false>(args, tp, t, hh, oa, ob, cur[u], cc, cs, mask, g);
    }
    if (!more) break;
    t = tn;
    tp = tpn;
    next_round<KH, V>(cur, nxt, cc, cs, nc, ns);
  }
}
template <int MB>
void qk_pipelined_variant(const Bufs& b, int64_t T, std::vector<uint16_t>& ref, double bytes,
                          double copy) {
  const int bx = 8, by = (HQ + HK) / 2;
  auto k = qk_pipelined_kernel<MB>;
  int per_sm = 0;
  const int64_t grid = persistent_grid(reinterpret_cast<const void*>(k), bx * by, T, &per_sm);
  const Measured m = measure(k, dim3(grid), dim3(bx, by), make_qk_args(b, T), b, T, ref);
  printf(
      "qkpipe MB=%d T=%6ld regs=%3d block=%dx%d grid=%ld (%d/SM)  %8.2f us  %6.0f GB/s  "
      "%5.1f%% copy  %s\n",
      MB, (long)T, m.regs, bx, by, (long)grid, per_sm, m.us, bytes / m.us / 1e3,
      100 * bytes / m.us / 1e3 / copy, m.diff == 0 ? "same" : "DIFF");
}
int main() {
  const int64_t TM = 65536;
  Bufs b;
  CK(cudaMalloc(&b.q, TM * HQ * D * 2));
  CK(cudaMalloc(&b.k, TM * HK * D * 2));
  CK(cudaMalloc(&b.qo, TM * HQ * D * 2));
  CK(cudaMalloc(&b.ko, TM * HK * D * 2));
  CK(cudaMalloc(&b.cache, TM * D * 4));
  CK(cudaMalloc(&b.wq, D * 2));
  CK(cudaMalloc(&b.wk, D * 2));
  CK(cudaMalloc(&b.pos, TM * sizeof(int64_t)));
  {
    std::vector<int64_t> pv(TM);
    for (int64_t t = 0; t < TM; ++t) pv[t] = t;
    CK(cudaMemcpy(b.pos, pv.data(), TM * sizeof(int64_t), cudaMemcpyHostToDevice));
    std::vector<uint16_t> h(TM * HQ * D);
    for (size_t i = 0; i < h.size(); ++i) h[i] = 0x3f80 + (i * 2654435761u >> 20) % 256 - 128;
    CK(cudaMemcpy(b.q, h.data(), TM * HQ * D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.k, h.data(), TM * HK * D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.wq, h.data(), D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.wk, h.data() + 7, D * 2, cudaMemcpyHostToDevice));
    std::vector<float> c(TM * D);
    for (int64_t p = 0; p < TM; ++p)
      for (int i = 0; i < D / 2; ++i) {
        double ang = p * pow(10000.0, -2.0 * i / D);
        c[p * D + i] = cos(ang);
        c[p * D + D / 2 + i] = sin(ang);
      }
    CK(cudaMemcpy(b.cache, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
  }
  const double copy = copy_bandwidth_gbps(671088640);
  printf("copy %.0f GB/s\n", copy);
  for (int64_t T : {65536L, 16384L, 1024L, 64L, 1L}) {
    double bytes = 2.0 * T * (HQ + HK) * D * 2;
    if (T >= 16384) {
      pattern_variant<2, 0>(b, T, bytes, copy);
      pattern_variant<2, 1>(b, T, bytes, copy);
    }
    std::vector<uint16_t> ref, qref;
    rope_variant<2, 3>(b, T, ref, bytes, copy);
    rope_variant<2, 4>(b, T, ref, bytes, copy);
    rope_variant<2, 3, false>(b, T, ref, bytes, copy);
    if (T >= 1024) {
      pipelined_variant<2, 2>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, false, true>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, false, false, 1>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, false, false, 2>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, false, false, 0, true>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, false, false, 0, false, true>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, true, false, 2, false, false, true>(b, T, ref, bytes, copy);
      pipelined_variant<2, 2, true, false, 2, true, true, true>(b, T, ref, bytes, copy);
      // One head per thread row (fewer live registers per token, 320-thread blocks).
      pipelined_variant<1, 2>(b, T, ref, bytes, copy);
      pipelined_variant<1, 2, true, false, 2, true, true, false>(b, T, ref, bytes, copy);
    }
    qk_variant<1, 4>(b, T, qref, bytes, copy);
    qk_pair_variant<3>(b, T, qref, bytes, copy);
    qk_pair_variant<4>(b, T, qref, bytes, copy);
    if (T >= 1024) {
      qk_pipelined_variant<2>(b, T, qref, bytes, copy);
    }
  }
  printf("done\n");
}
