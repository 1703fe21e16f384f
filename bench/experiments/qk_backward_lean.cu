// QK-norm + RoPE backward in the lean layout (H200): does the forward's short-run layout (a
// 320-thread block of 8 lanes x 40 heads, one head per thread row, the weights and the dw
// partials in registers) beat the library's backward kernel (lane groups over (token, head)
// items, dw partials read and written in shared memory per item) on long runs?
// bf16 q [T, 32, 128], k [T, 8, 128], dq', dk' of the same shapes, bf16 weights, the forward's
// saved fp32 rstd, neox, f32 cos/sin cache, random int64 positions.
// Ownership of the experiment kernel (grid of B blocks, block (8, 40)):
//  - Tokens: block b owns the contiguous tokens [b C, (b + 1) C), C = ceil(T / B), as the library
//    does; KT of them per round (all KT tokens' loads issued before any arithmetic).
//  - Head: thread row y owns head y of every token (q heads 0 .. 31, then k heads); lane x owns
//    channels 8x .. 8x + 7 and 64 + 8x .. 64 + 8x + 7 (its 8 rotary pairs), so a pair never
//    leaves its lane. The lane's weights and its fp32 dw partials (16 each) live in registers.
//  - Per head vector the library's formulas in the library's order (cuda/qk_norm_rope_backward/
//    qk_norm_rope_backward_math.cuh): g_n = rope_inverse(dout), xh = x r, dot = sum(g_n w xh)
//    (per channel pair a then b, then the butterfly over the 8 lanes), m = dot / D,
//    dx = r fma(-xh, m, g_n w), dw += g_n xh. So dq and dk should be the library's bits.
//  - dw: at the end each thread writes its 16 partials to shared memory [40, 128]; thread c of
//    the first 256 adds column c over the q heads (c < 128) or the k heads in head order and
//    writes the block's partial row ([2, B, 128] fp32); the library's column sum adds the rows.
//    The order differs from the library's (per-group partials in item order), so dw may differ
//    in its last bits: the program reports how many of its bf16 values do and by how many ulps.
// Cold-L2 CUDA-event medians at T = 1024, 4096 and 32768 of the library's qk_norm_rope_backward
// (row kernel and column sum) against the experiment kernel plus the column sum, at KT = 1 and
// 2 tokens per round and 2 or 3 resident blocks per multiprocessor. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/qk_backward_lean.cu build/libropenorm.a -o qk_backward_lean
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_math.cuh"
#include "cuda/rope/rope_math.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "reference/host_float.h"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "ropenorm/rope_cache.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kHalf = kD / 2, kV = 8, kLanes = kHalf / kV, kHq = 32, kHk = 8;
constexpr int kHeads = kHq + kHk, kThreads = kLanes * kHeads;
constexpr float kEps = 1e-6f;

struct BwdArgs {
  const bf16* x[2];   // q, k
  const bf16* gy[2];  // dq', dk'
  bf16* dx[2];        // dq, dk
  const float* rstd[2];
  const bf16* w[2];
  const float* cache;
  const int64_t* pos;
  float* partials;  // [2, gridDim.x, kD]
  int64_t tokens, tokens_per_block;
};

/// One head vector's loads of one token: the lane's two runs of x and of dout, its rstd, the
/// token's position.
struct Item {
  RawVec<bf16, kV> xa, xb, ga, gb;
  float r;
  int64_t p;
};

