// The tokens a block of a persistent grid owns, interleaved over the grid: block bx of
// G = gridDim.x owns tokens bx, bx + G, bx + 2G, ... < T, one per round, so in every round the
// grid's blocks work on neighbouring tokens, as a grid-stride copy does. (A contiguous run per
// block, [bx C, (bx + 1) C), ran the QK-norm + RoPE forward 6% slower at T = 65536:
// bench/results/qk-forward-persistent-interleave-*.)
//
// Ownership: every thread of the block keeps its own cursors. A cursor holds a token's (b, s)
// only (t = b S + s when wanted, the end is b = B), so it takes no more registers than the
// contiguous run's did; advancing it by G needs no division (G = db S + ds).
#pragma once

#include <cstdint>

#include "cuda/rope/rope_args.h"
#include "cuda/rope/rope_kernels.cuh"

namespace ropenorm::cuda {

/// The step between the calling block's tokens: G = gridDim.x = db S + ds, 0 <= ds < S (both
/// below 2^32, as G is).
struct TokenStep {
  uint32_t db, ds;
};

__device__ __forceinline__ TokenStep block_token_step(const RopeKernelArgs& a) {
  const int64_t g = gridDim.x, db = g / a.seq;
  return TokenStep{static_cast<uint32_t>(db), static_cast<uint32_t>(g - db * a.seq)};
}

/// Token (b, s) of a block's tokens; past the last one when b reaches B.
struct TokenCursor {
  int64_t b = 0, s = 0;
  __device__ __forceinline__ bool valid(const RopeKernelArgs& a) const { return b < a.batch; }
  /// The flat index t = b S + s.
  __device__ __forceinline__ int64_t t(const RopeKernelArgs& a) const { return b * a.seq + s; }
  /// Moves to the block's next token, G further on.
  __device__ __forceinline__ void next(const TokenStep& st, int64_t seq) {
    b += st.db;
    s += st.ds;
    if (s >= seq) {
      s -= seq;
      ++b;
    }
  }
};

/// The calling block's first token, blockIdx.x (not valid when blockIdx.x >= T).
__device__ __forceinline__ TokenCursor first_block_token(const RopeKernelArgs& a) {
  TokenCursor c;
  const int64_t t = blockIdx.x;
  if (t < a.tokens) {
    rope_token_coords(a, t, c.b, c.s);
  } else {
    c.b = a.batch;
  }
  return c;
}

}  // namespace ropenorm::cuda
