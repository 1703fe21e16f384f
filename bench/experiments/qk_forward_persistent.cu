// QK-norm + RoPE forward on a persistent grid (H200): does the lean backward's form (a block of
// 8 lanes x 40 heads looping over a contiguous run of tokens, the next token's position loaded
// with the current token's data) also beat the library's lean forward (one block per token,
// each block's cos/sin loads waiting for its position) on long runs?
// bf16 q [T, 32, 128], k [T, 8, 128], bf16 weights, f32 cache of T rows, random int64
// positions, neox, rstd saved; the library's arguments (cuda::fill_qk_norm_rope_args).
// Ownership of the experiment kernel (grid of B blocks, block (8, 40)):
//  - Tokens: block b owns the contiguous tokens [b C, min(T, (b + 1) C)), C = ceil(T / B), one
//    per round; with kPrefetch each thread loads token t + 1's position with token t's data.
//  - Head: thread row y owns head y of every token (q heads 0 .. 31, then k heads); lane x owns
//    channels 8x .. 8x + 7 and 64 + 8x .. 64 + 8x + 7 (its 8 rotary pairs). The lane's 16
//    weights stay in registers for the whole run.
//  - Per head vector the library's qk_pair_head (the lean kernel's arithmetic in its order, lane
//    0 storing r), so q_out, k_out and the rstd should be the library's bits; the program counts
//    the elements that differ.
// Cold-L2 CUDA-event medians at T = 4096, 16384 and 65536: the library's qk_norm_rope against the
// experiment kernel at 2 blocks per multiprocessor without and with the prefetch, and at 3
// blocks with it. At 3653989 (bench/results/qk-forward-persistent-3653989-nvidia-h200.log) the
// first ran T = 65536 in 405.1 us against the lean kernel's 466.8, with the same bits, and the
// prefetch did not matter, so the library has that form (core::QkKernel::kLeanRun) and the
// "library" column is that kernel from then on. Later variants: the next token's data and cos/sin
// in a second set of registers (pipelined_qk_kernel), a per-thread cp.async ring in shared memory
// (ring_qk_kernel: 2 or 3 stages with the cos/sin chunks, or 4 / 6 of data only), and, for gptj,
// the library's lean run with its data copies through L2 only or through L1 against the lean
// kernel per token. At dd57912 (qk-forward-persistent-ring-dd57912-*) the 2-stage ring with
// cos/sin ran T = 65536 in 367.5 us against 410.5, so the library's lean run has it from 423ca5e
// on; at 89e11e8 (qk-forward-persistent-89e11e8-*) gptj ran 375.5 us through L1 and 486.3
// through L2 only. After that run the experiment kernels' shared setup and per-head call moved
// into ExpThread (the same register counts per kernel). Then, with the library at 58e3061: the
// cos/sin row shared by a warp (warp_cs_ring_kernel: one cp.async per thread instead of four)
// ran no faster (366.1 against 364.4 us for ring 2 + cos/sin at T = 65536:
// qk-forward-persistent-warp-cs-58e3061-*), so the instructions are not what limits; the same
// kernel with each block's tokens interleaved over the grid (bx, bx + G, ...) instead of a
// contiguous run ran 346.2 against 367.5 (qk-forward-persistent-interleave-58e3061-*), so the
// library's lean runs interleave from the next commit on. At 1435871 the library's lean run with
// the butterfly on the full warp mask (kFullWarps: 9 fewer instructions per round in the SASS,
// no convergence check) joins the variants; from the next commit on, the flat walk (every
// address one wide multiply-add of the 32-bit token index) alone and with the full mask, the
// library's instance for this call (LeanFlatI64). Added after 1ae3ff4, not yet run: that
// instance also on the largest grid that divides T (256 blocks at T = 65536 instead of 264,
// whose last round only 64 blocks run). At 87cc491 (qk-forward-persistent-short-87cc491-*, run
// lengths 1024, 1536 and 2048) the library's lean-run instance beat the library's call on the
// lean kernel at 1024 (10.56 against 11.33 us) and 1536 (13.25 against 14.85; gptj, whose lean
// run here is the general walk's LeanRowsI64, 11.52 / 14.69 against 11.65 / 15.84), so the lean
// run serves from 1024 tokens from 00f71de on. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/qk_forward_persistent.cu build/libropenorm.a -o qk_forward_persistent
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "core/qk_norm_rope_validate.h"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope_cache.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kV = 8, kLanes = kD / 2 / kV, kHq = 32, kHk = 8;
constexpr int kHeads = kHq + kHk, kThreads = kLanes * kHeads;