template <int KT, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) lean_bwd_kernel(const BwdArgs a) {
  __shared__ __align__(16) float part[kHeads][kD];
  const int j = threadIdx.x, h = threadIdx.y;
  const int which = h < kHq ? 0 : 1;
  const int local = which == 0 ? h : h - kHq;
  const int nh = which == 0 ? kHq : kHk;
  const int oa = j * kV, ob = kHalf + j * kV;
  griddep_wait();
  float wa[kV], wb[kV];
  load_pack<bf16, kV>(a.w[which] + oa, wa);
  load_pack<bf16, kV>(a.w[which] + ob, wb);
  float acc_a[kV] = {}, acc_b[kV] = {};
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * a.tokens_per_block;
  const int64_t t_end = t0 + a.tokens_per_block < a.tokens ? t0 + a.tokens_per_block : a.tokens;
  for (int64_t t = t0; t < t_end; t += KT) {
    Item it[KT];
#pragma unroll
    for (int u = 0; u < KT; ++u) {
      const int64_t tu = t + u < t_end ? t + u : t;  // a short last round repeats token t
      const int64_t off = (tu * nh + local) * kD;
      it[u].r = a.rstd[which][tu * nh + local];
      it[u].p = a.pos[tu];
      load_raw<bf16, kV>(a.x[which] + off + oa, it[u].xa);
      load_raw<bf16, kV>(a.x[which] + off + ob, it[u].xb);
      load_raw<bf16, kV>(a.gy[which] + off + oa, it[u].ga);
      load_raw<bf16, kV>(a.gy[which] + off + ob, it[u].gb);
    }
#pragma unroll
    for (int u = 0; u < KT; ++u) {
      if (t + u >= t_end) break;
      float c[kV], sn[kV], xa[kV], xb[kV], ga[kV], gb[kV];
      load_pack<float, kV>(a.cache + it[u].p * kD + oa, c);
      load_pack<float, kV>(a.cache + it[u].p * kD + kHalf + oa, sn);
      widen<bf16, kV>(it[u].xa, xa);
      widen<bf16, kV>(it[u].xb, xb);
      widen<bf16, kV>(it[u].ga, ga);
      widen<bf16, kV>(it[u].gb, gb);
      const float r = it[u].r;
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        float ya, yb;
        rope_rotate_pair(ga[i], gb[i], c[i], -sn[i], &ya, &yb);
        ga[i] = ya;
        gb[i] = yb;
      }
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        xa[i] *= r;
        xb[i] *= r;
        dot = __fmaf_rn(ga[i] * wa[i], xa[i], dot);
        dot = __fmaf_rn(gb[i] * wb[i], xb[i], dot);
      }
      for (int off = kLanes >> 1; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const float m = qk_bwd_mean(dot, kD);
      float da[kV], db[kV];
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        da[i] = qk_bwd_dx(ga[i] * wa[i], xa[i], m, r);
        db[i] = qk_bwd_dx(gb[i] * wb[i], xb[i], m, r);
        acc_a[i] = qk_bwd_dw_add(acc_a[i], ga[i], xa[i]);
        acc_b[i] = qk_bwd_dw_add(acc_b[i], gb[i], xb[i]);
      }
      const int64_t off = ((t + u) * nh + local) * kD;
      store_pack<bf16, kV>(a.dx[which] + off + oa, da);
      store_pack<bf16, kV>(a.dx[which] + off + ob, db);
    }
  }
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    part[h][oa + i] = acc_a[i];
    part[h][ob + i] = acc_b[i];
  }
  __syncthreads();
  const int tid = threadIdx.y * kLanes + threadIdx.x;
  if (tid < 2 * kD) {
    const int wh = tid / kD, ch = tid % kD;
    float sum = 0.0f;
    for (int hh = wh == 0 ? 0 : kHq; hh < (wh == 0 ? kHq : kHeads); ++hh) sum += part[hh][ch];
    a.partials[(static_cast<int64_t>(wh) * gridDim.x + blockIdx.x) * kD + ch] = sum;
  }
}

