// Fixed-order fp32 sums across a warp and across a block.
//
// Ownership: every lane contributes one partial; the result is returned to every lane (warp) or
// every thread (block). The order of additions depends only on the thread layout, never on data
// or timing, so results are bitwise reproducible for a given launch shape.
#pragma once

namespace ropenorm::cuda {

/// Butterfly sum over the 32 lanes of a warp; every lane receives the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Sum over all threads of a 1-D block (blockDim.x a multiple of 32, at most 1024); every thread
/// receives the total. `scratch` is 32 floats of shared memory; the call synchronises the block
/// twice, so it may be called repeatedly with the same scratch.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

}  // namespace ropenorm::cuda
