// The lean run: the lean layout (rope_lean_kernels.cuh: thread (x, y) owns pair vector x of head
// y) over a persistent grid, its tokens interleaved over the blocks, each thread fetching its
// next tokens' data and cos/sin into its own shared-memory ring while it computes the current
// one. The per-token work is the caller's: the RoPE lean-run kernel below rotates (the lean
// kernel's arithmetic), the QK-norm + RoPE lean-run kernel normalises and rotates, so each has
// its lean kernel's bits.
//
// Ownership (grid (gx, head groups), block (g, rows), S = core::kRopeLeanRunStages):
//  - Tokens: block bx owns the tokens bx, bx + G, bx + 2G, ... (G = gridDim.x; interleaved over
//    the grid, rope_block_tokens.cuh), one per round, in order. The general walk (LeanRunWalkBs)
//    advances (b, s) without division and addresses from them; the flat walk (Spec::kFlat,
//    LeanRunWalkFlat) keeps t alone and addresses each operand at t times its token stride,
//    and a table row at the position's low 32 bits times the row stride (tables gathered per
//    token, Spec::kTokenRows: at t times their token stride), from the lane's bases.
//  - Head and pairs: thread row y of head group blockIdx.y owns head hh = blockIdx.y rows + y (q
//    heads first, then k; rows past Hq + Hk exit at once), lane x its pair vector x (two
//    V-vectors of channels, and the pairs' c_i, s_i), as in the lean kernel.
//  - Ring (ThreadRing, [thread / 8][stage][chunk][thread % 8]): in round j a thread starts the
//    cp.async of its token j + S - 1's two vectors (through L1 only for QK-norm + RoPE gptj, L2
//    only otherwise) and cos/sin chunks (through L1: every head row of the block reads the same
//    rows; an f32 table's kept in L2 at evict_last, LeanRunRing::fetch_cos_sin, for the tokens of
//    a repeated position and the next call on the same positions, except tables the spec fixes
//    as gathered per token, read once a call), then waits for its own copy of
//    token j. Directly (neox; QK-norm + RoPE gptj, its data through L1) it reads and writes nothing
//    but its own slots, so no barrier is needed. In the row swizzle (RoPE gptj, LeanRunIo) lane x
//    fetches the head's chunks x and x + L instead of its own 2x and 2x + 1, and the row's lanes
//    trade chunks through their slots of the round's stage under warp barriers over the row (before
//    the trade, before its results go back into the slots, after they are there, and before the
//    next round refills a stage). The position of token j + S - 1 was loaded in the previous round,
//    so no round waits for a position before it can fetch.
// A row reads a token's head (from the ring) before any of its lanes writes it, and fetches
// token t + G only from addresses token t does not write (R = D, one head per row), so in place
// is safe.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/rope_plan.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/thread_ring.cuh"
#include "cuda/rope/rope_args.h"
#include "cuda/rope/rope_block_tokens.cuh"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"

namespace ropenorm::cuda {

/// What thread (x, y) of head group blockIdx.y owns: head hh = blockIdx.y rows + y (q heads
/// first; hh >= Hq + Hk: none), its index in q or k, and pair vector x: pairs i0 .. i0 + V - 1 at
/// channels oa (the pairs' first halves) and ob (second halves) of the head.
struct LeanRunLane {
  int hh;
  bool is_q;
  int head;
  int i0, oa, ob;
};

/// The lane of the calling thread for style kGptj and rotary half h.
template <bool kGptj>
__device__ __forceinline__ LeanRunLane lean_run_lane(const RopeKernelArgs& a, int h) {
  constexpr int V = core::kRopeLeanVec;
  LeanRunLane ln;
  ln.hh = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  ln.is_q = ln.hh < a.hq;
  ln.head = ln.is_q ? ln.hh : ln.hh - a.hq;
  ln.i0 = static_cast<int>(threadIdx.x) * V;
  ln.oa = kGptj ? 2 * ln.i0 : ln.i0;
  ln.ob = kGptj ? 2 * ln.i0 + V : h + ln.i0;
  return ln;
}

/// A lean-run thread's tokens addressed from (b, s), any strides (the general walk): the block's
/// cursor (rope_block_tokens.cuh), the lane's first fetched chunk of its input head and first
/// stored chunk of its output head (both fa channels into the head), the position and its c_i,
/// s_i (pairs i0 .., the rows as Spec fixes them) at each token; tables of dtype C.
template <typename T, typename C, typename Spec>
struct LeanRunWalkBs {
  using Cursor = TokenCursor;
  const RopeKernelArgs& a;
  const RopeOperand& in;
  const RopeOperand& out;
  int head;
  int fa, i0;
  TokenStep st;

