// Asynchronous global -> shared copies (cp.async, sm_80+): each thread copies 16-byte (or
// 4-byte) chunks it will read back itself, so only the thread's own wait is needed, never a
// block barrier.
#pragma once

#include <cstdint>

namespace ropenorm::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Starts a 16-byte copy global -> shared (both 16-byte aligned), bypassing L1.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src)
               : "memory");
}

/// Starts a 16-byte copy global -> shared (both 16-byte aligned), through L1 (for data several
/// threads of a block read).
__device__ __forceinline__ void cp_async_16_cached(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src)
               : "memory");
}

/// Starts a 16-byte copy global -> shared (both 16-byte aligned) of a table row (cos/sin): through
/// L1 like cp_async_16_cached, and kept in L2 at the last eviction priority (evict_last), so that
/// the row is still there when a later token of the same position, or the next call with the same
/// positions, reads it while the call's streamed data passes through L2 at the normal priority.
__device__ __forceinline__ void cp_async_16_table(void* smem_dst, const void* gmem_src) {
  uint64_t keep;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(keep));
  asm volatile(
      "cp.async.ca.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)),
      "l"(gmem_src), "l"(keep)
      : "memory");
}

/// Starts a 4-byte copy global -> shared (both 4-byte aligned), through L1.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src)
               : "memory");
}

/// Closes the current group of copies (an empty group is fine).
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most `kPending` of this thread's groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Copies `bytes` (a multiple of 16, both sides 16-byte aligned) as 16-byte chunks; below 16
/// bytes per call (scalar paths) an ordinary load and shared store is used instead.
template <int kBytes>
__device__ __forceinline__ void copy_to_smem(void* smem_dst, const void* gmem_src) {
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      cp_async_16(static_cast<unsigned char*>(smem_dst) + 16 * c,
                  static_cast<const unsigned char*>(gmem_src) + 16 * c);
    }
  } else if constexpr (kBytes == 8) {
    *static_cast<uint2*>(smem_dst) = *static_cast<const uint2*>(gmem_src);
  } else if constexpr (kBytes == 4) {
    *static_cast<uint32_t*>(smem_dst) = *static_cast<const uint32_t*>(gmem_src);
  } else {
    static_assert(kBytes == 2, "copy_to_smem: 2, 4, 8 or a multiple of 16 bytes");
    *static_cast<uint16_t*>(smem_dst) = *static_cast<const uint16_t*>(gmem_src);
  }
}

}  // namespace ropenorm::cuda
