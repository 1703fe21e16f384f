// A thread's private ring of cp.async stages in dynamic shared memory, for kernels that loop over
// items and fetch the next ones while they compute the current one.
//
// Ownership: kStages stages of kChunks 16-byte slots per thread, laid out [stage][chunk][thread]
// (the threads of a warp touch consecutive slots of a chunk: no bank conflicts). Thread tid copies
// into and reads back only its own slots [*][*][tid], so its own cp.async wait is all it needs,
// never a block barrier.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/dtype.cuh"

namespace ropenorm::cuda {

template <int kStages, int kChunks>
struct ThreadRing {
  uint4* base;  ///< the block's ring: kStages * kChunks * threads slots
  int tid;      ///< this thread's slot column
  int threads;  ///< threads of the block

  /// Dynamic shared memory the ring of a block of `threads` threads takes.
  static constexpr size_t bytes(int threads) {
    return size_t{kStages} * kChunks * static_cast<size_t>(threads) * 16;
  }

  __device__ __forceinline__ uint4* slot(int stage, int chunk) const {
    return base + (stage * kChunks + chunk) * threads + tid;
  }

  /// Starts copying kBytes (a multiple of 16; src 16-byte aligned) into chunks chunk,
  /// chunk + 1, ... of `stage`; kCached: through L1 (rows other threads of the block read too).
  template <int kBytes, bool kCached>
  __device__ __forceinline__ void fetch(int stage, int chunk, const void* src) const {
    static_assert(kBytes % 16 == 0, "ring slots hold 16-byte chunks");
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      const void* from = static_cast<const unsigned char*>(src) + 16 * c;
      if constexpr (kCached) {
        cp_async_16_cached(slot(stage, chunk + c), from);
      } else {
        cp_async_16(slot(stage, chunk + c), from);
      }
    }
  }

  /// The V elements of T (V * sizeof(T) a multiple of 16) fetched into chunks chunk, chunk + 1,
  /// ... of `stage`, as stored.
  template <typename T, int V>
  __device__ __forceinline__ void read_raw(int stage, int chunk, RawVec<T, V>& out) const {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
    static_assert(V % kPer == 0, "whole 16-byte chunks");
#pragma unroll
    for (int c = 0; c < V / kPer; ++c) {
      const Pack<T, kPer> pk = load_word<Pack<T, kPer>>(slot(stage, chunk + c));
#pragma unroll
      for (int i = 0; i < kPer; ++i) out.v[c * kPer + i] = pk.v[i];
    }
  }

  /// The same, widened to fp32.
  template <typename T, int V>
  __device__ __forceinline__ void read_float(int stage, int chunk, float (&out)[V]) const {
    RawVec<T, V> raw;
    read_raw<T, V>(stage, chunk, raw);
    widen<T, V>(raw, out);
  }
};

}  // namespace ropenorm::cuda
