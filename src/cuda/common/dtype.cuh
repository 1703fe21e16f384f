// Device-side element types: the C++ type of each DType, conversions to and from fp32 (one
// round-to-nearest-even per conversion), and vector loads/stores of V consecutive elements.
//
// Ownership: these are per-thread helpers; the thread that calls them owns the V elements it
// loads or stores. Vector accesses are split into 16-byte transactions; callers guarantee the
// alignment the launcher checked (min(16, V * sizeof(T)) bytes).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::kFloat16;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBFloat16;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(f16 v) { return __half2float(v); }
__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ f16 from_float<f16>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

/// Round an fp32 value to T and back: the value a T tensor would hold.
template <typename T>
__device__ __forceinline__ float round_through(float v) {
  return to_float(from_float<T>(v));
}

/// How an element is held in registers between load and conversion: its bits (uint16_t) for the
/// 16-bit types, the value for f32. Plain integer storage keeps the packs below trivially
/// copyable, so each 16-byte chunk moves with one vector instruction (the cuda_bf16/cuda_fp16
/// classes have user-defined copies, which split struct copies into 2-byte accesses).
template <typename T>
struct Storage {
  using type = uint16_t;
};
template <>
struct Storage<float> {
  using type = float;
};

template <typename T>
__device__ __forceinline__ float storage_to_float(typename Storage<T>::type s);
template <>
__device__ __forceinline__ float storage_to_float<float>(float s) {
  return s;
}
template <>
__device__ __forceinline__ float storage_to_float<bf16>(uint16_t s) {
  return __bfloat162float(__ushort_as_bfloat16(s));
}
template <>
__device__ __forceinline__ float storage_to_float<f16>(uint16_t s) {
  return __half2float(__ushort_as_half(s));
}

template <typename T>
__device__ __forceinline__ typename Storage<T>::type float_to_storage(float v);
template <>
__device__ __forceinline__ float float_to_storage<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ uint16_t float_to_storage<bf16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <>
__device__ __forceinline__ uint16_t float_to_storage<f16>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

/// V consecutive elements of T (as Storage<T>), aligned for vector access.
template <typename T, int V>
struct alignas(sizeof(T) * V <= 16 ? sizeof(T) * V : 16) Pack {
  typename Storage<T>::type v[V];
};

/// The machine word of B bytes (B = 2, 4, 8 or 16).
template <int B>
struct Word;
template <>
struct Word<16> {
  using type = uint4;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};

/// Loads a pack of at most 16 bytes with one access of its size.
template <typename P>
__device__ __forceinline__ P load_word(const void* p) {
  static_assert(sizeof(P) <= 16, "one access moves at most 16 bytes");
  union {
    typename Word<sizeof(P)>::type w;
    P pk;
  } u;
  u.w = *reinterpret_cast<const typename Word<sizeof(P)>::type*>(p);
  return u.pk;
}
/// Load V elements of T starting at p (aligned to min(16, V * sizeof(T))) and widen to fp32.
template <typename T, int V>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[V]) {
  constexpr int kPerChunk = (16 / sizeof(T)) < V ? (16 / sizeof(T)) : V;
  constexpr int kChunks = V / kPerChunk;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const Pack<T, kPerChunk> pk = load_word<Pack<T, kPerChunk>>(p + c * kPerChunk);
#pragma unroll
    for (int i = 0; i < kPerChunk; ++i) out[c * kPerChunk + i] = storage_to_float<T>(pk.v[i]);
  }
}

/// V elements of T as stored (no widening): half the registers of fp32 for 16-bit types.
template <typename T, int V>
struct RawVec {
  typename Storage<T>::type v[V];
};

/// Load V elements of T without widening.
template <typename T, int V>
__device__ __forceinline__ void load_raw(const T* p, RawVec<T, V>& out) {
  constexpr int kPerChunk = (16 / sizeof(T)) < V ? (16 / sizeof(T)) : V;
  constexpr int kChunks = V / kPerChunk;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const Pack<T, kPerChunk> pk = load_word<Pack<T, kPerChunk>>(p + c * kPerChunk);
#pragma unroll
    for (int i = 0; i < kPerChunk; ++i) out.v[c * kPerChunk + i] = pk.v[i];
  }
}

