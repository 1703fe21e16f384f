// Lean runs in a dynamic token order (H200): would the RoPE and QK-norm + RoPE lean runs finish
// sooner if blocks took their next token from a counter instead of the static interleave
// bx, bx + G, ...? At 8ebfa03 the busiest multiprocessor finished 3.7 us (QK-norm + RoPE) and
// 5.5 us (RoPE) after the average one at T = 65536 (docs/performance.md, the multiprocessors'
// balance): equal shares, unequal speeds.
// bf16 q [T, 32, 128], k [T, 8, 128], f32 cache of T rows, random int64 positions, neox; QK-norm
// + RoPE with bf16 weights and the rstd saved; the library's arguments (cuda::fill_rope_args,
// cuda::fill_qk_norm_rope_args).
// Ownership of the experiment kernels (the library's lean-run layout: grid (G, 1), block (8, 40),
// a resident grid of 2 blocks per multiprocessor (plus the tail blocks of a TailSplit), thread
// row y owning head y, lane x pair vector x, the library's ring, flat walk and per-token
// arithmetic, so the library's bits):
//  - Tokens: a block computes token t_j in round j while its ring holds t_{j+1}; it claims
//    t_{j+2} in round j (its position loaded a round ahead of its fetch, as in the library).
//    kStatic: t_j = bx + j G (the library's order, as a check of the copy's loop), or with a
//    TailSplit the resident and tail blocks' strides below their bounds (TailSplit); kBlock: thread
//    (0, 0) takes the next token from the block's counter (atomicAdd) and hands it to the block
//    through shared memory (two mailbox words, a block barrier per claim); kWarp: each warp claims
//    its own tokens from its own counter (warp w of every block shares counter w: the warp's 4
//    head rows of each token), lane 0's claim shuffled to the warp, no barrier.
//  - Counters: one per head group (kBlock) or warp slot (kWarp) in a device buffer zeroed once;
//    each claimer adds one to its done word after its last claim, and the one that completes the
//    grid's count sets the counter and the done word back to zero for the next launch.
// Every output (and rstd) is compared bit for bit with the library call's, and the counters are
// checked to be zero after every variant. Cold-L2 CUDA-event medians at T = 32768 and 65536, and
// RoPE forward + inverse at T = 32768 (the forward + backward row). At 87cc491
// (bench/results/lean-run-dynamic-87cc491-nvidia-h200.log): the same bits and counters back at
// zero everywhere, but per block 22-28% slower than the static order (RoPE T = 65536 416.48
// against 340.48 us, QK-norm + RoPE 441.06 against 345.98) and per warp 2.6-2.9x (992.67,
// 998.46); the static copy within 0.6% of the library's call. Not taken. Since 0f6e678 the
// kernels copy the cos/sin rows with the library's L2 policy (LeanRunRing::fetch_cos_sin), which
// those timings predate. The static order also takes a split (TailSplit): the resident grid's
// blocks take the tokens below a bound, and tail blocks past the resident grid, which the
// hardware starts wherever a resident block has exited, take the rest, c tokens each, spaced by
// the tail's block count (the last r rounds of the resident grid's share; "tail r x c" in the
// output). With "dynamic"
// on the command line the counter orders run too. At 772e28e (lean-run-tail-772e28e-*): the same
// bits everywhere; QK-norm + RoPE T = 65536 342.11-346.91 us with tails against 342.21-342.46
// (library) and 343.10-343.23 (static), no gain; RoPE 404-424 against 336-337: its 64-register
// blocks fit 3 per multiprocessor, so once the grid exceeds the resident 2 per multiprocessor
// some multiprocessors likely start 3 head blocks (not measured). Not taken. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/lean_run_dynamic.cu build/libropenorm.a -o lean_run_dynamic
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/qk_norm_rope_validate.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_lean_run.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kHq = 32, kHk = 8, kD = 128, kLanes = 8, kRows = kHq + kHk;
constexpr int kThreads = kLanes * kRows, kWarps = kThreads / 32;

enum class Order { kStatic, kBlock, kWarp };

/// The static order's split (kStatic): the grid's first gridDim.x - tail_blocks blocks (the
/// resident grid) take tokens bx, bx + G0, ... below static_end; tail block i (blockIdx.x = G0 + i)
/// takes static_end + i, static_end + i + tail_blocks, ... below T. The hardware starts a tail
/// block wherever a resident block has exited, so the multiprocessors that finish their head
/// shares first take more of the tail. {T, 0}: the library's order.
struct TailSplit {
  uint32_t static_end, tail_blocks;
};

