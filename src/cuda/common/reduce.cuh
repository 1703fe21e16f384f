// Fixed-order fp32 sums across a warp and across a block.
//
// Ownership: every lane contributes one partial (warp_sum, block_sum, lane_group_sum: over its
// aligned lane group) or one partial per chunk it owns (chunk_sum); the result is returned to
// every lane (warp, lane group) or every thread (block). The order of additions depends only on
// the thread layout (warp_sum, block_sum, lane_group_sum) or only on the chunks (chunk_sum),
// never on data or timing, so results are bitwise reproducible.
#pragma once

namespace ropenorm::cuda {

/// Butterfly sum of v over an aligned group of g lanes (a power of two <= 32; xor offsets g / 2
/// down to 1) among the lanes named by mask (the group's or more): every lane of the group
/// obtains the same bits.
__device__ __forceinline__ float lane_group_sum(float v, unsigned mask, int g) {
  for (int off = g >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(mask, v, off);
  return v;
}

/// Butterfly sum over the 32 lanes of a warp; every lane receives the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// K sums over the 32 lanes of a warp at once (K a power of two, at most 32), each with the
/// pairing and operand order of warp_sum (so each has warp_sum's bits), in
/// K - 1 + 5 - log2(K) shuffles instead of 5 K: at offsets 16, 8, ... a lane keeps the half of
/// its values its offset bit selects (upper half when set) and sends the other half to its
/// partner, which adds it to its own copy; once one value is left the butterfly goes on alone.
/// Returns, in lane l, the total of value l / (32 / K).
template <int K>
__device__ __forceinline__ float warp_sum_scatter(float (&v)[K]) {
  static_assert(K >= 1 && K <= 32 && (K & (K - 1)) == 0, "K: a power of two up to 32");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = K, offset = 16; n > 1; n /= 2, offset /= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int j = 0; j < n / 2; ++j) {
      const float send = upper ? v[j] : v[n / 2 + j];
      const float keep = upper ? v[n / 2 + j] : v[j];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
  float t = v[0];
#pragma unroll
  for (int offset = 16 / K; offset > 0; offset >>= 1) t += __shfl_xor_sync(0xffffffffu, t, offset);
  return t;
}

/// Split-invariant sum over the chunks of a 1-D block: thread t's partial k is that of chunk
/// j = t + k * blockDim.x (blockDim.x a multiple of 32, at most kMaxThreads; K * blockDim.x <=
/// 32 * 32 * 32 chunks). The order depends on the chunks only, never on blockDim.x or K:
///   S = sum_g G_g,  G_g = sum_l W_(32 g + l),  W_w = sum_l P_(32 w + l),
/// each sum a 32-lane butterfly (warp_sum) in that index order, P_j chunk j's partial, and the
/// outer sum over groups skipped when there is one group (a butterfly of one value and zeros
/// returns it exactly; absent chunks, virtual warps and groups count as +0, which leaves every
/// sum unchanged). So every split of the same chunks (any blockDim.x x K) gives the same bits,
/// those of one chunk per thread (block_sum). The K first-level sums of a thread go through one
/// warp_sum_scatter (same bits as K warp_sums). `scratch` holds K * blockDim.x / 32 floats of
/// shared memory; the call synchronises the block twice, so it may be called repeatedly.
template <int K, int kMaxThreads>
__device__ __forceinline__ float chunk_sum(float (&part)[K], float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  constexpr int kLanesPerValue = 32 / K;
  const float mine = warp_sum_scatter(part);  // partial lane / kLanesPerValue's virtual warp
  if (lane % kLanesPerValue == 0) scratch[warp + lane / kLanesPerValue * nwarps] = mine;
  __syncthreads();
  const int vwarps = nwarps * K;
  float total = warp_sum(lane < vwarps ? scratch[lane] : 0.0f);
  if constexpr (K * kMaxThreads > 32 * 32) {
    if (vwarps > 32) {
      float groups = lane == 0 ? total : 0.0f;  // lane g: group g's sum
#pragma unroll 1
      for (int g = 1; g * 32 < vwarps; ++g) {
        const int w = g * 32 + lane;
        const float group = warp_sum(w < vwarps ? scratch[w] : 0.0f);
        if (lane == g) groups = group;
      }
      total = warp_sum(groups);
    }
  }
  __syncthreads();
  return total;
}

/// Sum over all threads of a 1-D block (blockDim.x a multiple of 32, at most 1024); every thread
/// receives the total: chunk_sum with one chunk per thread (one butterfly per warp, then one over
/// the warps' sums). `scratch` is 32 floats of shared memory; the call synchronises the block
/// twice, so it may be called repeatedly with the same scratch.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  float part[1] = {v};
  return chunk_sum<1, 1024>(part, scratch);
}

}  // namespace ropenorm::cuda
