// Lean RoPE kernel: the launch core::plan_rope_lean describes (decode steps and short runs;
// every run length for cos/sin rows indexed by position, core::rope_lean_max_tokens), in
// instances that fix facts of the call at compile time (rope_lean_spec.h).
//
// Ownership (grid (S, B, Z), block (h / V, rows), V = core::kRopeLeanVec; Z = plan.head_split
// blocks share a token's heads, rows = ceil((Hq + Hk) / Z)):
//  - Token: block (blockIdx.x, blockIdx.y, *) owns token (b, s) = (blockIdx.y, blockIdx.x), t =
//    b S + s (no loop, no division). Every thread reads the token's position itself (one
//    broadcast load).
//  - Head: thread row threadIdx.y of block z owns head z rows + threadIdx.y of the Hq + Hk heads
//    (q first, then k); rows past the last head exit before the wait (lean_row_past_heads). A
//    thread addresses only its own head's input and output.
//  - Pairs: threadIdx.x owns pair vector x, pairs i0 = x V .. i0 + V - 1 (neox: the V-vectors at
//    channels i0 and h + i0; gptj: the V pairs interleaved at channels 2 i0 .. 2 i0 + 2V - 1),
//    loads their c_i, s_i once (the table dtype C a template argument) and rotates them with
//    rope_rotate_store, as the RoPE kernel does, so the bits are that kernel's.
// There are no pass-through channels (R = D) and no loops: one thread, one head, one token. A
// thread reads its two vectors before it writes them, so in place is safe. The kernel waits for
// the previous kernel on the stream (programmatic dependent launch) before its first global
// memory access; it lets the next kernel launch only when it exits (an earlier trigger measured
// slower on back-to-back short launches: bench/experiments/decode.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/rope_plan.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_args.h"
#include "cuda/rope/rope_kernels.cuh"
#include "cuda/rope/rope_lean_spec.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

/// One lean-launch thread's token, head, channels, output head, inputs and c_i, s_i.
template <typename T>
struct RopeLeanItem {
  static constexpr int V = core::kRopeLeanVec;
  int64_t t;
  int hh, oa, ob;
  T* y;
  RopeHeadRegs<T, V> regs;
  float c[V], sn[V];
};

/// The calling thread's head row of a lean launch: blockIdx.z blockDim.y + threadIdx.y (the
/// heads split over grid z).
__device__ __forceinline__ unsigned lean_head_row() {
  return blockIdx.z * blockDim.y + threadIdx.y;
}

/// Whether the calling thread's head row (lean_head_row) lies past the Hq + Hk heads; such rows
/// exit before they touch memory.
__device__ __forceinline__ bool lean_row_past_heads(const RopeKernelArgs& a) {
  return lean_head_row() >= static_cast<unsigned>(a.hq + a.hk);
}

/// Position of token (b, s) as Spec fixes it (rope_position when it fixes none; 0, unused, for
/// the gathered source, which a spec with cos/sin rows excludes).
template <typename Spec>
__device__ __forceinline__ int64_t rope_lean_position(const RopeKernelArgs& a, int64_t b,
                                                      int64_t s) {
  const int64_t off = b * a.pos_sb + s * a.pos_ss;
  if constexpr (Spec::kPos == LeanPositions::kInt64) {
    return static_cast<const int64_t*>(a.pos)[off];
  } else if constexpr (Spec::kPos == LeanPositions::kInt32) {
    return static_cast<int64_t>(static_cast<const int32_t*>(a.pos)[off]);
  } else if constexpr (Spec::kRows) {
    return rope_position(a, b, s);  // rows by position: never the gathered source
  } else {
    return a.source == RopeSource::kGathered ? 0 : rope_position(a, b, s);
  }
}

/// Where token (b, s)'s cos and sin rows start, its position being p: p * row when Spec fixes
/// cos/sin rows indexed by position, else as rope_cos_sin_rows finds them.
template <typename Spec>
__device__ __forceinline__ void rope_lean_cos_sin_rows(const RopeKernelArgs& a, int64_t p,
                                                       int64_t b, int64_t s, int64_t& co,
                                                       int64_t& so) {
  if constexpr (Spec::kRows) {
    co = p * a.cos_row;
    so = p * a.sin_row;
  } else {
    rope_cos_sin_rows(a, p, b, s, co, so);
  }
}

