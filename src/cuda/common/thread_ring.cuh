// A thread's private ring of cp.async stages in dynamic shared memory, for kernels that loop over
// items and fetch the next ones while they compute the current one.
//
// Ownership: kStages stages of kChunks 16-byte slots per thread, laid out
// [thread / 8][stage][chunk][thread % 8]: the 8 threads of a 16-byte access's phase touch 128
// consecutive bytes of a chunk (no bank conflicts), and a thread's slots sit at fixed offsets
// from its first one (each address one add of an immediate, whatever the block's size). Thread
// tid copies into and writes only its own slots; it reads its own slots after its own cp.async
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
  /// Threads whose slots of a chunk lie side by side: one phase of a 16-byte shared access.
  static constexpr int kGroup = 8;
  /// Slots of a group of kGroup threads: every stage and chunk of each.
  static constexpr int kGroupSlots = kStages * kChunks * kGroup;

  uint4* base;  ///< the block's ring: kGroupSlots slots per group of kGroup threads
  uint4* mine;  ///< this thread's slot (0, 0)

  /// The ring at `ring` (bytes(threads) of dynamic shared memory), seen by thread tid.
  __device__ __forceinline__ ThreadRing(uint4* ring, int tid)
      : base(ring), mine(ring + first(tid)) {}

  /// Dynamic shared memory the ring of a block of `threads` threads takes (whole groups).
  static constexpr size_t bytes(int threads) {
    return (static_cast<size_t>(threads) + kGroup - 1) / kGroup * kGroupSlots * 16;
  }

  /// Slot (0, 0) of thread `column`, in slots from the ring's start.
  __device__ __forceinline__ static int first(int column) {
    return column / kGroup * kGroupSlots + column % kGroup;
  }
  __device__ __forceinline__ uint4* slot(int stage, int chunk, int column) const {
    return base + first(column) + (stage * kChunks + chunk) * kGroup;
  }
  __device__ __forceinline__ uint4* slot(int stage, int chunk) const {
    return mine + (stage * kChunks + chunk) * kGroup;
  }

  /// Starts copying kBytes (a multiple of 16; src 16-byte aligned) into chunks chunk,
  /// chunk + 1, ... of `stage`; kCached: through L1 (rows other threads of the block read too);
  /// kKeep (with kCached): a table row also kept in L2 (cp_async_16_table).
  template <int kBytes, bool kCached, bool kKeep = false>
  __device__ __forceinline__ void fetch(int stage, int chunk, const void* src) const {
    static_assert(kBytes % 16 == 0, "ring slots hold 16-byte chunks");
    static_assert(kCached || !kKeep, "rows kept in L2 are copied through L1");
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      const void* from = static_cast<const unsigned char*>(src) + 16 * c;
      if constexpr (kKeep) {
        cp_async_16_table(slot(stage, chunk + c), from);
      } else if constexpr (kCached) {
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