  __device__ __forceinline__ LeanRunWalkBs(const RopeKernelArgs& args, const LeanRunLane& ln,
                                           int fetch_a)
      : a(args),
        in(ln.is_q ? args.q : args.k),
        out(ln.is_q ? args.q_out : args.k_out),
        head(ln.head),
        fa(fetch_a),
        i0(ln.i0),
        st(block_token_step(args)) {}
  __device__ __forceinline__ Cursor first() const { return first_block_token(a); }
  __device__ __forceinline__ bool valid(const Cursor& c) const { return c.valid(a); }
  __device__ __forceinline__ void next(Cursor& c) const { c.next(st, a.seq); }
  __device__ __forceinline__ int64_t t(const Cursor& c) const { return c.t(a); }
  __device__ __forceinline__ const T* in_at(const Cursor& c) const {
    return rope_head_ptr<T>(in, c.b, c.s, head) + fa;
  }
  __device__ __forceinline__ T* out_at(const Cursor& c) const {
    return const_cast<T*>(rope_head_ptr<T>(out, c.b, c.s, head)) + fa;
  }
  __device__ __forceinline__ int64_t position(const Cursor& c) const {
    return rope_lean_position<Spec>(a, c.b, c.s);
  }
  /// The lane's c_i and s_i at token c, its position being p.
  __device__ __forceinline__ void cs_at(const Cursor& c, int64_t p, const C*& co,
                                        const C*& so) const {
    int64_t cr, sr;
    rope_lean_cos_sin_rows<Spec>(a, p, c.b, c.s, cr, sr);
    co = static_cast<const C*>(a.cos) + cr + i0;
    so = static_cast<const C*>(a.sin) + sr + i0;
  }
};

/// base + i * stride bytes (i, stride 32-bit; the product 64-bit) as one wide multiply-add: a
/// flat walk's address, whose base the compiler would otherwise split into parts added per use.
template <typename P>
__device__ __forceinline__ P* flat_at(P* base, uint32_t i, uint32_t stride) {
  uint64_t r;
  asm("mad.wide.u32 %0, %1, %2, %3;"
      : "=l"(r)
      : "r"(i), "r"(stride), "l"(reinterpret_cast<uint64_t>(base)));
  return reinterpret_cast<P*>(r);
}

/// A lean-run thread's tokens when every operand's token t sits at t times its token stride
/// and the tables indexed by position are within 32-bit rows and row strides (Spec::kFlat,
/// rope_flat_tokens): the cursor is t alone (32 bits, block bx's tokens bx, bx + G, ...), and
/// each address one wide multiply-add of t, or of the position's low 32 bits (a position in
/// [0, P) as the call requires), by a 32-bit byte stride from the lane's base; int64 positions,
/// cos/sin rows by position. Spec::kTokenRows: the tables gathered per token instead, token t's
/// rows at t times their token strides (flat too), and no position read.
template <typename T, typename C, typename Spec>
struct LeanRunWalkFlat {
  using Cursor = uint32_t;
  const RopeKernelArgs& a;
  const unsigned char* in;    ///< the lane's first fetched chunk of token 0
  unsigned char* out;         ///< the lane's first stored chunk of token 0 (channel fa too)
  const unsigned char* cos;   ///< the lane's c_i (pairs i0 ..) of position (or token) 0
  const unsigned char* sin;   ///< its s_i
  uint32_t in_ss, out_ss;     ///< token strides in bytes
  uint32_t cos_row, sin_row;  ///< table row strides in bytes (kTokenRows: token strides)