std::vector<uint16_t> to_host(const bf16* p, size_t n) {
  std::vector<uint16_t> v(n);
  CK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main() {
  const int64_t max_t = 32768, table = 4096;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261203);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16 *gq = device_bf16(random_bf16(rng, qn)), *gk = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *fq = device_bf16({}, qn), *fk = device_bf16({}, kn), *dq = device_bf16({}, qn),
       *dk = device_bf16({}, kn), *dq2 = device_bf16({}, qn), *dk2 = device_bf16({}, kn);
  bf16 *dw = device_bf16({}, 2 * kD), *dw2 = device_bf16({}, 2 * kD);
  const DeviceCosSin csd = device_cos_sin(rng, table, kD, max_t);
  float* cache = csd.cache;
  int64_t* pos = csd.pos;
  float *q_rstd, *k_rstd, *partials;
  CK(cudaMalloc(&q_rstd, max_t * kHq * 4));
  CK(cudaMalloc(&k_rstd, max_t * kHk * 4));
  CK(cudaMalloc(&partials, 2 * 4096 * kD * 4));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("registers: KT 1 / 3 blocks %d, KT 1 / 2 blocks %d, KT 2 / 2 blocks %d\n",
              regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<1, 3>)),
              regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<1, 2>)),
              regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<2, 2>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));

  for (int64_t t : {int64_t{1024}, int64_t{4096}, int64_t{32768}}) {
    const Device d0 = Device::cuda(0);
    auto view = [&](void* p, int64_t heads) {
      return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, kD}, d0);
    };
    const TensorRef twq = TensorRef::contiguous(w, DType::kBFloat16, {kD}, d0);
    const TensorRef twk = TensorRef::contiguous(w + kD, DType::kBFloat16, {kD}, d0);
    const TensorRef trq = TensorRef::contiguous(q_rstd, DType::kFloat32, {t, kHq}, d0);
    const TensorRef trk = TensorRef::contiguous(k_rstd, DType::kFloat32, {t, kHk}, d0);
    RopePositions rp;
    rp.positions = TensorRef::contiguous(pos, DType::kInt64, {t}, d0);
    RopeCosSin cs;
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(cache, DType::kFloat32, {table, kD}, d0);
    RopeParams prm;
    QkNormParams np;
    np.eps = kEps;
    // The forward's saved rstd.
    check(qk_norm_rope(view(q, kHq), view(k, kHk), twq, twk, view(fq, kHq), view(fk, kHk), trq, trk,
                       rp, cs, prm, np, nullptr),
          "forward");
    const size_t ws_bytes = qk_norm_rope_backward_workspace_size(t, kHq, kHk, kD);
    void* ws;
    CK(cudaMalloc(&ws, ws_bytes > 0 ? ws_bytes : 16));
    const TensorRef tws =
        TensorRef::contiguous(ws, DType::kFloat32, {static_cast<int64_t>(ws_bytes / 4)}, d0);
    auto lib = [&] {
      check(qk_norm_rope_backward(view(gq, kHq), view(gk, kHk), view(q, kHq), view(k, kHk), twq,
                                  twk, trq, trk, view(dq, kHq), view(dk, kHk),
                                  TensorRef::contiguous(dw, DType::kBFloat16, {kD}, d0),
                                  TensorRef::contiguous(dw + kD, DType::kBFloat16, {kD}, d0), tws,
                                  rp, cs, prm, np, nullptr),
            "library backward");
    };
    auto lean = [&](auto kernel, int blocks_per_sm) {
      return [&, kernel, blocks_per_sm] {
        const int64_t grid = std::min<int64_t>(t, int64_t{sms} * blocks_per_sm);
        BwdArgs a{};
        a.x[0] = q, a.x[1] = k, a.gy[0] = gq, a.gy[1] = gk, a.dx[0] = dq2, a.dx[1] = dk2;
        a.rstd[0] = q_rstd, a.rstd[1] = k_rstd, a.w[0] = w, a.w[1] = w + kD;
        a.cache = cache, a.pos = pos, a.partials = partials;
        a.tokens = t;
        a.tokens_per_block = (t + grid - 1) / grid;
        CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads), 0,
                           nullptr, a));
        const float* parts[2] = {partials, partials + grid * kD};
        void* outs[2] = {dw2, dw2 + kD};
        check(launch_column_sums("experiment", parts, outs, 2, grid, kD, DType::kBFloat16, nullptr),
              "column sums");
      };
    };
    const auto v13 = lean(lean_bwd_kernel<1, 3>, 3);
    const auto v12 = lean(lean_bwd_kernel<1, 2>, 2);
    const auto v22 = lean(lean_bwd_kernel<2, 2>, 2);
    CK(cudaMemset(dq, 0xff, qn * 2));
    CK(cudaMemset(dk, 0xff, kn * 2));
    lib();
    CK(cudaDeviceSynchronize());
    const size_t nq = t * kHq * kD, nk = t * kHk * kD;
    const auto ref_q = to_host(dq, nq), ref_k = to_host(dk, nk), ref_w = to_host(dw, 2 * kD);
    for (const auto* v : {&v13, &v12, &v22}) {
      CK(cudaMemset(dq2, 0xff, qn * 2));
      CK(cudaMemset(dk2, 0xff, kn * 2));
      CK(cudaMemset(dw2, 0xff, 2 * kD * 2));
      (*v)();
      CK(cudaDeviceSynchronize());
      const auto eq = to_host(dq2, nq), ek = to_host(dk2, nk), ew = to_host(dw2, 2 * kD);
      size_t dx_differ = 0, dw_differ = 0;
      double dw_ulp = 0;
      for (size_t i = 0; i < nq; ++i) dx_differ += eq[i] != ref_q[i];
      for (size_t i = 0; i < nk; ++i) dx_differ += ek[i] != ref_k[i];
      for (int i = 0; i < 2 * kD; ++i) {
        if (ew[i] != ref_w[i]) {
          ++dw_differ;
          const double r = ref::bf16_bits_to_double(ref_w[i]);
          const double ulp = std::ldexp(1.0, std::ilogb(r) - 7);  // bf16: 8 significant bits
          dw_ulp = std::max(dw_ulp, std::fabs(ref::bf16_bits_to_double(ew[i]) - r) / ulp);
        }
      }
      std::printf(
          "  T=%5lld check: %zu dq/dk elements differ, %zu of %d dw values (at most %.1f "
          "ulp)\n",
          static_cast<long long>(t), dx_differ, dw_differ, 2 * kD, dw_ulp);
    }
    const double bytes =
        3.0 * static_cast<double>(nq + nk) * 2 + static_cast<double>(t) * kHeads * 4;
    const float t_lib = time_med(lib, true), t13 = time_med(v13, true), t12 = time_med(v12, true),
                t22 = time_med(v22, true);
    std::printf(
        "T=%5lld cold: library %8.2f us (%6.0f GB/s) | lean KT1 3 blocks %8.2f | KT1 2 "
        "blocks %8.2f | KT2 2 blocks %8.2f us\n",
        static_cast<long long>(t), t_lib, bytes / t_lib / 1e3, t13, t12, t22);
    CK(cudaFree(ws));
  }
  return 0;
}
