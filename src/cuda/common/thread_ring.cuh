// A thread's private ring of cp.async stages in dynamic shared memory, for kernels that loop over
// items and fetch the next ones while they compute the current one.
//
// Ownership: kStages stages of kChunks 16-byte slots per thread, laid out [stage][chunk][thread]
// (the threads of a warp touch consecutive slots of a chunk: no bank conflicts). Thread tid copies
// into and writes only its own slots [*][*][tid]; it reads its own slots after its own cp.async
// wait, and a slot of another thread of its warp (read_raw_at) only after a warp barrier that
// follows that thread's wait or write. No block barrier is ever needed.
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

  __device__ __forceinline__ uint4* slot(int stage, int chunk, int column) const {
    return base + (stage * kChunks + chunk) * threads + column;
  }
  __device__ __forceinline__ uint4* slot(int stage, int chunk) const {
    return slot(stage, chunk, tid);
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

  /// The 16 bytes of chunk `chunk` of `stage` in thread `column`'s slots (a thread of the same
  /// warp, its copy or write ordered before this read by a warp barrier), as stored.
  template <typename T, int V>
  __device__ __forceinline__ void read_raw_at(int stage, int chunk, int column,
                                              RawVec<T, V>& out) const {
    static_assert(V * sizeof(T) == 16, "one 16-byte chunk");
    const Pack<T, V> pk = load_word<Pack<T, V>>(slot(stage, chunk, column));
#pragma unroll
    for (int i = 0; i < V; ++i) out.v[i] = pk.v[i];
  }

  /// Writes 8 values of a 16-bit T (one rounding each) into this thread's chunk `chunk` of
  /// `stage`, as one 16-byte store.
  template <typename T>
  __device__ __forceinline__ void write_float(int stage, int chunk, const float (&in)[8]) const {
    static_assert(sizeof(T) == 2, "8 16-bit values fill a chunk");
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<uint32_t>(float_to_storage<T>(in[2 * i])) |
             (static_cast<uint32_t>(float_to_storage<T>(in[2 * i + 1])) << 16);
    }
    *slot(stage, chunk) = make_uint4(w[0], w[1], w[2], w[3]);
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