// What thread (x, y) of an experiment block (neox, D = 128, one head group) owns: its lane group's
// mask, head y (q first), pair vector x (channels oa and ob), its 16 weights, and the block's run
// of tokens [t0, t_end) of C = tokens_per_block; built after the wait for the previous kernel.
struct ExpThread {
  unsigned mask;
  int hh;
  bool is_q;
  int head, i0, oa, ob;
  const int64_t* pos;
  int64_t t0, t_end;
  float w0[kV], w1[kV];
  __device__ ExpThread(const QkNormRopeArgs& args, int64_t tokens_per_block) {
    const RopeKernelArgs& a = args.rope;
    const int lane = (threadIdx.y * kLanes + threadIdx.x) & 31;
    mask = ((1u << kLanes) - 1u) << (lane & ~(kLanes - 1));
    hh = threadIdx.y;
    is_q = hh < a.hq;
    head = is_q ? hh : hh - a.hq;
    i0 = static_cast<int>(threadIdx.x) * kV;
    oa = i0;
    ob = kD / 2 + i0;
    pos = static_cast<const int64_t*>(a.pos);
    griddep_wait();
    qk_head_weights<kV, bf16>(args, hh, oa, ob, w0, w1);
    t0 = static_cast<int64_t>(blockIdx.x) * tokens_per_block;
    t_end = t0 + tokens_per_block < a.tokens ? t0 + tokens_per_block : a.tokens;
  }
  /// qk_pair_head (the library's arithmetic and order) on token t's head with these weights.
  __device__ __forceinline__ void norm_rope(const QkNormRopeArgs& args, bf16* y, int64_t t,
                                            const RopeHeadRegs<bf16, kV>& regs,
                                            const float (&c)[kV], const float (&sn)[kV]) const {
    qk_pair_head<bf16, kV, false, kD>(
        args, [&] { return y; }, [&](float r) { qk_store_rstd(args, t, hh, r); }, oa, ob, regs, c,
        sn, mask, kLanes,
        [&](float(&f0)[kV], float(&f1)[kV]) {
#pragma unroll
          for (int i = 0; i < kV; ++i) {
            f0[i] = w0[i];
            f1[i] = w1[i];
          }
        });
  }
};

template <int kMinBlocks, bool kPrefetch>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    persistent_qk_kernel(const QkNormRopeArgs args, int64_t tokens_per_block) {
  const RopeKernelArgs& a = args.rope;
  const ExpThread th(args, tokens_per_block);
  const int hh = th.hh, head = th.head, i0 = th.i0, oa = th.oa, ob = th.ob;
  const int64_t *pos = th.pos, t0 = th.t0, t_end = th.t_end;
  int64_t p_next = kPrefetch && t0 < t_end ? pos[t0] : 0;
  for (int64_t t = t0; t < t_end; ++t) {
    const bf16* x = rope_head_ptr<bf16>(th.is_q ? a.q : a.k, 0, t, head);
    bf16* y = const_cast<bf16*>(rope_head_ptr<bf16>(th.is_q ? a.q_out : a.k_out, 0, t, head));
    RopeHeadRegs<bf16, kV> regs;
    load_raw<bf16, kV>(x + oa, regs.x0);
    load_raw<bf16, kV>(x + ob, regs.x1);
    const int64_t p = kPrefetch ? p_next : pos[t];
    float c[kV], sn[kV];
    load_pack<float, kV>(static_cast<const float*>(a.cos) + p * a.cos_row + i0, c);
    load_pack<float, kV>(static_cast<const float*>(a.sin) + p * a.sin_row + i0, sn);
    if (kPrefetch && t + 1 < t_end) p_next = pos[t + 1];
    th.norm_rope(args, y, t, regs, c, sn);
  }
}

