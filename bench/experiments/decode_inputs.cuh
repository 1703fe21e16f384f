// Helpers shared by the RoPE / QK-norm + RoPE experiments (decode.cu, qk_backward_lean.cu,
// qk_forward_persistent.cu, rope_lean_run.cu, lean_trigger.cu, lean_head_split.cu,
// lean_run_dynamic.cu, table_l2.cu; not part of the build): a library Status check, a kernel's
// register count, device results copied back as bits, the standard shape's device inputs (random
// bf16 values in [-2, 2), the default f32 cos/sin cache, random int64 positions in [0, P)), its
// public views and QK-norm + RoPE call record, and the library's kernel arguments of a validated
// RoPE or QK-norm + RoPE call; the RoPE experiments' heads (RopeHeads) and their check of each
// variant's outputs bit for bit against a reference (check_variants).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/qk_norm_rope_validate.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/rope/rope_host.h"
#include "experiment_timing.cuh"
#include "reference/host_float.h"
#include "ropenorm/rope_cache.h"
#include "ropenorm/status.h"

/// Exits with the message when a library call failed.
inline void check(const ropenorm::Status& st, const char* what) {
  if (!st.ok()) {
    std::printf("%s: %s\n", what, st.message().c_str());
    std::exit(1);
  }
}

/// Registers per thread of a compiled kernel.
inline int regs_of(const void* f) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, f));
  return fa.numRegs;
}

/// The first n 16-bit elements at device pointer p, as bits.
inline std::vector<uint16_t> to_host16(const void* p, size_t n) {
  std::vector<uint16_t> v(n);
  CK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

/// The first n 32-bit elements at device pointer p, as bits.
inline std::vector<uint32_t> to_host32(const void* p, size_t n) {
  std::vector<uint32_t> v(n);
  CK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

/// n random bf16 values in [-2, 2), as bits.
inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = ropenorm::ref::double_to_bf16_bits(ud(rng));
  return v;
}

/// A device copy of host bf16 bits (n = h.size(); empty h: n uninitialised elements).
inline ropenorm::cuda::bf16* device_bf16(const std::vector<uint16_t>& h, size_t n = 0) {
  ropenorm::cuda::bf16* p;
  const size_t count = h.empty() ? n : h.size();
  CK(cudaMalloc(&p, count * 2));
  if (!h.empty()) CK(cudaMemcpy(p, h.data(), count * 2, cudaMemcpyHostToDevice));
  return p;
}

/// The heads of the RoPE experiments on the device: random bf16 q [max_t, hq, max_d] and k
/// [max_t, hk, max_d], and two pairs of outputs of those sizes (reference, variant),
/// uninitialised.
struct RopeHeads {
  size_t qn, kn;  ///< elements of q and of k
  ropenorm::cuda::bf16 *q, *k, *yq, *yk, *yq2, *yk2;
};
inline RopeHeads rope_heads(std::mt19937_64& rng, int64_t max_t, int hq, int hk, int64_t max_d) {
  RopeHeads h;
  h.qn = static_cast<size_t>(max_t * hq * max_d);
  h.kn = static_cast<size_t>(max_t * hk * max_d);
  h.q = device_bf16(random_bf16(rng, h.qn));
  h.k = device_bf16(random_bf16(rng, h.kn));
  h.yq = device_bf16({}, h.qn);
  h.yk = device_bf16({}, h.kn);
  h.yq2 = device_bf16({}, h.qn);
  h.yk2 = device_bf16({}, h.kn);
  return h;
}

/// Runs each variant vs[i] on the variant outputs h.yq2, h.yk2 (poisoned first) and prints
/// (prefixed by `label`) how many of their first nq and nk elements differ from ref_q, ref_k
/// (bits), with the first difference when there is one; first, how many reference elements
/// still hold the poison 0xffff (a NaN no finite rotation gives: the reference must have
/// overwritten it, or a variant that writes nothing would match it).
inline void check_variants(const char* label, const std::vector<std::string>& names,
                           const std::vector<std::function<void()>>& vs, const RopeHeads& h,
                           size_t nq, size_t nk, const std::vector<uint16_t>& ref_q,
                           const std::vector<uint16_t>& ref_k) {
  size_t unwritten = 0;
  for (size_t i = 0; i < nq; ++i) unwritten += ref_q[i] == 0xffff;
  for (size_t i = 0; i < nk; ++i) unwritten += ref_k[i] == 0xffff;
  std::printf("  %s reference elements left poisoned: %zu\n", label, unwritten);
  for (size_t vi = 0; vi < vs.size(); ++vi) {
    CK(cudaMemset(h.yq2, 0xff, h.qn * 2));
    CK(cudaMemset(h.yk2, 0xff, h.kn * 2));
    vs[vi]();
    CK(cudaDeviceSynchronize());
    const auto eq = to_host16(h.yq2, nq), ek = to_host16(h.yk2, nk);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < nq + nk; ++i) {
      const uint16_t got = i < nq ? eq[i] : ek[i - nq];
      const uint16_t want = i < nq ? ref_q[i] : ref_k[i - nq];
      if (got != want && differ++ == 0) first = i;
    }
    std::printf("  %s check %s: %zu elements differ", label, names[vi].c_str(), differ);
    if (differ != 0) {
      std::printf(" (first: element %zu of q then k, 0x%04x against 0x%04x)", first,
                  first < nq ? eq[first] : ek[first - nq],
                  first < nq ? ref_q[first] : ref_k[first - nq]);
    }
    std::printf("\n");
  }
}