  __device__ __forceinline__ LeanRunWalkFlat(const RopeKernelArgs& args, const LeanRunLane& ln,
                                             int fetch_a)
      : a(args) {
    const RopeOperand& i = ln.is_q ? args.q : args.k;
    const RopeOperand& o = ln.is_q ? args.q_out : args.k_out;
    in =
        static_cast<const unsigned char*>(i.data) + (ln.head * i.sh + fetch_a) * int64_t{sizeof(T)};
    out = static_cast<unsigned char*>(o.data) + (ln.head * o.sh + fetch_a) * int64_t{sizeof(T)};
    in_ss = static_cast<uint32_t>(i.ss * int64_t{sizeof(T)});
    out_ss = static_cast<uint32_t>(o.ss * int64_t{sizeof(T)});
    cos = static_cast<const unsigned char*>(args.cos) + ln.i0 * int64_t{sizeof(C)};
    sin = static_cast<const unsigned char*>(args.sin) + ln.i0 * int64_t{sizeof(C)};
    cos_row =
        static_cast<uint32_t>((Spec::kTokenRows ? args.cos_ss : args.cos_row) * int64_t{sizeof(C)});
    sin_row =
        static_cast<uint32_t>((Spec::kTokenRows ? args.sin_ss : args.sin_row) * int64_t{sizeof(C)});
  }
  __device__ __forceinline__ Cursor first() const { return blockIdx.x; }
  __device__ __forceinline__ bool valid(Cursor t) const {
    return t < static_cast<uint32_t>(a.tokens);
  }
  __device__ __forceinline__ void next(Cursor& t) const { t += gridDim.x; }
  __device__ __forceinline__ int64_t t(Cursor t) const { return t; }
  __device__ __forceinline__ const T* in_at(Cursor t) const {
    return reinterpret_cast<const T*>(flat_at(in, t, in_ss));
  }
  __device__ __forceinline__ T* out_at(Cursor t) const {
    return reinterpret_cast<T*>(flat_at(out, t, out_ss));
  }
  __device__ __forceinline__ int64_t position(Cursor t) const {
    if constexpr (Spec::kTokenRows) {
      return 0;  // not read: the rows follow the token
    } else {
      const auto stride = static_cast<uint32_t>(a.pos_ss * int64_t{sizeof(int64_t)});
      return *reinterpret_cast<const int64_t*>(static_cast<const unsigned char*>(a.pos) +
                                               static_cast<uint64_t>(t) * stride);
    }
  }
  __device__ __forceinline__ void cs_at(Cursor t, int64_t p, const C*& co, const C*& so) const {
    const uint32_t row = Spec::kTokenRows ? t : static_cast<uint32_t>(p);
    co = reinterpret_cast<const C*>(flat_at(cos, row, cos_row));
    so = reinterpret_cast<const C*>(flat_at(sin, row, sin_row));
  }
};

/// The walk a lean run of Spec takes.
template <typename T, typename C, typename Spec>
using LeanRunWalk =
    std::conditional_t<Spec::kFlat, LeanRunWalkFlat<T, C, Spec>, LeanRunWalkBs<T, C, Spec>>;

/// The ring of a lean-run thread: its two V-vectors of T, then the cos and sin V-vectors of C,
/// per stage; S stages (the library's kernels take core::kRopeLeanRunStages, the depth the
/// planner sizes the ring for).
template <typename T, typename C, int S = core::kRopeLeanRunStages>
struct LeanRunRing {
  static constexpr int V = core::kRopeLeanVec;
  static constexpr int kVecChunks = V * static_cast<int>(sizeof(T)) / 16;
  static constexpr int kCsChunks = V * static_cast<int>(sizeof(C)) / 16;
  static constexpr int kChunks = 2 * kVecChunks + 2 * kCsChunks;
  using Ring = ThreadRing<S, kChunks>;
  static_assert(kVecChunks >= 1 && kCsChunks >= 1, "whole 16-byte chunks per vector");
  static_assert(Ring::kGroup == core::kRopeLeanRunRingGroup, "the planner's thread groups");
  static_assert(static_cast<int64_t>(Ring::bytes(1)) * core::kRopeLeanRunStages ==
                    core::rope_lean_run_ring_bytes(sizeof(T), sizeof(C), 1) * S,
                "the planner's ring size, per stage");
  static constexpr int kCos = 2 * kVecChunks, kSin = kCos + kCsChunks;  ///< cos/sin chunks