// Token t + 1's data and cos/sin loaded into a second set of registers before token t is
// normalised and rotated (the position two tokens ahead), so a thread has two tokens' loads in
// flight; library instance facts (LeanRowsI64<8>).
template <int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    pipelined_qk_kernel(const QkNormRopeArgs args, int64_t tokens_per_block) {
  using Spec = LeanRowsI64<kLanes>;
  const RopeKernelArgs& a = args.rope;
  const ExpThread th(args, tokens_per_block);
  const int hh = th.hh, head = th.head, i0 = th.i0, oa = th.oa, ob = th.ob;
  const int64_t *pos = th.pos, t0 = th.t0, t_end = th.t_end;
  if (t0 >= t_end) return;
  struct Stage {
    RopeHeadRegs<bf16, kV> regs;
    float c[kV], sn[kV];
  };
  auto load = [&](int64_t t, int64_t p, Stage& st) {
    const bf16* x = rope_head_ptr<bf16>(th.is_q ? a.q : a.k, 0, t, head);
    load_raw<bf16, kV>(x + oa, st.regs.x0);
    load_raw<bf16, kV>(x + ob, st.regs.x1);
    rope_lean_cos_sin<float, kV, Spec>(a, p, 0, t, i0, st.c, st.sn);
  };
  Stage cur;
  load(t0, pos[t0], cur);
  int64_t p1 = t0 + 1 < t_end ? pos[t0 + 1] : 0;
  for (int64_t t = t0; t < t_end; ++t) {
    Stage nxt;
    int64_t p2 = 0;
    if (t + 1 < t_end) {
      load(t + 1, p1, nxt);
      if (t + 2 < t_end) p2 = pos[t + 2];
    }
    bf16* y = const_cast<bf16*>(rope_head_ptr<bf16>(th.is_q ? a.q_out : a.k_out, 0, t, head));
    th.norm_rope(args, y, t, cur.regs, cur.c, cur.sn);
    cur = nxt;
    p1 = p2;
  }
}