/// A thread's token claims in order kOrder (see the file comment).
template <Order kOrder>
struct Claims {
  unsigned* counter;
  unsigned* done;
  uint32_t* mailbox;  ///< kBlock: two words of shared memory
  uint32_t next_static, step = 0, end = 0;
  int parity = 0;

  __device__ Claims(unsigned* counters, unsigned* dones, uint32_t* mb, TailSplit split,
                    uint32_t tokens)
      : mailbox(mb) {
    const int slot =
        kOrder == Order::kWarp ? static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x) / 32 : 0;
    counter = counters + blockIdx.y * kWarps + slot;
    done = dones + blockIdx.y * kWarps + slot;
    const uint32_t head_blocks = gridDim.x - split.tail_blocks;
    if (blockIdx.x < head_blocks) {
      next_static = blockIdx.x;
      step = head_blocks;
      end = split.static_end;
    } else {
      next_static = split.static_end + (blockIdx.x - head_blocks);
      step = split.tail_blocks;
      end = tokens;
    }
  }
  __device__ bool leader() const {
    const int tid = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
    return kOrder == Order::kWarp ? tid % 32 == 0 : tid == 0;
  }
  /// The next token (block- or warp-uniform; every thread of the claimers calls it).
  __device__ uint32_t claim() {
    if constexpr (kOrder == Order::kStatic) {
      const uint32_t t = next_static;
      next_static += step;
      return t < end ? t : 0xffffffffu;
    } else if constexpr (kOrder == Order::kBlock) {
      if (leader()) mailbox[parity] = atomicAdd(counter, 1u);
      __syncthreads();
      const uint32_t t = mailbox[parity];
      parity ^= 1;
      return t;
    } else {
      uint32_t t = 0;
      if (leader()) t = atomicAdd(counter, 1u);
      return __shfl_sync(0xffffffffu, t, 0);
    }
  }
  /// After the last claim: the claimer completing the grid's count resets the counter.
  __device__ void finish() {
    if constexpr (kOrder != Order::kStatic) {
      if (leader()) {
        __threadfence();
        if (atomicAdd(done, 1u) == gridDim.x - 1) {
          atomicExch(counter, 0u);
          atomicExch(done, 0u);
        }
      }
    }
  }
};

/// The library's rope_lean_run loop (2 stages, flat walk, direct io) with tokens from Claims:
/// body(t, y, regs, c, sn, io) per token as there.
template <Order kOrder, typename Spec, typename Body>
__device__ __forceinline__ void dyn_lean_run(const RopeKernelArgs& a, uint4* ring,
                                             const LeanRunLane& ln, unsigned* counters,
                                             unsigned* dones, uint32_t* mailbox, TailSplit split,
                                             Body&& body) {
  using T = bf16;
  using C = float;
  using R = LeanRunRing<T, C, 2>;
  using Io = LeanRunIo<T, typename R::Ring, false, R::kVecChunks>;
  constexpr int V = R::V;
  constexpr int kVecBytes = 16 * R::kVecChunks;
  const typename R::Ring rg(ring, static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x));
  const int fa = Io::fetch_a(ln), fb = Io::fetch_b(ln);
  const LeanRunWalkFlat<T, C, Spec> w(a, ln, fa);
  const auto tokens = static_cast<uint32_t>(a.tokens);
  Claims<kOrder> cl(counters, dones, mailbox, split, tokens);
  auto fetch = [&](int stage, uint32_t t, int64_t p) {
    const T* x = w.in_at(t);
    rg.template fetch<kVecBytes, false>(stage, 0, x);
    rg.template fetch<kVecBytes, false>(stage, R::kVecChunks, x + (fb - fa));
    const C *co, *so;
    w.cs_at(t, p, co, so);
    R::fetch_cos_sin(rg, stage, co, so);
  };
  uint32_t cur = cl.claim();
  if (cur < tokens) fetch(0, cur, w.position(cur));
  cp_async_commit();
  uint32_t fet = cur < tokens ? cl.claim() : cur;
  int64_t p_ahead = fet < tokens ? w.position(fet) : 0;
  int stage = 0;
  while (cur < tokens) {
    if (fet < tokens) fetch(1 - stage, fet, p_ahead);
    cp_async_commit();
    const uint32_t nxt = fet;
    if (fet < tokens) {
      fet = cl.claim();
      if (fet < tokens) p_ahead = w.position(fet);
    }
    cp_async_wait<1>();
    const Io io{rg, stage, ln.oa, ln.ob, 0xffffffffu};
    RopeHeadRegs<T, V> regs;
    float c[V], sn[V];
    R::read(a, rg, stage, io, regs, c, sn);
    body(
        cur, [&] { return w.out_at(cur); }, regs, c, sn, io);
    cur = nxt;
    stage ^= 1;
  }
  cl.finish();
}