  /// Starts the copies of a token's cos and sin chunks (co, so: the lane's c_i and s_i) into
  /// `stage`, through L1. An f32 table's rows are kept in L2 (ThreadRing::fetch's kKeep) unless
  /// kStreamed (tables gathered per token: each row is read once a call); a 16-bit table's take
  /// the default policy, because ptxas (CUDA 13.0) compiles the hinted copy in their neox ring
  /// kernels to a form (a uniform-register offset beside the descriptor, in registers the kernel
  /// does not write) that failed on sm_90 with an illegal instruction (tests/cpp/sass_check.sh
  /// looks for that form in the library).
  template <bool kStreamed = false>
  __device__ __forceinline__ static void fetch_cos_sin(const Ring& rg, int stage, const C* co,
                                                       const C* so) {
    constexpr bool kKeep = sizeof(C) == 4 && !kStreamed;
    rg.template fetch<16 * kCsChunks, true, kKeep>(stage, kCos, co);
    rg.template fetch<16 * kCsChunks, true, kKeep>(stage, kSin, so);
  }

  /// A round's inputs once `stage` of rg has landed: the lane's two vectors (io.gather, io on
  /// rg and stage), its c_i and its s_i, negated for the inverse rotation.
  template <typename Io>
  __device__ __forceinline__ static void read(const RopeKernelArgs& a, const Ring& rg, int stage,
                                              const Io& io, RopeHeadRegs<T, V>& regs, float (&c)[V],
                                              float (&sn)[V]) {
    io.gather(regs);
    rg.template read_float<C, V>(stage, kCos, c);
    rg.template read_float<C, V>(stage, kSin, sn);
    rope_apply_direction<V>(a, sn);
  }
};

/// How a lean-run thread's two vectors reach it and leave it, in round `stage` of its ring.
/// Direct (kSwizzle false): the lane fetched its own vectors (channels oa, ob) and store writes
/// them there (the walk's output pointer is at oa, the second vector ob - oa past it). Row swizzle
/// (kSwizzle; gptj with 16-bit data, where a lane's two vectors are the two halves of the same
/// 32-byte sectors): lane x of a row of L lanes fetched the head's 16-byte chunks x and x + L, so
/// that each copy instruction of the row reads whole sectors; gather takes the lane's own chunks 2x
/// and 2x + 1 from the row's ring slots, and store puts the results back into the lane's slots and
/// writes chunks x and x + L (whole sectors again; the walk's output pointer is at chunk x). Warp
/// barriers over the row's lanes (an aligned group of one warp) order the exchanges.
template <typename T, typename Ring, bool kSwizzle, int kVecChunks>
struct LeanRunIo {
  static constexpr int V = core::kRopeLeanVec;
  const Ring& rg;
  int stage;
  int oa, ob;
  unsigned mask;  ///< the row's lanes in their warp

  /// Channel offsets of the chunks the lane fetches.
  __device__ __forceinline__ static int fetch_a(const LeanRunLane& ln) {
    return kSwizzle ? static_cast<int>(threadIdx.x) * V : ln.oa;
  }
  __device__ __forceinline__ static int fetch_b(const LeanRunLane& ln) {
    return kSwizzle ? static_cast<int>(threadIdx.x + blockDim.x) * V : ln.ob;
  }

  /// The lane's own two vectors, once its copies of this stage have landed.
  __device__ __forceinline__ void gather(RopeHeadRegs<T, V>& regs) const {
    if constexpr (kSwizzle) {
      const int lanes = static_cast<int>(blockDim.x), x = static_cast<int>(threadIdx.x);
      const int row0 = static_cast<int>(threadIdx.y) * lanes;
      __syncwarp(mask);
      rg.template read_raw_at<T, V>(stage, (2 * x) / lanes, row0 + (2 * x) % lanes, regs.x0);
      rg.template read_raw_at<T, V>(stage, (2 * x + 1) / lanes, row0 + (2 * x + 1) % lanes,
                                    regs.x1);
    } else {
      rg.template read_raw<T, V>(stage, 0, regs.x0);
      rg.template read_raw<T, V>(stage, kVecChunks, regs.x1);
    }
  }