// A cp.async ring in shared memory: each thread copies the tokens kStages - 1 ahead of the one
// it computes into its own 16-byte slots ([stage][chunk][thread], conflict-free), waits for its
// own oldest group and reads it back (no block barrier). kCosSin: the cos/sin chunks go
// through the ring too (through L1: the block's 40 head rows read the same row); else they are
// loaded into registers one token ahead. The position is loaded one round before it is needed.
template <int kStages, bool kCosSin>
__global__ void __launch_bounds__(kThreads, 2)
    ring_qk_kernel(const QkNormRopeArgs args, int64_t tokens_per_block) {
  using Spec = LeanRowsI64<kLanes>;
  constexpr int kDataChunks = 2 * kV * 2 / 16;              // 2 vectors of 8 bf16
  constexpr int kCsChunks = kCosSin ? 2 * kV * 4 / 16 : 0;  // cos, sin: 8 floats each
  constexpr int kChunks = kDataChunks + kCsChunks;
  extern __shared__ uint4 ring[];  // [kStages][kChunks][kThreads]
  const RopeKernelArgs& a = args.rope;
  const int tid = threadIdx.y * kLanes + threadIdx.x;
  const ExpThread th(args, tokens_per_block);
  const int hh = th.hh, head = th.head, i0 = th.i0, oa = th.oa, ob = th.ob;
  const int64_t *pos = th.pos, t0 = th.t0, t_end = th.t_end;
  if (t0 >= t_end) return;
  auto slot = [&](int stage, int chunk) {
    return &ring[(stage * kChunks + chunk) * kThreads + tid];
  };
  auto issue = [&](int64_t t, int64_t p, int stage) {
    const bf16* x = rope_head_ptr<bf16>(th.is_q ? a.q : a.k, 0, t, head);
    cp_async_16(slot(stage, 0), x + oa);
    cp_async_16(slot(stage, 1), x + ob);
    if constexpr (kCosSin) {
      const float* c = static_cast<const float*>(a.cos) + p * a.cos_row + i0;
      const float* sn = static_cast<const float*>(a.sin) + p * a.sin_row + i0;
      cp_async_16_cached(slot(stage, 2), c);
      cp_async_16_cached(slot(stage, 3), c + 4);
      cp_async_16_cached(slot(stage, 4), sn);
      cp_async_16_cached(slot(stage, 5), sn + 4);
    }
  };
  // Prologue: tokens t0 .. t0 + kStages - 2 in flight; p_ahead is token t0 + kStages - 1's.
  int64_t p_ahead = 0;
  for (int k = 0; k < kStages - 1; ++k) {
    if (t0 + k < t_end) issue(t0 + k, kCosSin ? pos[t0 + k] : 0, k);
    cp_async_commit();
  }
  if (kCosSin && t0 + kStages - 1 < t_end) p_ahead = pos[t0 + kStages - 1];
  float cn[kV], sn_n[kV];
  if constexpr (!kCosSin) rope_lean_cos_sin<float, kV, Spec>(a, pos[t0], 0, t0, i0, cn, sn_n);
  for (int64_t t = t0; t < t_end; ++t) {
    const int stage = static_cast<int>((t - t0) % kStages);
    const int64_t ta = t + kStages - 1;
    if (ta < t_end) issue(ta, p_ahead, static_cast<int>((ta - t0) % kStages));
    cp_async_commit();
    if (kCosSin && ta + 1 < t_end) p_ahead = pos[ta + 1];
    float c[kV], sn[kV];
    if constexpr (kCosSin) {
      cp_async_wait<kStages - 1>();
      const float4 c0 = *reinterpret_cast<const float4*>(slot(stage, 2));
      const float4 c1 = *reinterpret_cast<const float4*>(slot(stage, 3));
      const float4 s0 = *reinterpret_cast<const float4*>(slot(stage, 4));
      const float4 s1 = *reinterpret_cast<const float4*>(slot(stage, 5));
      c[0] = c0.x;
      c[1] = c0.y;
      c[2] = c0.z;
      c[3] = c0.w;
      c[4] = c1.x;
      c[5] = c1.y;
      c[6] = c1.z;
      c[7] = c1.w;
      sn[0] = s0.x;
      sn[1] = s0.y;
      sn[2] = s0.z;
      sn[3] = s0.w;
      sn[4] = s1.x;
      sn[5] = s1.y;
      sn[6] = s1.z;
      sn[7] = s1.w;
    } else {
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        c[i] = cn[i];
        sn[i] = sn_n[i];
      }
      if (t + 1 < t_end) rope_lean_cos_sin<float, kV, Spec>(a, pos[t + 1], 0, t + 1, i0, cn, sn_n);
      cp_async_wait<kStages - 1>();
    }
    RopeHeadRegs<bf16, kV> regs;
    load_raw<bf16, kV>(reinterpret_cast<const bf16*>(slot(stage, 0)), regs.x0);
    load_raw<bf16, kV>(reinterpret_cast<const bf16*>(slot(stage, 1)), regs.x1);
    bf16* y = const_cast<bf16*>(rope_head_ptr<bf16>(th.is_q ? a.q_out : a.k_out, 0, t, head));
    th.norm_rope(args, y, t, regs, c, sn);
  }
}

