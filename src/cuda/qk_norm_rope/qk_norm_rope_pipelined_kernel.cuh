// Software-pipelined fused QK-norm + RoPE forward kernel for long runs (the pair kernel's plans
// with plan.rope.pipelined, see core::rope_pipelines).
//
// Ownership: as the pipelined RoPE kernel (rope_pipelined_tokens: persistent grid, slice z of
// block x owns token blockIdx.x * bz + z then every gridDim.x * bz-th token; thread row
// blockIdx.y * by + threadIdx.y owns KH heads; lane x of a head's bx = h / 8 lanes owns its 8
// pairs), with the pair kernel's per-head norm (qk_pair_head): the lane's 16 squares in a fixed
// order, a butterfly over the bx lanes (every lane gets the same bits), weight factors read per
// head from global memory (L1-resident), lane 0 stores r. A token's loads are issued before the
// previous token is normalised, rotated and stored. Each lane writes exactly the channels it
// read, after the whole head was read, so in place is safe. Same helpers as the pair kernel:
// the same bits.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/rope/rope_pipelined_kernel.cuh"

namespace ropenorm::cuda {

/// Pipelined pair kernel: q' = rope(rms_norm(q) * (wq + o)), k' likewise, as
/// qk_norm_rope_pair_kernel, for the pair plans core::rope_pipelines accepts; at least
/// kMinBlocks blocks resident per multiprocessor.
template <typename T, int V, int KH, int kMinBlocks, bool kGptj>
__global__ void __launch_bounds__(core::kRopeBlockThreads, kMinBlocks)
    qk_norm_rope_pipelined_kernel(const QkNormRopeArgs args) {
  const int g = blockDim.x;  // lanes per head
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int lane = tid & 31;
  const unsigned mask = g == 32 ? 0xffffffffu : ((1u << g) - 1u) << (lane & ~(g - 1));
  griddep_wait();
  rope_pipelined_tokens<T, V, KH, kGptj>(
      args.rope, [&](const RopeTokenPtrs<T>& tp, int64_t t, int hh, int oa, int ob,
                     const RopeHeadRegs<T, V>& regs, const float(&c)[V], const float(&sn)[V]) {
        qk_pair_head<T, V, kGptj>(args, tp, t, hh, oa, ob, regs, c, sn, mask, g);
      });
}

}  // namespace ropenorm::cuda