  /// Stores the lane's results x0, x1 (its vectors at channels oa, ob) into the output head, y
  /// pointing at channel fetch_a of it (the walk's out_at).
  __device__ __forceinline__ void store(T* y, const float (&x0)[V], const float (&x1)[V]) const {
    if constexpr (kSwizzle) {
      const int lanes = static_cast<int>(blockDim.x), x = static_cast<int>(threadIdx.x);
      const int row0 = static_cast<int>(threadIdx.y) * lanes;
      __syncwarp(mask);  // every lane of the row has gathered from this stage
      rg.template write_float<T>(stage, 0, x0);
      rg.template write_float<T>(stage, 1, x1);
      __syncwarp(mask);
      RawVec<T, V> ca, cb;  // chunk c now sits in slot c % 2 of lane c / 2
      rg.template read_raw_at<T, V>(stage, x % 2, row0 + x / 2, ca);
      rg.template read_raw_at<T, V>(stage, (x + lanes) % 2, row0 + (x + lanes) / 2, cb);
      store_chunk<T, V>(y, ca.v);
      store_chunk<T, V>(y + lanes * V, cb.v);
    } else {
      store_pack<T, V>(y, x0);
      store_pack<T, V>(y + (ob - oa), x1);
    }
  }
};

/// Runs block blockIdx.x's tokens (block_tokens) for the thread of lane ln (lean_run_lane;
/// ln.hh < Hq + Hk) on the walk Spec picks (LeanRunWalk): each round hands token t, a callable
/// y() giving the thread's output of it at channel LeanRunIo::fetch_a (ln.oa unless kSwizzle;
/// asked for where the body needs it, which keeps the pointer out of the registers live across
/// the arithmetic), its data (regs), c_i, s_i of
/// pairs i0 .. i0 + V - 1 (s_i negated for the inverse rotation) and the round's LeanRunIo (whose
/// store the body may use for its results) to body(t, y, regs, c, sn, io). Spec: the facts fixed at
/// compile time (rope_lean_spec.h); kDataViaL1: the data's copies go through L1 (gptj: a lane's
/// two vectors are the two halves of one 32-byte sector, which the second copy then finds in
/// L1); kSwizzle: LeanRunIo's row swizzle (gptj, 16-bit data; the body must store through io);
/// S: the ring's stages (tokens j + 1 .. j + S - 1 in flight while token j is computed).
/// `ring` is the block's dynamic shared memory, LeanRunRing<T, C, S>::Ring::bytes(threads) of it.
template <typename T, typename C, typename Spec, bool kDataViaL1, bool kSwizzle = false,
          int S = core::kRopeLeanRunStages, typename Body>
__device__ __forceinline__ void rope_lean_run(const RopeKernelArgs& a, uint4* ring,
                                              const LeanRunLane& ln, Body&& body) {
  using R = LeanRunRing<T, C, S>;
  using Io = LeanRunIo<T, typename R::Ring, kSwizzle, R::kVecChunks>;
  constexpr int V = R::V;
  constexpr int kVecBytes = 16 * R::kVecChunks;
  static_assert(!kSwizzle || R::kVecChunks == 1, "the row swizzle moves one chunk per vector");
  const typename R::Ring rg(ring, static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x));
  const int lane = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x) & 31;
  const unsigned mask =
      blockDim.x >= 32 ? 0xffffffffu : ((1u << blockDim.x) - 1u) << (lane & ~(blockDim.x - 1));
  const int fa = Io::fetch_a(ln), fb = Io::fetch_b(ln);
  const LeanRunWalk<T, C, Spec> w(a, ln, fa);
  // Token cursors: the one computed (round j), the one fetched (round j + S - 1).
  auto cur = w.first();
  if (!w.valid(cur)) return;
  auto fet = cur;
  auto fetch = [&](int stage, int64_t p) {
    const T* x = w.in_at(fet);  // channel fa of the head
    rg.template fetch<kVecBytes, kDataViaL1>(stage, 0, x);
    rg.template fetch<kVecBytes, kDataViaL1>(stage, R::kVecChunks, x + (fb - fa));
    const C *co, *so;
    w.cs_at(fet, p, co, so);
    R::template fetch_cos_sin<Spec::kTokenRows>(rg, stage, co, so);
  };