// The ring with the cos/sin row shared by a warp: per stage each thread's two data chunks
// ([stage][chunk][thread]) and, per warp, the token's 32 cos/sin chunks (cos 0 .. 15, sin
// 16 .. 31), lane l fetching chunk l, stored so that lane x's two chunks of a half are slots
// x and 8 + x (the warp's 4 head rows read them as broadcasts). A __syncwarp before each fetch
// (every lane done reading the stage it overwrites) and one after the wait (the other lanes'
// copies visible); no block barrier.
// kInterleave: block b owns tokens b, b + G, b + 2G, ... (G = gridDim.x) instead of a
// contiguous run, so the grid's blocks read neighbouring tokens in each round (as a grid-stride
// copy does).
template <int kStages, bool kInterleave = false>
__global__ void __launch_bounds__(kThreads, 2)
    warp_cs_ring_kernel(const QkNormRopeArgs args, int64_t tokens_per_block) {
  static_assert(kThreads % 32 == 0 && kLanes == 8, "whole warps of 4 head rows");
  extern __shared__ uint4 ring[];  // [kStages][2 data chunks x kThreads + 32 x warps]
  const RopeKernelArgs& a = args.rope;
  const int tid = threadIdx.y * kLanes + threadIdx.x;
  const int l = tid & 31;
  const ExpThread th(args, tokens_per_block);
  const int head = th.head, oa = th.oa, ob = th.ob;
  const int64_t *pos = th.pos, t0 = th.t0, t_end = th.t_end;
  if (!kInterleave && t0 >= t_end) return;
  constexpr int kStage = 3 * kThreads;
  auto data_slot = [&](int stage, int chunk) {
    return &ring[stage * kStage + chunk * kThreads + tid];
  };
  uint4* cs_warp = ring + 2 * kThreads + (tid & ~31);
  const int within = l & 15;
  const int src_off = 8 * (within & 7) + 4 * (within >> 3);
  const float* cs_src = static_cast<const float*>(l < 16 ? a.cos : a.sin) + src_off;
  const int64_t cs_row = l < 16 ? a.cos_row : a.sin_row;
  auto issue = [&](int64_t t, int64_t p, int stage) {
    const bf16* x = rope_head_ptr<bf16>(th.is_q ? a.q : a.k, 0, t, head);
    cp_async_16(data_slot(stage, 0), x + oa);
    cp_async_16(data_slot(stage, 1), x + ob);
    cp_async_16_cached(cs_warp + stage * kStage + l, cs_src + p * cs_row);
  };
  const int64_t step = kInterleave ? gridDim.x : 1;
  const int64_t first = kInterleave ? blockIdx.x : t0;
  const int64_t n = kInterleave ? (a.tokens - first + step - 1) / step : t_end - t0;
  auto token = [&](int64_t j) { return first + j * step; };
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < n) issue(token(k), pos[token(k)], k);
    cp_async_commit();
  }
  int64_t p_ahead = kStages - 1 < n ? pos[token(kStages - 1)] : 0;
  int stage = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t t = token(j), ja = j + kStages - 1;
    const int ahead = stage == 0 ? kStages - 1 : stage - 1;
    __syncwarp();
    if (ja < n) issue(token(ja), p_ahead, ahead);
    cp_async_commit();
    if (ja + 1 < n) p_ahead = pos[token(ja + 1)];
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint4* cs = cs_warp + stage * kStage;
    const int x = threadIdx.x;
    const float4 c0 = *reinterpret_cast<const float4*>(cs + x);
    const float4 c1 = *reinterpret_cast<const float4*>(cs + 8 + x);
    const float4 s0 = *reinterpret_cast<const float4*>(cs + 16 + x);
    const float4 s1 = *reinterpret_cast<const float4*>(cs + 24 + x);
    const float c[kV] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float sn[kV] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    RopeHeadRegs<bf16, kV> regs;
    load_raw<bf16, kV>(reinterpret_cast<const bf16*>(data_slot(stage, 0)), regs.x0);
    load_raw<bf16, kV>(reinterpret_cast<const bf16*>(data_slot(stage, 1)), regs.x1);
    bf16* y = const_cast<bf16*>(rope_head_ptr<bf16>(th.is_q ? a.q_out : a.k_out, 0, t, head));
    th.norm_rope(args, y, t, regs, c, sn);
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
}

template <int kStages>
constexpr int warp_cs_ring_bytes() {
  return kStages * 3 * 16 * kThreads;
}

