// RMSNorm fused add on a lean kernel (H200): would the plain op's lean direct kernel
// (rms_norm_lean_kernel: rows loaded straight into registers, no edge elements, the weight in x's
// dtype) serve the fused add faster than the library's plan (the block ring from more than
// kMidRowsPerSm rows per multiprocessor, the direct kernel below)? At 9e7ef23 the fused add ran
// M = 32768 N = 4096 at 86-88% of copy on the ring, where the plain op's lean kernel runs at 99%
// and Liger-Kernel's fused add at 97% (peers-nvidia-h200.log, 66d4481).
// The experiment kernel is the lean kernel with the residual: thread t loads its VPT vectors of x
// and of the residual, s = round(x + r) (the direct kernel's process_row order), stores s (right
// away, or with kLateS after the reduction), then chunk_sum of the same chunks, rstd and
// y = s * r * (w + o) as the lean kernel; so y, s and the rstd must equal the public call's bit for
// bit. kEarlyWeight as the lean kernel's. bf16 x, residual, weight, y and s, contiguous [M, N],
// out of place, rstd saved, eps 1e-6. Per shape: the public add_rms_norm call, then the lean fused
// kernel at every split of 64 .. 512 threads x 1, 2, 4 vectors per thread, each with and without
// the early weight and the late s; CUDA-graph replay up to 512 rows, cold-L2 event medians above;
// the copy bandwidth of the same run. At 87f1391 (rms-fused-lean-87f1391-nvidia-h200.log) the
// widest split won (N = 4096 M = 32768 258.98 us at 512 x 1 against the library's 292.06), which
// de7ddb5 takes into the library (rms_norm_lean_kernel's kFused form). Ownership as the lean kernel
// (rms_norm_kernels.cuh): block b owns rows b, b + gridDim.x, ...; thread t owns vectors t, t +
// blockDim.x, ... of x, the residual, s and y of each; thread 0 writes the rstd. Not part of the
// build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/rms_norm_fused_lean.cu build/libropenorm.a -o rms_norm_fused_lean
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "experiment_timing.cuh"
#include "rms_experiment_args.cuh"
#include "ropenorm/rms_norm.h"
using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int V = 8;

template <int VPT, bool kEarlyWeight, bool kLateS>
__global__ void __launch_bounds__(core::kRowsMaxThreads)
    lean_fused_kernel(const RmsNormKernelArgs a) {
  __shared__ float scratch[VPT * core::kRowsMaxThreads / 32];
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  const int nvec = static_cast<int>(a.n / V);
  const bf16* w = static_cast<const bf16*>(a.weight);
  const int64_t n = a.n;  // contiguous rows: row m starts at m * n in every tensor
  griddep_wait();
  griddep_launch_dependents();
  for (int64_t row = blockIdx.x; row < a.m; row += gridDim.x) {
    const bf16* x = static_cast<const bf16*>(a.x) + row * n;
    const bf16* r = static_cast<const bf16*>(a.residual) + row * n;
    bf16* s_row = static_cast<bf16*>(a.residual_out) + row * n;
    float v[VPT][V], rv[VPT][V];
    float part[VPT];
    RawVec<bf16, V> w_raw[kEarlyWeight ? VPT : 1];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nvec) {
        load_pack<bf16, V>(x + static_cast<int64_t>(j) * V, v[k]);
        load_pack<bf16, V>(r + static_cast<int64_t>(j) * V, rv[k]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = rv[k][i] = 0.0f;
      }
    }
    if constexpr (kEarlyWeight) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int j = tid + k * nthreads;
        if (j < nvec) load_raw<bf16, V>(w + static_cast<int64_t>(j) * V, w_raw[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
#pragma unroll
      for (int i = 0; i < V; ++i) v[k][i] = round_through<bf16>(v[k][i] + rv[k][i]);
      if (!kLateS && j < nvec) store_pack<bf16, V>(s_row + static_cast<int64_t>(j) * V, v[k]);
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      part[k] = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) part[k] += v[k][i] * v[k][i];
    }
    const float rstd = rms_rstd(chunk_sum<VPT, core::kRowsMaxThreads>(part, scratch), a.n, a.eps);
    if (a.rstd != nullptr && tid == 0) a.rstd[row] = rstd;
    bf16* y = static_cast<bf16*>(a.y) + row * n;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = tid + k * nthreads;
      if (j < nvec) {
        if constexpr (kLateS) store_pack<bf16, V>(s_row + static_cast<int64_t>(j) * V, v[k]);
        float wf[V];
        if constexpr (kEarlyWeight) {
          widen<bf16, V>(w_raw[k], wf);
        } else {
          load_pack<bf16, V>(w + static_cast<int64_t>(j) * V, wf);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = rms_apply_exact(v[k][i], rstd, wf[i] + a.w_offset);
        store_pack<bf16, V>(y + static_cast<int64_t>(j) * V, v[k]);
      }
    }
  }
}

using Kernel = void (*)(const RmsNormKernelArgs);