/// Widen V raw elements to fp32.
template <typename T, int V>
__device__ __forceinline__ void widen(const RawVec<T, V>& in, float (&out)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = storage_to_float<T>(in.v[i]);
}

/// Load one element of a run-time dtype as fp32.
__device__ __forceinline__ float load_dyn(const void* base, DType dt, int64_t off) {
  if (dt == DType::kBFloat16) return to_float(static_cast<const bf16*>(base)[off]);
  if (dt == DType::kFloat16) return to_float(static_cast<const f16*>(base)[off]);
  return static_cast<const float*>(base)[off];
}

/// Stores a pack built from explicit 32-bit words (16-bit types: two elements per word) with one
/// vector store per chunk (st.global.cg: outputs stream through L2, not L1).
template <typename T, int K>
__device__ __forceinline__ void store_chunk(T* p, const typename Storage<T>::type (&e)[K]) {
  if constexpr (sizeof(T) == 4) {
    if constexpr (K == 4) {
      __stcg(reinterpret_cast<float4*>(p), make_float4(e[0], e[1], e[2], e[3]));
    } else if constexpr (K == 2) {
      __stcg(reinterpret_cast<float2*>(p), make_float2(e[0], e[1]));
    } else {
      *reinterpret_cast<float*>(p) = e[0];
    }
  } else {
    if constexpr (K == 1) {
      *reinterpret_cast<uint16_t*>(p) = e[0];
    } else {
      uint32_t w[K / 2];
#pragma unroll
      for (int i = 0; i < K / 2; ++i) {
        w[i] = static_cast<uint32_t>(e[2 * i]) | (static_cast<uint32_t>(e[2 * i + 1]) << 16);
      }
      if constexpr (K == 8) {
        __stcg(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
      } else if constexpr (K == 4) {
        __stcg(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
      } else {
        *reinterpret_cast<uint32_t*>(p) = w[0];
      }
    }
  }
}

/// Narrow V fp32 values to T (one rounding each) and store at p (aligned).
template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[V]) {
  constexpr int kPerChunk = (16 / sizeof(T)) < V ? (16 / sizeof(T)) : V;
  constexpr int kChunks = V / kPerChunk;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    typename Storage<T>::type e[kPerChunk];
#pragma unroll
    for (int i = 0; i < kPerChunk; ++i) e[i] = float_to_storage<T>(in[c * kPerChunk + i]);
    store_chunk<T, kPerChunk>(p + c * kPerChunk, e);
  }
}

/// Load V elements of a tensor whose dtype is known only at run time (uniform branch).
template <int V>
__device__ __forceinline__ void load_pack_dyn(const void* base, DType dt, int64_t off,
                                              float (&out)[V]) {
  if (dt == DType::kBFloat16) {
    load_pack<bf16, V>(static_cast<const bf16*>(base) + off, out);
  } else if (dt == DType::kFloat16) {
    load_pack<f16, V>(static_cast<const f16*>(base) + off, out);
  } else {
    load_pack<float, V>(static_cast<const float*>(base) + off, out);
  }
}

/// Store V fp32 values into a tensor whose dtype is known only at run time (uniform branch).
template <int V>
__device__ __forceinline__ void store_pack_dyn(void* base, DType dt, int64_t off,
                                               const float (&in)[V]) {
  if (dt == DType::kBFloat16) {
    store_pack<bf16, V>(static_cast<bf16*>(base) + off, in);
  } else if (dt == DType::kFloat16) {
    store_pack<f16, V>(static_cast<f16*>(base) + off, in);
  } else {
    store_pack<float, V>(static_cast<float*>(base) + off, in);
  }
}

}  // namespace ropenorm::cuda