/// The default f32 cos/sin cache of `rows` positions and rotary dim d, and `tokens` random
/// positions below `rows`, on the device.
struct DeviceCosSin {
  float* cache;
  int64_t* pos;
};
inline DeviceCosSin device_cos_sin(std::mt19937_64& rng, int64_t rows, int d, int64_t tokens) {
  std::vector<float> hc(rows * d);
  ropenorm::RopeConfig rc;
  rc.rotary_dim = d;
  check(ropenorm::build_rope_cache(rc, rows, ropenorm::DType::kFloat32, hc.data()), "cache");
  std::vector<int64_t> hp(tokens);
  for (auto& v : hp) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  DeviceCosSin out;
  CK(cudaMalloc(&out.cache, hc.size() * 4));
  CK(cudaMalloc(&out.pos, tokens * 8));
  CK(cudaMemcpy(out.cache, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(out.pos, hp.data(), tokens * 8, cudaMemcpyHostToDevice));
  return out;
}

/// The public call's views of cs: its `tokens` int64 positions, and its cache of `rows` rows of
/// rotary dim d.
inline ropenorm::RopePositions positions_of(const DeviceCosSin& cs, int64_t tokens) {
  ropenorm::RopePositions rp;
  rp.positions = ropenorm::TensorRef::contiguous(cs.pos, ropenorm::DType::kInt64, {tokens},
                                                 ropenorm::Device::cuda(0));
  return rp;
}
inline ropenorm::RopeCosSin cache_of(const DeviceCosSin& cs, int64_t rows, int d) {
  ropenorm::RopeCosSin c;
  c.kind = ropenorm::CosSinKind::kCache;
  c.cache = ropenorm::TensorRef::contiguous(cs.cache, ropenorm::DType::kFloat32, {rows, d},
                                            ropenorm::Device::cuda(0));
  return c;
}

/// The public calls' views of the standard shape at t tokens: bf16 heads [t, heads, 128]
/// (view), fp32 rstd [t, heads] (rstd), cs's positions and cache of t rows (rp, cache), and the
/// weights at w (wq: q's 128 values, wk: k's, after them).
struct StandardViews {
  int64_t t;
  ropenorm::RopePositions rp;
  ropenorm::RopeCosSin cache;
  ropenorm::TensorRef wq, wk;
  StandardViews(const DeviceCosSin& cs, int64_t tokens, ropenorm::cuda::bf16* w)
      : t(tokens),
        rp(positions_of(cs, tokens)),
        cache(cache_of(cs, tokens, 128)),
        wq(ropenorm::TensorRef::contiguous(w, ropenorm::DType::kBFloat16, {128},
                                           ropenorm::Device::cuda(0))),
        wk(ropenorm::TensorRef::contiguous(w + 128, ropenorm::DType::kBFloat16, {128},
                                           ropenorm::Device::cuda(0))) {}
  ropenorm::TensorRef view(void* p, int64_t heads) const {
    return ropenorm::TensorRef::contiguous(p, ropenorm::DType::kBFloat16, {t, heads, 128},
                                           ropenorm::Device::cuda(0));
  }
  ropenorm::TensorRef rstd(float* p, int64_t heads) const {
    return ropenorm::TensorRef::contiguous(p, ropenorm::DType::kFloat32, {t, heads},
                                           ropenorm::Device::cuda(0));
  }
};

/// The call record of the standard shape at T tokens: bf16 q [T, 32, 128] and k [T, 8, 128]
/// (outputs qo, ko), bf16 weights w (q's D values, then k's), neox, the f32 cache of `table`
/// rows and the int64 positions of cs, eps epsilon; no rstd.
inline ropenorm::core::QkNormRopeCall standard_qk_call(
    ropenorm::cuda::bf16* q, ropenorm::cuda::bf16* k, ropenorm::cuda::bf16* qo,
    ropenorm::cuda::bf16* ko, ropenorm::cuda::bf16* w, const DeviceCosSin& cs, int64_t t,
    int64_t table, float eps) {
  using ropenorm::DType;
  using ropenorm::TensorRef;
  constexpr int64_t kD = 128, kHq = 32, kHk = 8;
  const ropenorm::Device dev = ropenorm::Device::cuda(0);
  ropenorm::core::QkNormRopeCall c;
  ropenorm::core::RopeCall& r = c.rope;
  r.q = TensorRef::contiguous(q, DType::kBFloat16, {t, kHq, kD}, dev);
  r.k = TensorRef::contiguous(k, DType::kBFloat16, {t, kHk, kD}, dev);
  r.q_out = TensorRef::contiguous(qo, DType::kBFloat16, {t, kHq, kD}, dev);
  r.k_out = TensorRef::contiguous(ko, DType::kBFloat16, {t, kHk, kD}, dev);
  r.positions.positions = TensorRef::contiguous(cs.pos, DType::kInt64, {t}, dev);
  r.cos_sin.kind = ropenorm::CosSinKind::kCache;
  r.cos_sin.cache = TensorRef::contiguous(cs.cache, DType::kFloat32, {table, kD}, dev);
  r.params.style = ropenorm::RopeStyle::kNeox;
  c.wq = TensorRef::contiguous(w, DType::kBFloat16, {kD}, dev);
  c.wk = TensorRef::contiguous(w + kD, DType::kBFloat16, {kD}, dev);
  c.norm.eps = eps;
  return c;
}

/// The largest grid of at most max_grid blocks that divides t tokens (every block of an
/// interleaved persistent grid then takes the same number of rounds; 1 when none larger does).
inline int64_t dividing_grid(int64_t t, int64_t max_grid) {
  for (int64_t g = std::min(t, max_grid); g > 1; --g) {
    if (t % g == 0) return g;
  }
  return 1;
}

/// The library's kernel arguments for a QK-norm + RoPE call, validated as the public call is.
inline ropenorm::cuda::QkNormRopeArgs qk_norm_rope_args_of(
    const ropenorm::core::QkNormRopeCall& call) {
  ropenorm::core::RopeGeometry geo;
  check(ropenorm::core::validate_qk_norm_rope(call, -1, &geo), "validate qk_norm_rope");
  ropenorm::cuda::QkNormRopeArgs qa{};
  ropenorm::core::QkNormRopeFacts facts;
  ropenorm::cuda::fill_qk_norm_rope_args(call, geo, &qa, &facts);
  return qa;
}

/// The library's kernel arguments for a RoPE call, validated as the public call is; with
/// `facts`, also the facts its planner reads (cuda::rope_lean_facts at the call's access width).
inline ropenorm::cuda::RopeKernelArgs rope_args_of(const ropenorm::core::RopeCall& call,
                                                   ropenorm::core::RopeLeanFacts* facts = nullptr) {
  ropenorm::core::RopeGeometry geo;
  check(ropenorm::core::validate_rope(call, -1, &geo), "validate rope");
  ropenorm::cuda::RopeKernelArgs ra{};
  ropenorm::cuda::fill_rope_args(call, geo, &ra);
  if (facts != nullptr) {
    *facts = ropenorm::cuda::rope_lean_facts(call, geo,
                                             ropenorm::cuda::rope_access_width(call, geo, ra));
  }
  return ra;
}