#pragma unroll
  for (int k = 0; k < S - 1; ++k) {
    if (w.valid(fet)) fetch(k, w.position(fet));
    cp_async_commit();
    w.next(fet);
  }
  // The position of the round's fetch, loaded a round earlier.
  int64_t p_ahead = w.valid(fet) ? w.position(fet) : 0;
  int stage = 0;
  while (w.valid(cur)) {
    const int ahead = S == 2 ? 1 - stage : (stage == 0 ? S - 1 : stage - 1);  // (stage + S - 1) % S
    // Row swizzle: the row's lanes are done with the stage about to be refilled.
    if constexpr (kSwizzle) __syncwarp(mask);
    if (w.valid(fet)) fetch(ahead, p_ahead);
    cp_async_commit();
    w.next(fet);
    if (w.valid(fet)) p_ahead = w.position(fet);
    cp_async_wait<S - 1>();
    const Io io{rg, stage, ln.oa, ln.ob, mask};
    RopeHeadRegs<T, V> regs;
    float c[V], sn[V];
    R::read(a, rg, stage, io, regs, c, sn);
    body(
        w.t(cur), [&] { return w.out_at(cur); }, regs, c, sn, io);
    w.next(cur);
    stage = stage == S - 1 ? 0 : stage + 1;
  }
}

/// A lean-run RoPE round's work (rope_lean_run's body): the lean kernel's rotation of the
/// lane's two vectors (rope_rotate_regs, one rounding per output), stored through io at y().
template <typename T, bool kGptj, int V, typename Y, typename Io>
__device__ __forceinline__ void rope_lean_run_rotate(const Y& y, const RopeHeadRegs<T, V>& regs,
                                                     const float (&c)[V], const float (&sn)[V],
                                                     const Io& io) {
  float x0[V], x1[V];
  widen<T, V>(regs.x0, x0);
  widen<T, V>(regs.x1, x1);
  rope_rotate_regs<V, kGptj>(x0, x1, c, sn);
  io.store(y(), x0, x1);
}

/// Lean-run RoPE (forward or inverse, a.inverse) of style kGptj with cos/sin tables of dtype C
/// and the facts Spec fixes: rope_lean_run with the lean kernel's rotation per token
/// (rope_rotate_regs, one rounding per output), so the lean kernel's bits; launched as
/// core::plan_rope_lean_run plans it (ring: RopePlan::smem_bytes) for calls core::rope_lean_run
/// accepts. kSwizzle, kDataViaL1 and kStages as rope_lean_run's (the launcher takes the
/// defaults: gptj through the row swizzle, the planner's ring depth).
template <typename T, typename C, bool kGptj, typename Spec, bool kSwizzle = kGptj,
          bool kDataViaL1 = kGptj && !kSwizzle, int kStages = core::kRopeLeanRunStages>
__global__ void __launch_bounds__(core::kRopeLeanRunThreads, core::kRopeLeanRunMinBlocks)
    rope_lean_run_kernel(const RopeKernelArgs a) {
  constexpr int V = core::kRopeLeanVec;
  extern __shared__ uint4 rope_lean_run_ring[];
  const LeanRunLane ln = lean_run_lane<kGptj>(a, a.half);
  if (ln.hh >= a.hq + a.hk) return;
  griddep_wait();
  rope_lean_run<T, C, Spec, kDataViaL1, kSwizzle, kStages>(
      a, rope_lean_run_ring, ln,
      [&](int64_t, const auto& y, const RopeHeadRegs<T, V>& regs, const float(&c)[V],
          const float(&sn)[V],
          const auto& io) { rope_lean_run_rotate<T, kGptj>(y, regs, c, sn, io); });
}

}  // namespace ropenorm::cuda