template <int VPT>
Kernel pick(bool early, bool late) {
  if (early) return late ? lean_fused_kernel<VPT, true, true> : lean_fused_kernel<VPT, true, false>;
  return late ? lean_fused_kernel<VPT, false, true> : lean_fused_kernel<VPT, false, false>;
}
Kernel pick(int vpt, bool early, bool late) {
  return vpt == 1 ? pick<1>(early, late) : vpt == 2 ? pick<2>(early, late) : pick<4>(early, late);
}
int regs(Kernel k) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, k));
  return fa.numRegs;
}

}  // namespace

int main() {
  const int64_t MM = 32768, NN = 8192;
  bf16 *x, *r, *y, *s, *w;
  float* rstd;
  for (bf16** p : {&x, &r, &y, &s}) CK(cudaMalloc(p, MM * NN * 2));
  CK(cudaMalloc(&w, NN * 2));
  CK(cudaMalloc(&rstd, MM * 4));
  {
    std::vector<uint16_t> h(MM * NN);
    uint64_t st = 88172645463325252ull;
    fill_bf16_bits(h, st, true);
    CK(cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, h.data() + 12345, NN * 2, cudaMemcpyHostToDevice));
    fill_bf16_bits(h, st, true);
    CK(cudaMemcpy(r, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  const double copy = copy_bandwidth_gbps(size_t{1} << 30);
  printf("copy %.0f GB/s\n", copy);
  size_t bad = 0;
  for (int64_t N : {4096, 5120, 7168, 8192}) {
    for (int64_t M : {1, 32, 512, 4096, 32768}) {
      RmsNormKernelArgs a = make_args(x, w, y, r, s, M, N);
      a.rstd = rstd;
      const double bytes = 4.0 * M * N * 2 + M * 4.0;
      const bool graph = M <= 512;
      const size_t count = static_cast<size_t>(M * N);
      std::vector<uint16_t> ref_y(count), ref_s(count), out_y(count), out_s(count);
      std::vector<float> ref_r(M), out_r(M);
      auto time = [&](auto run) {
        CK(cudaMemset(y, 0xff, count * 2));
        CK(cudaMemset(s, 0xff, count * 2));
        CK(cudaMemset(rstd, 0xff, M * 4));
        const float us = graph ? time_graph(run) : time_med([&] { run(0); }, true, 21);
        CK(cudaMemcpy(out_y.data(), y, count * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(out_s.data(), s, count * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(out_r.data(), rstd, M * 4, cudaMemcpyDeviceToHost));
        return us;
      };
      auto view = [&](void* p) {
        return TensorRef::contiguous(p, DType::kBFloat16, {M, N}, Device::cuda(0));
      };
      const TensorRef wt = TensorRef::contiguous(w, DType::kBFloat16, {N}, Device::cuda(0));
      const TensorRef rt = TensorRef::contiguous(rstd, DType::kFloat32, {M}, Device::cuda(0));
      const float lib_us = time([&](cudaStream_t st) {
        require_ok(add_rms_norm(view(x), view(r), wt, view(y), view(s), rt, RmsNormParams{}, st));
      });
      ref_y = out_y;
      ref_s = out_s;
      ref_r = out_r;
      printf("%-13s M=%6ld N=%5ld %-10s %8.2f us %6.0f GB/s %5.1f%% copy\n", "library", (long)M,
             (long)N, graph ? "cuda_graph" : "cold_l2", lib_us, bytes / lib_us / 1e3,
             100 * bytes / lib_us / 1e3 / copy);
      const int nvec = static_cast<int>(N / V);
      for (int vpt : {1, 2, 4}) {
        const int threads = nvec / vpt;
        if (threads > core::kRowsMaxThreads || threads < 64 || nvec % vpt != 0) continue;
        for (const bool early : {false, true}) {
          for (const bool late : {false, true}) {
            const Kernel k = pick(vpt, early, late);
            const unsigned grid = static_cast<unsigned>(M < 65535 * 32 ? M : 65535 * 32);
            const float us = time([&](cudaStream_t st) {
              CK(launch_with_pdl(k, dim3(grid), dim3(threads), 0, st, a));
            });
            size_t ndiff = 0;
            for (size_t i = 0; i < count; ++i)
              ndiff += (out_y[i] != ref_y[i]) + (out_s[i] != ref_s[i]);
            for (int64_t i = 0; i < M; ++i) ndiff += out_r[i] != ref_r[i];
            bad += ndiff;
            printf(
                "%-13s M=%6ld N=%5ld %3dx%d regs=%2d %8.2f us %6.0f GB/s %5.1f%% copy %6.3fx lib"
                "  %zu differ\n",
                early ? (late ? "lean early+lateS" : "lean early") : (late ? "lean lateS" : "lean"),
                (long)M, (long)N, threads, vpt, regs(k), us, bytes / us / 1e3,
                100 * bytes / us / 1e3 / copy, lib_us / us, ndiff);
          }
        }
      }
    }
  }
  printf("done: %zu values differing from the library\n", bad);
  return bad == 0 ? 0 : 1;
}