template <int kStages, bool kCosSin>
constexpr int ring_bytes() {
  return kStages * (2 + (kCosSin ? 4 : 0)) * 16 * kThreads;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_t = 65536;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261204);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *yq = device_bf16({}, qn), *yk = device_bf16({}, kn), *yq2 = device_bf16({}, qn),
       *yk2 = device_bf16({}, kn);
  const DeviceCosSin csd = device_cos_sin(rng, max_t, kD, max_t);
  float *rq, *rk, *rq2, *rk2;
  CK(cudaMalloc(&rq, max_t * kHq * 4));
  CK(cudaMalloc(&rk, max_t * kHk * 4));
  CK(cudaMalloc(&rq2, max_t * kHq * 4));
  CK(cudaMalloc(&rk2, max_t * kHk * 4));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf(
      "registers: 2 blocks %d, 2 blocks prefetch %d, 3 blocks prefetch %d, pipelined %d, ring 2 "
      "%d, ring 3 %d, ring 4 data %d, ring 6 data %d\n",
      regs_of(reinterpret_cast<const void*>(persistent_qk_kernel<2, false>)),
      regs_of(reinterpret_cast<const void*>(persistent_qk_kernel<2, true>)),
      regs_of(reinterpret_cast<const void*>(persistent_qk_kernel<3, true>)),
      regs_of(reinterpret_cast<const void*>(pipelined_qk_kernel<2>)),
      regs_of(reinterpret_cast<const void*>(ring_qk_kernel<2, true>)),
      regs_of(reinterpret_cast<const void*>(ring_qk_kernel<3, true>)),
      regs_of(reinterpret_cast<const void*>(ring_qk_kernel<4, false>)),
      regs_of(reinterpret_cast<const void*>(ring_qk_kernel<6, false>)));
  std::printf("registers: warp cos/sin ring 2 %d, 3 %d, 4 %d\n",
              regs_of(reinterpret_cast<const void*>(warp_cs_ring_kernel<2>)),
              regs_of(reinterpret_cast<const void*>(warp_cs_ring_kernel<3>)),
              regs_of(reinterpret_cast<const void*>(warp_cs_ring_kernel<4>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  const Device d0 = Device::cuda(0);
  std::vector<int64_t> runs = {4096, 16384, 65536};
  if (argc > 1) runs = {std::atoll(argv[1])};  // one run length (for a profiler)
  for (const bool gptj : {false, true}) {
    for (int64_t t : runs) {
      auto view = [&](void* p, int64_t heads) {
        return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, kD}, d0);
      };
      const TensorRef twq = TensorRef::contiguous(w, DType::kBFloat16, {kD}, d0);
      const TensorRef twk = TensorRef::contiguous(w + kD, DType::kBFloat16, {kD}, d0);
      auto rstd = [&](float* p, int64_t heads) {
        return TensorRef::contiguous(p, DType::kFloat32, {t, heads}, d0);
      };
      const RopePositions rp = positions_of(csd, t);
      const RopeCosSin cs = cache_of(csd, max_t, kD);
      RopeParams prm;
      prm.style = gptj ? RopeStyle::kGptj : RopeStyle::kNeox;
      QkNormParams np;
      auto lib = [&] {
        check(qk_norm_rope(view(q, kHq), view(k, kHk), twq, twk, view(yq, kHq), view(yk, kHk),
                           rstd(rq, kHq), rstd(rk, kHk), rp, cs, prm, np, nullptr),
              "library");
      };
      // The library's arguments for the same call, writing the second outputs.
      const QkNormRopeArgs qa = qk_norm_rope_args_of(
          core::qk_norm_rope_call(view(q, kHq), view(k, kHk), twq, twk, view(yq2, kHq),
                                  view(yk2, kHk), rstd(rq2, kHq), rstd(rk2, kHk), rp, cs, prm, np));
      auto persistent = [&](auto kernel, int blocks_per_sm) {
        return [&, kernel, blocks_per_sm] {
          const int64_t grid = std::min<int64_t>(t, int64_t{sms} * blocks_per_sm);
          CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads), 0,
                             nullptr, qa, (t + grid - 1) / grid));
        };
      };
      const auto v2 = persistent(persistent_qk_kernel<2, false>, 2);
      const auto v2p = persistent(persistent_qk_kernel<2, true>, 2);
      const auto v3p = persistent(persistent_qk_kernel<3, true>, 3);
      // The library's lean-run kernel in its two instances, on the library's arguments.
      const auto run_smem = static_cast<size_t>(core::rope_lean_run_ring_bytes(2, 4, kThreads));
      const int64_t run_grid = std::min<int64_t>(t, int64_t{sms} * core::kQkLeanRunMinBlocks);
      auto library_run = [&](auto kernel, int stages = core::kRopeLeanRunStages, int64_t grid = 0) {
        const size_t smem = run_smem / core::kRopeLeanRunStages * static_cast<size_t>(stages);
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)));
        if (grid == 0) grid = run_grid;
        return [&, kernel, smem, grid] {
          CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads), smem,
                             nullptr, qa));
        };
      };
      const auto r_lanes =
          library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanLanes<8>>);
      const auto r_i64 =
          library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanRowsI64<8>>);
      const auto pipe = persistent(pipelined_qk_kernel<2>, 2);
      auto ring = [&](auto kernel, int bytes) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        return [&, kernel, bytes] {
          const int64_t grid = std::min<int64_t>(t, int64_t{sms} * 2);
          CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads),
                             static_cast<size_t>(bytes), nullptr, qa, (t + grid - 1) / grid));
        };
      };
      const auto ring2 = ring(ring_qk_kernel<2, true>, ring_bytes<2, true>());
      const auto ring3 = ring(ring_qk_kernel<3, true>, ring_bytes<3, true>());
      const auto ring4d = ring(ring_qk_kernel<4, false>, ring_bytes<4, false>());
      const auto ring6d = ring(ring_qk_kernel<6, false>, ring_bytes<6, false>());
      const auto wcs2 = ring(warp_cs_ring_kernel<2>, warp_cs_ring_bytes<2>());
      const auto wcs3 = ring(warp_cs_ring_kernel<3>, warp_cs_ring_bytes<3>());
      const auto wcs4 = ring(warp_cs_ring_kernel<4>, warp_cs_ring_bytes<4>());
      const auto wcs2i = ring(warp_cs_ring_kernel<2, true>, warp_cs_ring_bytes<2>());
      const auto wcs3i = ring(warp_cs_ring_kernel<3, true>, warp_cs_ring_bytes<3>());
      const auto wcs4i = ring(warp_cs_ring_kernel<4, true>, warp_cs_ring_bytes<4>());
      const size_t nq = t * kHq * kD, nk = t * kHk * kD;
      CK(cudaMemset(yq, 0xff, qn * 2));
      CK(cudaMemset(yk, 0xff, kn * 2));
      lib();
      CK(cudaDeviceSynchronize());
      const auto ref_q = to_host16(yq, nq), ref_k = to_host16(yk, nk);
      const auto ref_rq = to_host32(rq, t * kHq), ref_rk = to_host32(rk, t * kHk);
      const auto r_i64_l1 =
          library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanRowsI64<8>, true>);
      const auto r_i64_3 = library_run(
          qk_norm_rope_lean_run_kernel<bf16, float, false, LeanRowsI64<8>, false, 3>, 3);
      const auto lean_per_token = [&] {
        CK(launch_with_pdl(qk_norm_rope_lean_kernel<bf16, float, false, LeanLanesWeights<8>>,
                           dim3(static_cast<unsigned>(t)), dim3(kLanes, kHeads), 0, nullptr, qa));
      };
      using FullOnly =
          LeanSpec<8, LeanPositions::kInt64, true, false, core::kRopeLeanMaxThreads, false, true>;
      using FlatOnly =
          LeanSpec<8, LeanPositions::kInt64, true, false, core::kRopeLeanMaxThreads, true, false>;
      const auto r_i64_full =
          library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, FullOnly>);
      const auto r_flat = library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, FlatOnly>);
      const auto r_flat_full =
          library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanFlatI64<8>>);
      const auto r_flat_even =
          library_run(qk_norm_rope_lean_run_kernel<bf16, float, false, LeanFlatI64<8>>,
                      core::kRopeLeanRunStages, dividing_grid(t, run_grid));
      std::vector<std::function<void()>> vs = {r_i64,       r_i64_full,  r_flat,
                                               r_flat_full, r_flat_even, r_i64_3,
                                               wcs2i,       wcs3i,       lean_per_token};
      std::vector<const char*> names = {"run i64 rows",
                                        "run i64 rows full mask",
                                        "run flat i64",
                                        "run flat i64 full mask",
                                        "the same on the grid dividing T",
                                        "run i64 rows 3 stages",
                                        "interleaved ring 2",
                                        "interleaved ring 3",
                                        "lean per token"};
      (void)v2, (void)v2p, (void)v3p, (void)r_lanes, (void)r_i64_l1, (void)pipe, (void)ring2,
          (void)ring3, (void)ring4d, (void)ring6d, (void)wcs2, (void)wcs3, (void)wcs4, (void)wcs4i;
      if (gptj) {  // the library's gptj kernels only (the experiment kernels are neox)
        const auto g_l2 =
            library_run(qk_norm_rope_lean_run_kernel<bf16, float, true, LeanRowsI64<8>, false>);
        const auto g_l1 =
            library_run(qk_norm_rope_lean_run_kernel<bf16, float, true, LeanRowsI64<8>, true>);
        const auto g_lean = [&] {
          CK(launch_with_pdl(qk_norm_rope_lean_kernel<bf16, float, true, LeanLanesWeights<8>>,
                             dim3(static_cast<unsigned>(t)), dim3(kLanes, kHeads), 0, nullptr, qa));
        };
        const auto g_l1_3 = library_run(
            qk_norm_rope_lean_run_kernel<bf16, float, true, LeanRowsI64<8>, true, 3>, 3);
        vs = {g_l1, g_l1_3, g_lean};
        names = {"gptj run data via L1", "gptj run via L1 3 stages", "gptj lean per token"};
        (void)g_l2;
      }
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        const auto* v = &vs[vi];
        CK(cudaMemset(yq2, 0xff, qn * 2));
        CK(cudaMemset(yk2, 0xff, kn * 2));
        CK(cudaMemset(rq2, 0xff, max_t * kHq * 4));
        CK(cudaMemset(rk2, 0xff, max_t * kHk * 4));
        (*v)();
        CK(cudaDeviceSynchronize());
        const auto eq = to_host16(yq2, nq), ek = to_host16(yk2, nk);
        const auto erq = to_host32(rq2, t * kHq), erk = to_host32(rk2, t * kHk);
        size_t differ = 0, r_differ = 0;
        for (size_t i = 0; i < nq; ++i) differ += eq[i] != ref_q[i];
        for (size_t i = 0; i < nk; ++i) differ += ek[i] != ref_k[i];
        for (size_t i = 0; i < erq.size(); ++i) r_differ += erq[i] != ref_rq[i];
        for (size_t i = 0; i < erk.size(); ++i) r_differ += erk[i] != ref_rk[i];
        std::printf("  %s T=%5lld check %-20s: %zu q/k elements differ, %zu rstd values differ\n",
                    gptj ? "gptj" : "neox", static_cast<long long>(t), names[vi], differ, r_differ);
      }
      const double bytes = 2.0 * static_cast<double>(nq + nk) * 2 +
                           static_cast<double>(t) * (kHeads * 4 + 8 + kD * 4);
      const float t_lib = time_med(lib, true);
      std::printf("%s T=%5lld cold: library %8.2f us (%6.0f GB/s)", gptj ? "gptj" : "neox",
                  static_cast<long long>(t), t_lib, bytes / t_lib / 1e3);
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        std::printf(" | %s %.2f", names[vi], time_med(vs[vi], true));
      }
      std::printf(" us\n");
    }
  }
  return 0;
}
