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
// 2 tokens per round and 2 or 3 resident blocks per multiprocessor (and at KT = 1 with the next
// token's position loaded with the current token's data). Then the library's own lean kernel
// (on the library's arguments and lean plan at 2 blocks per multiprocessor) in instances that
// fix facts of the call at compile time (LeanSpec, cuda/rope/rope_lean_spec.h): every fact at
// run time (LeanAny), the lanes per head (LeanLanes), and at D = 128 the lanes plus int64
// positions and cos/sin rows; at D = 128 (T as above) and D = 256 (T = 4096, 32768; two head
// groups of 20 rows); each with its registers and spill bytes, its dq / dk and dw checked
// against the library's call.
// Measured at the first library instances (bench/results/qk-backward-lean-specs-*.log): the
// weights' (w + o) held in registers (a spec fixing them in q/k's dtype) spilled 48 - 64 bytes
// and ran T = 32768 in 294 - 314 us against 267 for the lanes alone with the weights staged, so
// the library stages them. Not part
// of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/qk_backward_lean.cu build/libropenorm.a -o qk_backward_lean
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/qk_norm_rope_backward_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_host.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_lean_kernel.cuh"
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

template <int KT, int kMinBlocks, bool kPrefetch = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks) lean_bwd_kernel(const BwdArgs a) {
  static_assert(!kPrefetch || KT == 1, "the position prefetch is for one token per round");
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
  int64_t p_next = kPrefetch && t0 < t_end ? a.pos[t0] : 0;
  for (int64_t t = t0; t < t_end; t += KT) {
    Item it[KT];
#pragma unroll
    for (int u = 0; u < KT; ++u) {
      const int64_t tu = t + u < t_end ? t + u : t;  // a short last round repeats token t
      const int64_t off = (tu * nh + local) * kD;
      it[u].r = a.rstd[which][tu * nh + local];
      if constexpr (kPrefetch) {
        it[u].p = p_next;
        if (t + 1 < t_end) p_next = a.pos[t + 1];
      } else {
        it[u].p = a.pos[tu];
      }
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

/// Local-memory (spill) bytes per thread of a compiled kernel.
int spill_bytes_of(const void* f) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, f));
  return static_cast<int>(fa.localSizeBytes);
}