/// c_i, s_i of pairs i0 .. i0 + V - 1 of token (b, s) at position p from tables of dtype C, at
/// the rows rope_lean_cos_sin_rows<Spec> finds (s_i negated for the inverse rotation).
template <typename C, int V, typename Spec>
__device__ __forceinline__ void rope_lean_cos_sin(const RopeKernelArgs& a, int64_t p, int64_t b,
                                                  int64_t s, int i0, float (&c)[V],
                                                  float (&sn)[V]) {
  int64_t co, so;
  rope_lean_cos_sin_rows<Spec>(a, p, b, s, co, so);
  load_pack<C, V>(static_cast<const C*>(a.cos) + co + i0, c);
  load_pack<C, V>(static_cast<const C*>(a.sin) + so + i0, sn);
  rope_apply_direction<V>(a, sn);
}

/// Thread (x, y) of lean block (s, b): loads its head's two vectors, then the position and its
/// pairs' c_i, s_i from tables of dtype C (the data loads in flight first); Spec: the facts
/// fixed at compile time (rope_lean_spec.h).
template <typename T, typename C, bool kGptj, typename Spec>
__device__ __forceinline__ void rope_lean_load(const RopeKernelArgs& a, RopeLeanItem<T>& it) {
  constexpr int V = core::kRopeLeanVec;
  const int64_t s = blockIdx.x, b = blockIdx.y;
  it.t = b * a.seq + s;
  it.hh = static_cast<int>(lean_head_row());
  const int i0 = static_cast<int>(threadIdx.x) * V;
  it.oa = kGptj ? 2 * i0 : i0;
  it.ob = kGptj ? 2 * i0 + V : a.half + i0;
  const bool is_q = it.hh < a.hq;
  const int head = is_q ? it.hh : it.hh - a.hq;
  const T* x = rope_head_ptr<T>(is_q ? a.q : a.k, b, s, head);
  it.y = const_cast<T*>(rope_head_ptr<T>(is_q ? a.q_out : a.k_out, b, s, head));
  load_raw<T, V>(x + it.oa, it.regs.x0);
  load_raw<T, V>(x + it.ob, it.regs.x1);
  rope_lean_cos_sin<C, V, Spec>(a, rope_lean_position<Spec>(a, b, s), b, s, i0, it.c, it.sn);
}

/// Lean RoPE (forward or inverse, a.inverse) of style kGptj with cos/sin tables of dtype C and
/// the facts Spec fixes; launched only as core::rope_lean allows.
template <typename T, typename C, bool kGptj, typename Spec = LeanAny>
__global__ void __launch_bounds__(Spec::kMaxThreads) rope_lean_kernel(const RopeKernelArgs a) {
  if (lean_row_past_heads(a)) return;
  griddep_wait();
  RopeLeanItem<T> it;
  rope_lean_load<T, C, kGptj, Spec>(a, it);
  rope_rotate_store<T, core::kRopeLeanVec, kGptj>([&] { return it.y; }, it.oa, it.ob, it.regs, it.c,
                                                  it.sn);
}

/// Launches a kernel of the lean layout (a lean plan, or a lean run: core::RopePlan::lean_run) on
/// plan's grid and block with args, and a lean run's ring in plan.smem_bytes of dynamic shared
/// memory (allowed first); the CUDA error, if any.
template <typename Kernel, typename Args>
cudaError_t launch_lean_layout(Kernel kernel, const core::RopePlan& plan, cudaStream_t stream,
                               const Args& args) {
  const auto smem = static_cast<size_t>(plan.smem_bytes);
  cudaError_t err = cudaSuccess;
  if (smem > 0) {
    err = static_cast<cudaError_t>(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem));
  }
  if (err == cudaSuccess) {
    err = launch_with_pdl(kernel, rope_launch_grid(plan), rope_launch_block(plan), smem, stream,
                          args);
  }
  return err;
}

/// Launches the lean-layout instantiation pick(TypeTag<C>{}, std::bool_constant<kGptj>{})
/// returns for the call's cos/sin table dtype C (cs_dtype) and style (gptj) as
/// launch_lean_layout does, with args; shared by the RoPE and QK-norm + RoPE launchers (lean and
/// lean-run plans). The launch error goes to *err; a table dtype without a kernel is the
/// returned error, naming op.
template <typename Args, typename Pick>
Status launch_rope_lean(const char* op, DType cs_dtype, bool gptj, const core::RopePlan& plan,
                        cudaStream_t stream, const Args& args, cudaError_t* err, Pick&& pick) {
  return core::dispatch_float_dtype<f16, bf16>(cs_dtype, op, "cos/sin", [&](auto tag) -> Status {
    const auto kernel = gptj ? pick(tag, std::true_type{}) : pick(tag, std::false_type{});
    *err = launch_lean_layout(kernel, plan, stream, args);
    return Status::Ok();
  });
}

}  // namespace ropenorm::cuda
