// RoPE decode experiment (H200): is the single-token time set by the kernel's code size?
// The library's rope (bf16 q [T, 32, 128] and k [T, 8, 128], neox, f32 cos/sin cache of P rows,
// random int64 positions, out of place) against a lean kernel for exactly that case: one block
// per token, thread (x, y) owns pair vector x (8 pairs: channels 8x .. 8x+7 and 64 + 8x ..) of
// head y (q heads, then k heads); the same rotation (rope_rotate_pair, Kahan's difference of
// products) and the same rounding, so the same bits. CUDA-graph replay medians at T = 1, 8, 64,
// and the registers and SASS size of each kernel (the library's: every rope kernel instance;
// printed by cuobjdump in the run script, not here). Question: the library's RoPE kernels are
// 840-2272 instructions, the lean one ~10x fewer; the RMSNorm forward's lean kernel (408 against
// 1896 instructions, same loads) was 0.37 us faster at M = 1. Does a lean decode kernel take RoPE
// T = 1 from 2.16 us toward the 1.5 us goal? Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rope_decode.cu build/libropenorm.a -o rope_decode
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_math.cuh"
#include "experiment_timing.cuh"
#include "reference/host_float.h"
#include "ropenorm/rope.h"
#include "ropenorm/rope_cache.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kHalf = kD / 2, kV = 8, kLanes = kHalf / kV, kHq = 32, kHk = 8;

// Block (kLanes, kHq + kHk), one token per block (grid x = T).
__global__ void __launch_bounds__(kLanes*(kHq + kHk))
    lean_rope_kernel(const bf16* q, const bf16* k, bf16* q_out, bf16* k_out, const float* cache,
                     const int64_t* pos) {
  const int64_t t = blockIdx.x;
  const int j = threadIdx.x, h = threadIdx.y;
  const bool is_q = h < kHq;
  const int64_t head_off = (is_q ? t * kHq + h : t * kHk + (h - kHq)) * kD;
  const bf16* src = (is_q ? q : k) + head_off;
  bf16* dst = (is_q ? q_out : k_out) + head_off;
  griddep_wait();
  griddep_launch_dependents();
  float x0[kV], x1[kV], c[kV], s[kV];
  load_pack<bf16, kV>(src + j * kV, x0);
  load_pack<bf16, kV>(src + kHalf + j * kV, x1);
  const int64_t p = pos[t];
  const float* row = cache + p * kD;
#pragma unroll
  for (int i = 0; i < kV; i += 4) {
    const float4 cv = *reinterpret_cast<const float4*>(row + j * kV + i);
    const float4 sv = *reinterpret_cast<const float4*>(row + kHalf + j * kV + i);
    c[i] = cv.x, c[i + 1] = cv.y, c[i + 2] = cv.z, c[i + 3] = cv.w;
    s[i] = sv.x, s[i + 1] = sv.y, s[i + 2] = sv.z, s[i + 3] = sv.w;
  }
  float y0[kV], y1[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) rope_rotate_pair(x0[i], x1[i], c[i], s[i], &y0[i], &y1[i]);
  store_pack<bf16, kV>(dst + j * kV, y0);
  store_pack<bf16, kV>(dst + kHalf + j * kV, y1);
}

int regs_of(const void* f) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, f));
  return fa.numRegs;
}

void check(const Status& st, const char* what) {
  if (!st.ok()) {
    std::printf("%s: %s\n", what, st.message().c_str());
    std::exit(1);
  }
}

}  // namespace

int main() {
  const int64_t max_t = 64, table = 4096;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  std::vector<uint16_t> hq(qn), hk(kn);
  for (auto& v : hq) v = ref::double_to_bf16_bits(ud(rng));
  for (auto& v : hk) v = ref::double_to_bf16_bits(ud(rng));
  std::vector<float> hc(table * kD);
  RopeConfig rc;
  rc.rotary_dim = kD;
  check(build_rope_cache(rc, table, DType::kFloat32, hc.data()), "cache");
  std::vector<int64_t> hp(max_t);
  for (auto& v : hp) v = static_cast<int64_t>(rng() % table);

  bf16 *q, *k, *qo, *ko, *qo2, *ko2;
  float* cache;
  int64_t* pos;
  CK(cudaMalloc(&q, qn * 2));
  CK(cudaMalloc(&k, kn * 2));
  CK(cudaMalloc(&qo, qn * 2));
  CK(cudaMalloc(&ko, kn * 2));
  CK(cudaMalloc(&qo2, qn * 2));
  CK(cudaMalloc(&ko2, kn * 2));
  CK(cudaMalloc(&cache, hc.size() * 4));
  CK(cudaMalloc(&pos, max_t * 8));
  CK(cudaMemcpy(q, hq.data(), qn * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k, hk.data(), kn * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(cache, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pos, hp.data(), max_t * 8, cudaMemcpyHostToDevice));

  std::printf("lean_rope_kernel: %d registers\n",
              regs_of(reinterpret_cast<const void*>(lean_rope_kernel)));
  for (int64_t t : {int64_t{1}, int64_t{8}, int64_t{64}}) {
    const Device dev = Device::cuda(0);
    const TensorRef tq = TensorRef::contiguous(q, DType::kBFloat16, {t, kHq, kD}, dev);
    const TensorRef tk = TensorRef::contiguous(k, DType::kBFloat16, {t, kHk, kD}, dev);
    const TensorRef tqo = TensorRef::contiguous(qo, DType::kBFloat16, {t, kHq, kD}, dev);
    const TensorRef tko = TensorRef::contiguous(ko, DType::kBFloat16, {t, kHk, kD}, dev);
    RopePositions rp;
    rp.positions = TensorRef::contiguous(pos, DType::kInt64, {t}, dev);
    RopeCosSin cs;
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(cache, DType::kFloat32, {table, kD}, dev);
    RopeParams prm;
    prm.style = RopeStyle::kNeox;
    auto lib = [&](cudaStream_t st) { check(rope(tq, tk, tqo, tko, rp, cs, prm, st), "rope"); };
    auto lean = [&](cudaStream_t st) {
      CK(launch_with_pdl(lean_rope_kernel, dim3(static_cast<unsigned>(t)), dim3(kLanes, kHq + kHk),
                         0, st, q, k, qo2, ko2, cache, pos));
    };
    CK(cudaMemset(qo, 0xff, qn * 2));
    CK(cudaMemset(qo2, 0xff, qn * 2));
    CK(cudaMemset(ko, 0xff, kn * 2));
    CK(cudaMemset(ko2, 0xff, kn * 2));
    lib(nullptr);
    lean(nullptr);
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> a(qn + kn), b(qn + kn);
    CK(cudaMemcpy(a.data(), qo, t * kHq * kD * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(a.data() + qn, ko, t * kHk * kD * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), qo2, t * kHq * kD * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data() + qn, ko2, t * kHk * kD * 2, cudaMemcpyDeviceToHost));
    size_t differ = 0;
    for (int64_t i = 0; i < t * kHq * kD; ++i) differ += a[i] != b[i];
    for (int64_t i = 0; i < t * kHk * kD; ++i) differ += a[qn + i] != b[qn + i];
    const float t_lib = time_graph(lib);
    const float t_lean = time_graph(lean);
    std::printf("T=%3lld graph: library %6.2f us | lean %6.2f us | %zu of %lld elements differ\n",
                static_cast<long long>(t), t_lib, t_lean, differ,
                static_cast<long long>(t * (kHq + kHk) * kD));
  }
  return 0;
}