std::vector<uint16_t> to_host(const bf16* p, size_t n) {
  std::vector<uint16_t> v(n);
  CK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

/// One backward problem at head_dim d: bf16 q [T, 32, d], k [T, 8, d], dq', dk', bf16 weights,
/// the forward's saved rstd, an f32 cache of 4096 rows and random int64 positions; the library's
/// results (dq, dk, dw) and a second set (dq2, dk2, dw2) for the variants.
struct Problem {
  int64_t d, max_t, table = 4096;
  size_t qn, kn;
  bf16 *q, *k, *gq, *gk, *w, *fq, *fk, *dq, *dk, *dq2, *dk2, *dw, *dw2;
  float *cache, *q_rstd, *k_rstd, *partials;
  int64_t* pos;
};

Problem make_problem(std::mt19937_64& rng, int64_t d, int64_t max_t) {
  Problem p;
  p.d = d;
  p.max_t = max_t;
  p.qn = max_t * kHq * d;
  p.kn = max_t * kHk * d;
  p.q = device_bf16(random_bf16(rng, p.qn));
  p.k = device_bf16(random_bf16(rng, p.kn));
  p.gq = device_bf16(random_bf16(rng, p.qn));
  p.gk = device_bf16(random_bf16(rng, p.kn));
  p.w = device_bf16(random_bf16(rng, 2 * d));
  p.fq = device_bf16({}, p.qn);
  p.fk = device_bf16({}, p.kn);
  p.dq = device_bf16({}, p.qn);
  p.dk = device_bf16({}, p.kn);
  p.dq2 = device_bf16({}, p.qn);
  p.dk2 = device_bf16({}, p.kn);
  p.dw = device_bf16({}, 2 * d);
  p.dw2 = device_bf16({}, 2 * d);
  const DeviceCosSin csd = device_cos_sin(rng, p.table, static_cast<int>(d), max_t);
  p.cache = csd.cache;
  p.pos = csd.pos;
  CK(cudaMalloc(&p.q_rstd, max_t * kHq * 4));
  CK(cudaMalloc(&p.k_rstd, max_t * kHk * 4));
  CK(cudaMalloc(&p.partials, 2 * 4096 * d * 4));
  return p;
}

/// The library's call on the first t tokens of a problem, writing dq / dk / dw (or, through
/// call(true), the variants' dq2 / dk2 / dw2), with its workspace.
struct Case {
  const Problem& p;
  int64_t t;
  TensorRef twq, twk, trq, trk, tws;
  RopePositions rp;
  RopeCosSin cs;
  RopeParams prm;
  QkNormParams np;
  void* ws = nullptr;

  Case(const Problem& pr, int64_t tokens) : p(pr), t(tokens) {
    const Device d0 = Device::cuda(0);
    twq = TensorRef::contiguous(p.w, DType::kBFloat16, {p.d}, d0);
    twk = TensorRef::contiguous(p.w + p.d, DType::kBFloat16, {p.d}, d0);
    trq = TensorRef::contiguous(p.q_rstd, DType::kFloat32, {t, kHq}, d0);
    trk = TensorRef::contiguous(p.k_rstd, DType::kFloat32, {t, kHk}, d0);
    rp.positions = TensorRef::contiguous(p.pos, DType::kInt64, {t}, d0);
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(p.cache, DType::kFloat32, {p.table, p.d}, d0);
    np.eps = kEps;
    const size_t ws_bytes = qk_norm_rope_backward_workspace_size(t, kHq, kHk, p.d);
    CK(cudaMalloc(&ws, ws_bytes > 0 ? ws_bytes : 16));
    tws = TensorRef::contiguous(ws, DType::kFloat32, {static_cast<int64_t>(ws_bytes / 4)}, d0);
    // The forward's saved rstd.
    check(qk_norm_rope(view(p.q, kHq), view(p.k, kHk), twq, twk, view(p.fq, kHq), view(p.fk, kHk),
                       trq, trk, rp, cs, prm, np, nullptr),
          "forward");
  }
  ~Case() { cudaFree(ws); }

  TensorRef view(void* ptr, int64_t heads) const {
    return TensorRef::contiguous(ptr, DType::kBFloat16, {t, heads, p.d}, Device::cuda(0));
  }
  TensorRef dw_view(bf16* dw, int which) const {
    return TensorRef::contiguous(dw + which * p.d, DType::kBFloat16, {p.d}, Device::cuda(0));
  }
  core::QkNormRopeBackwardCall call(bool second) const {
    return core::qk_norm_rope_backward_call(
        view(p.gq, kHq), view(p.gk, kHk), view(p.q, kHq), view(p.k, kHk), twq, twk, trq, trk,
        view(second ? p.dq2 : p.dq, kHq), view(second ? p.dk2 : p.dk, kHk),
        dw_view(second ? p.dw2 : p.dw, 0), dw_view(second ? p.dw2 : p.dw, 1), tws, rp, cs, prm, np);
  }
  void library() const {
    const core::QkNormRopeBackwardCall c = call(false);
    check(qk_norm_rope_backward(c.dq_out, c.dk_out, c.fwd.rope.q, c.fwd.rope.k, c.fwd.wq, c.fwd.wk,
                                c.fwd.q_rstd, c.fwd.k_rstd, c.fwd.rope.q_out, c.fwd.rope.k_out,
                                c.dwq, c.dwk, c.workspace, rp, cs, prm, np, nullptr),
          "library backward");
  }
  double bytes() const {
    return 3.0 * static_cast<double>(t * (kHq + kHk) * p.d) * 2 +
           static_cast<double>(t) * kHeads * 4;
  }
};

/// Runs the library call, then each variant (writing dq2 / dk2 / dw2 after poisoning them),
/// printing how many dq / dk elements and dw values differ from the library's.
void check_variants(const Case& c,
                    const std::vector<std::pair<const char*, std::function<void()>>>& vs) {
  const Problem& p = c.p;
  CK(cudaMemset(p.dq, 0xff, p.qn * 2));
  CK(cudaMemset(p.dk, 0xff, p.kn * 2));
  c.library();
  CK(cudaDeviceSynchronize());
  const size_t nq = c.t * kHq * p.d, nk = c.t * kHk * p.d;
  const auto ref_q = to_host(p.dq, nq), ref_k = to_host(p.dk, nk), ref_w = to_host(p.dw, 2 * p.d);
  for (const auto& [name, v] : vs) {
    CK(cudaMemset(p.dq2, 0xff, p.qn * 2));
    CK(cudaMemset(p.dk2, 0xff, p.kn * 2));
    CK(cudaMemset(p.dw2, 0xff, 2 * p.d * 2));
    v();
    CK(cudaDeviceSynchronize());
    const auto eq = to_host(p.dq2, nq), ek = to_host(p.dk2, nk), ew = to_host(p.dw2, 2 * p.d);
    size_t dx_differ = 0, dw_differ = 0;
    double dw_ulp = 0;
    for (size_t i = 0; i < nq; ++i) dx_differ += eq[i] != ref_q[i];
    for (size_t i = 0; i < nk; ++i) dx_differ += ek[i] != ref_k[i];
    for (int64_t i = 0; i < 2 * p.d; ++i) {
      if (ew[i] != ref_w[i]) {
        ++dw_differ;
        const double r = ref::bf16_bits_to_double(ref_w[i]);
        const double ulp = std::ldexp(1.0, std::ilogb(r) - 7);  // bf16: 8 significant bits
        dw_ulp = std::max(dw_ulp, std::fabs(ref::bf16_bits_to_double(ew[i]) - r) / ulp);
      }
    }
    std::printf(
        "  D=%3lld T=%5lld check %-22s: %zu dq/dk elements differ, %zu of %lld dw values (at "
        "most %.1f ulp)\n",
        static_cast<long long>(p.d), static_cast<long long>(c.t), name, dx_differ, dw_differ,
        static_cast<long long>(2 * p.d), dw_ulp);
  }
}

/// The library's lean kernel `kernel` on the library's arguments and lean plan (2 blocks per
/// multiprocessor) for case c, writing dq2 / dk2 / dw2 (through the library's column sum).
template <typename K>
std::function<void()> library_instance(const Case& c, int sms, K kernel) {
  auto qa = std::make_shared<QkNormRopeBackwardArgs>();
  auto lp = std::make_shared<core::QkNormRopeBackwardPlan>();
  const core::QkNormRopeBackwardCall call = c.call(true);
  core::RopeGeometry geo;
  check(core::validate_qk_norm_rope_backward(call, -1, 0, &geo), "validate");
  core::RopeLeanFacts lf;
  fill_qk_norm_rope_backward_args(call, geo, qa.get(), &lf);
  *lp = core::plan_qk_norm_rope_backward_lean(lf, sms, 2);
  qk_bwd_apply_plan(*lp, c.p.partials, qa.get());
  const int64_t d = c.p.d;
  bf16* dw2 = c.p.dw2;
  float* partials = c.p.partials;
  return [qa, lp, kernel, d, dw2, partials] {
    CK(launch_with_pdl(
        kernel, dim3(static_cast<unsigned>(lp->grid), static_cast<unsigned>(lp->head_groups)),
        dim3(lp->group, lp->rows), 0, nullptr, *qa));
    const int64_t parts = lp->grid * lp->head_groups;
    const float* ps[2] = {partials, partials + parts * d};
    void* outs[2] = {dw2, dw2 + d};
    check(launch_column_sums("experiment", ps, outs, 2, parts, d, DType::kBFloat16, nullptr),
          "column sums");
  };
}

/// The library's lean instances at head_dim D over the token counts ts: registers and spill
/// bytes, the bit checks, then cold-L2 medians against the library's call.
template <typename... K>
void library_instances(const Problem& p, int sms, std::initializer_list<int64_t> ts,
                       const std::vector<const char*>& names, K... kernels) {
  const void* ks[] = {reinterpret_cast<const void*>(kernels)...};
  std::printf("D=%lld library lean instances, registers / spill bytes:",
              static_cast<long long>(p.d));
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf(" %s %d / %d%s", names[i], regs_of(ks[i]), spill_bytes_of(ks[i]),
                i + 1 < names.size() ? "," : "\n");
  }
  for (int64_t t : ts) {
    const Case c(p, t);
    const std::vector<std::function<void()>> fs = {library_instance(c, sms, kernels)...};
    std::vector<std::pair<const char*, std::function<void()>>> vs;
    for (size_t i = 0; i < fs.size(); ++i) vs.emplace_back(names[i], fs[i]);
    check_variants(c, vs);
    const float t_lib = time_med([&] { c.library(); }, true);
    std::printf("D=%3lld T=%5lld cold: library %8.2f us (%6.0f GB/s)", static_cast<long long>(p.d),
                static_cast<long long>(t), t_lib, c.bytes() / t_lib / 1e3);
    for (size_t i = 0; i < fs.size(); ++i)
      std::printf(" | %s %8.2f", names[i], time_med(fs[i], true));
    std::printf(" us\n");
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261203);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf(
      "registers: KT 1 / 3 blocks %d, KT 1 / 2 blocks %d, KT 2 / 2 blocks %d, KT 1 / 2 blocks "
      "prefetch %d\n",
      regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<1, 3>)),
      regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<1, 2>)),
      regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<2, 2>)),
      regs_of(reinterpret_cast<const void*>(lean_bwd_kernel<1, 2, true>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));

  {
    const Problem p = make_problem(rng, kD, 32768);
    for (int64_t t : {int64_t{1024}, int64_t{4096}, int64_t{32768}}) {
      const Case c(p, t);
      auto lean = [&](auto kernel, int blocks_per_sm) -> std::function<void()> {
        return [&, kernel, blocks_per_sm] {
          const int64_t grid = std::min<int64_t>(t, int64_t{sms} * blocks_per_sm);
          BwdArgs a{};
          a.x[0] = p.q, a.x[1] = p.k, a.gy[0] = p.gq, a.gy[1] = p.gk, a.dx[0] = p.dq2,
          a.dx[1] = p.dk2;
          a.rstd[0] = p.q_rstd, a.rstd[1] = p.k_rstd, a.w[0] = p.w, a.w[1] = p.w + kD;
          a.cache = p.cache, a.pos = p.pos, a.partials = p.partials;
          a.tokens = t;
          a.tokens_per_block = (t + grid - 1) / grid;
          CK(launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kLanes, kHeads), 0,
                             nullptr, a));
          const float* parts[2] = {p.partials, p.partials + grid * kD};
          void* outs[2] = {p.dw2, p.dw2 + kD};
          check(
              launch_column_sums("experiment", parts, outs, 2, grid, kD, DType::kBFloat16, nullptr),
              "column sums");
        };
      };
      const std::vector<std::pair<const char*, std::function<void()>>> vs = {
          {"KT1/3", lean(lean_bwd_kernel<1, 3>, 3)},
          {"KT1/2", lean(lean_bwd_kernel<1, 2>, 2)},
          {"KT2/2", lean(lean_bwd_kernel<2, 2>, 2)},
          {"KT1/2 prefetch", lean(lean_bwd_kernel<1, 2, true>, 2)}};
      check_variants(c, vs);
      const float t_lib = time_med([&] { c.library(); }, true);
      std::printf("D=128 T=%5lld cold: library %8.2f us (%6.0f GB/s)", static_cast<long long>(t),
                  t_lib, c.bytes() / t_lib / 1e3);
      for (const auto& [name, v] : vs) std::printf(" | %s %8.2f", name, time_med(v, true));
      std::printf(" us\n");
    }
    using P = LeanPositions;
    library_instances(
        p, sms, {1024, 4096, 32768}, {"any", "lanes 8", "lanes 8 + i64 rows"},
        qk_norm_rope_backward_lean_kernel<bf16, float, false, LeanAny>,
        qk_norm_rope_backward_lean_kernel<bf16, float, false, LeanLanes<8>>,
        qk_norm_rope_backward_lean_kernel<bf16, float, false, LeanSpec<8, P::kInt64, true, false>>);
  }
  {
    const Problem p = make_problem(rng, 256, 32768);
    library_instances(p, sms, {4096, 32768}, {"any", "lanes 16"},
                      qk_norm_rope_backward_lean_kernel<bf16, float, false, LeanAny>,
                      qk_norm_rope_backward_lean_kernel<bf16, float, false, LeanLanes<16>>);
  }
  return 0;
}