template <Order kOrder>
__global__ void __launch_bounds__(kThreads, 2)
    dyn_rope_kernel(const RopeKernelArgs a, unsigned* counters, unsigned* dones, TailSplit split) {
  constexpr int V = core::kRopeLeanVec;
  extern __shared__ uint4 dyn_ring[];
  __shared__ uint32_t mailbox[2];
  const LeanRunLane ln = lean_run_lane<false>(a, a.half);
  griddep_wait();
  dyn_lean_run<kOrder, LeanRowsFlatI64>(
      a, dyn_ring, ln, counters, dones, mailbox, split,
      [&](uint32_t, const auto& y, const RopeHeadRegs<bf16, V>& regs, const float(&c)[V],
          const float(&sn)[V],
          const auto& io) { rope_lean_run_rotate<bf16, false>(y, regs, c, sn, io); });
}

template <Order kOrder>
__global__ void __launch_bounds__(kThreads, 2)
    dyn_qk_kernel(const QkNormRopeArgs args, unsigned* counters, unsigned* dones, TailSplit split) {
  constexpr int V = core::kRopeLeanVec;
  using Spec = LeanFlatI64<8>;
  extern __shared__ uint4 dyn_ring[];
  __shared__ uint32_t mailbox[2];
  const RopeKernelArgs& a = args.rope;
  const LeanRunLane ln = lean_run_lane<false>(a, kD / 2);
  const int oa = ln.oa, ob = ln.ob;
  const QkRstdSlot rs = qk_rstd_slot(args, ln.hh);
  griddep_wait();
  float w0[V], w1[V];
  qk_head_factors<V, bf16>(args, ln.hh, oa, ob, w0, w1);
  dyn_lean_run<kOrder, Spec>(a, dyn_ring, ln, counters, dones, mailbox, split,
                             [&](uint32_t t, const auto& y, const RopeHeadRegs<bf16, V>& regs,
                                 const float(&c)[V], const float(&sn)[V], const auto&) {
                               qk_lean_run_head<bf16, false, Spec>(
                                   args, t, y, rs, ln.hh, oa, ob, regs, c, sn, 0xffffffffu, w0, w1);
                             });
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_t = 65536;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261204);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16 *yq = device_bf16({}, qn), *yk = device_bf16({}, kn), *yq2 = device_bf16({}, qn),
       *yk2 = device_bf16({}, kn);
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  float *rq, *rk, *rq2, *rk2;
  CK(cudaMalloc(&rq, max_t * kHq * 4));
  CK(cudaMalloc(&rk, max_t * kHk * 4));
  CK(cudaMalloc(&rq2, max_t * kHq * 4));
  CK(cudaMalloc(&rk2, max_t * kHk * 4));
  unsigned* counters;  // [kWarps] counters then [kWarps] done words
  CK(cudaMalloc(&counters, 2 * kWarps * sizeof(unsigned)));
  CK(cudaMemset(counters, 0, 2 * kWarps * sizeof(unsigned)));
  unsigned* dones = counters + kWarps;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("registers: rope static %d, block %d, warp %d; qk static %d, block %d, warp %d\n",
              regs_of(reinterpret_cast<const void*>(dyn_rope_kernel<Order::kStatic>)),
              regs_of(reinterpret_cast<const void*>(dyn_rope_kernel<Order::kBlock>)),
              regs_of(reinterpret_cast<const void*>(dyn_rope_kernel<Order::kWarp>)),
              regs_of(reinterpret_cast<const void*>(dyn_qk_kernel<Order::kStatic>)),
              regs_of(reinterpret_cast<const void*>(dyn_qk_kernel<Order::kBlock>)),
              regs_of(reinterpret_cast<const void*>(dyn_qk_kernel<Order::kWarp>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  const size_t smem = static_cast<size_t>(core::rope_lean_run_ring_bytes(2, 4, kThreads));
  const void* kernels[] = {reinterpret_cast<const void*>(dyn_rope_kernel<Order::kStatic>),
                           reinterpret_cast<const void*>(dyn_rope_kernel<Order::kBlock>),
                           reinterpret_cast<const void*>(dyn_rope_kernel<Order::kWarp>),
                           reinterpret_cast<const void*>(dyn_qk_kernel<Order::kStatic>),
                           reinterpret_cast<const void*>(dyn_qk_kernel<Order::kBlock>),
                           reinterpret_cast<const void*>(dyn_qk_kernel<Order::kWarp>)};
  for (const void* f : kernels) {
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(smem)));
  }
  // Variants: the static order without a tail (the library's), with tails of r rounds of the
  // resident grid in tail blocks of c tokens; with "dynamic" on the command line also the
  // counter orders.
  struct Variant {
    std::string name;
    Order order;
    int tail_rounds, chunk;
  };
  std::vector<Variant> variants = {{"static", Order::kStatic, 0, 0}};
  for (const auto& rc : std::vector<std::pair<int, int>>{
           {2, 1}, {4, 1}, {4, 2}, {8, 2}, {8, 4}, {16, 4}, {16, 8}, {32, 8}}) {
    variants.push_back({"tail " + std::to_string(rc.first) + "x" + std::to_string(rc.second),
                        Order::kStatic, rc.first, rc.second});
  }
  if (argc > 1 && std::string(argv[1]) == "dynamic") {
    variants.push_back({"dynamic per block", Order::kBlock, 0, 0});
    variants.push_back({"dynamic per warp", Order::kWarp, 0, 0});
  }
  for (int64_t t : {int64_t{32768}, int64_t{65536}}) {
    const DeviceCosSin csd = device_cos_sin(rng, t, kD, t);
    const StandardViews sv(csd, t, w);
    auto view = [&](void* p, int64_t heads) { return sv.view(p, heads); };
    auto rstd = [&](float* p, int64_t heads) { return sv.rstd(p, heads); };
    const RopePositions& rp = sv.rp;
    const RopeCosSin& cs = sv.cache;
    RopeParams prm, inv;
    inv.inverse = true;
    const TensorRef &twq = sv.wq, &twk = sv.wk;
    QkNormParams np;
    const int64_t resident = std::min<int64_t>(t, int64_t{sms} * 2);
    // A variant's grid and split at this length.
    auto shape = [&](const Variant& v, dim3& g, TailSplit& split) {
      split = {static_cast<uint32_t>(t), 0u};
      int64_t tail_blocks = 0;
      if (v.tail_rounds > 0) {
        const int64_t head_rounds = std::max<int64_t>(t / resident - v.tail_rounds, 0);
        const int64_t static_end = head_rounds * resident;
        tail_blocks = (t - static_end + v.chunk - 1) / v.chunk;
        split = {static_cast<uint32_t>(static_end), static_cast<uint32_t>(tail_blocks)};
      }
      g = dim3(static_cast<unsigned>(resident + tail_blocks));
    };
    const dim3 b(kLanes, kRows);
    for (const bool qk : {false, true}) {
      // The library's call (reference bits and the time to beat), then the experiment kernels
      // on the library's arguments for the same call writing the second outputs.
      auto lib = [&] {
        if (qk) {
          check(qk_norm_rope(view(q, kHq), view(k, kHk), twq, twk, view(yq, kHq), view(yk, kHk),
                             rstd(rq, kHq), rstd(rk, kHk), rp, cs, prm, np, nullptr),
                "library qk");
        } else {
          check(
              rope(view(q, kHq), view(k, kHk), view(yq, kHq), view(yk, kHk), rp, cs, prm, nullptr),
              "library rope");
        }
      };
      const QkNormRopeArgs qa = qk_norm_rope_args_of(
          core::qk_norm_rope_call(view(q, kHq), view(k, kHk), twq, twk, view(yq2, kHq),
                                  view(yk2, kHk), rstd(rq2, kHq), rstd(rk2, kHk), rp, cs, prm, np));
      const RopeKernelArgs ra =
          rope_args_of({view(q, kHq), view(k, kHk), view(yq2, kHq), view(yk2, kHk), rp, cs, prm});
      auto launch = [&](const Variant& v, const RopeKernelArgs& args) {
        dim3 g;
        TailSplit split;
        shape(v, g, split);
        if (qk) {
          const auto f = v.order == Order::kStatic  ? dyn_qk_kernel<Order::kStatic>
                         : v.order == Order::kBlock ? dyn_qk_kernel<Order::kBlock>
                                                    : dyn_qk_kernel<Order::kWarp>;
          CK(launch_with_pdl(f, g, b, smem, nullptr, qa, counters, dones, split));
        } else {
          const auto f = v.order == Order::kStatic  ? dyn_rope_kernel<Order::kStatic>
                         : v.order == Order::kBlock ? dyn_rope_kernel<Order::kBlock>
                                                    : dyn_rope_kernel<Order::kWarp>;
          CK(launch_with_pdl(f, g, b, smem, nullptr, args, counters, dones, split));
        }
      };
      const size_t nq = t * kHq * kD, nk = t * kHk * kD;
      CK(cudaMemset(yq, 0xff, qn * 2));
      CK(cudaMemset(yk, 0xff, kn * 2));
      CK(cudaMemset(rq, 0xff, max_t * kHq * 4));
      CK(cudaMemset(rk, 0xff, max_t * kHk * 4));
      lib();
      CK(cudaDeviceSynchronize());
      const auto ref_q = to_host16(yq, nq), ref_k = to_host16(yk, nk);
      const auto ref_rq = to_host32(rq, t * kHq), ref_rk = to_host32(rk, t * kHk);
      const char* op = qk ? "qk_norm_rope" : "rope";
      for (const Variant& v : variants) {
        CK(cudaMemset(yq2, 0xff, qn * 2));
        CK(cudaMemset(yk2, 0xff, kn * 2));
        CK(cudaMemset(rq2, 0xff, max_t * kHq * 4));
        CK(cudaMemset(rk2, 0xff, max_t * kHk * 4));
        launch(v, ra);
        CK(cudaDeviceSynchronize());
        const auto eq = to_host16(yq2, nq), ek = to_host16(yk2, nk);
        size_t differ = 0;
        for (size_t i = 0; i < nq; ++i) differ += eq[i] != ref_q[i];
        for (size_t i = 0; i < nk; ++i) differ += ek[i] != ref_k[i];
        if (qk) {
          const auto erq = to_host32(rq2, t * kHq), erk = to_host32(rk2, t * kHk);
          for (size_t i = 0; i < erq.size(); ++i) differ += erq[i] != ref_rq[i];
          for (size_t i = 0; i < erk.size(); ++i) differ += erk[i] != ref_rk[i];
        }
        const auto left = to_host32(counters, 2 * kWarps);
        unsigned nonzero = 0;
        for (uint32_t x : left) nonzero += x != 0;
        dim3 g;
        TailSplit split;
        shape(v, g, split);
        std::printf(
            "  %s T=%5lld check %s (grid %u, static below %u, %u tail blocks): %zu values "
            "differ, %u counter words not zero\n",
            op, static_cast<long long>(t), v.name.c_str(), g.x, split.static_end, split.tail_blocks,
            differ, nonzero);
      }
      // Cold-L2 medians, the library and the variants alternating twice.
      for (int pass = 0; pass < 2; ++pass) {
        std::printf("%-12s T=%5lld cold (pass %d): library %.2f us", op, static_cast<long long>(t),
                    pass, time_med(lib, true));
        for (const Variant& v : variants) {
          std::printf(" | %s %.2f", v.name.c_str(), time_med([&] { launch(v, ra); }, true));
        }
        std::printf("\n");
      }
      if (!qk && t == 32768) {   // forward then inverse, the forward + backward row's pair
        RopeKernelArgs ia = ra;  // the inverse in place on the forward's outputs
        ia.inverse = true;
        ia.q = ra.q_out;
        ia.k = ra.k_out;
        auto lib_pair = [&] {
          check(
              rope(view(q, kHq), view(k, kHk), view(yq, kHq), view(yk, kHk), rp, cs, prm, nullptr),
              "library rope");
          check(rope(view(yq, kHq), view(yk, kHk), view(yq, kHq), view(yk, kHk), rp, cs, inv,
                     nullptr),
                "library inverse");
        };
        std::printf("%-12s T=%5lld cold: forward + inverse library %.2f us", op,
                    static_cast<long long>(t), time_med(lib_pair, true));
        for (const Variant& v : variants) {
          std::printf(" | %s %.2f", v.name.c_str(),
                      time_med(
                          [&] {
                            launch(v, ra);
                            launch(v, ia);
                          },
                          true));
        }
        std::printf(" us\n");
      }
    }
    CK(cudaFree(csd.cache));
    CK(cudaFree(csd.pos));
  }
  return 0;
}
