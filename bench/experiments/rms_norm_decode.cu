// RMSNorm few-rows experiment (H200): what sets the time of a plain bf16 RMSNorm at one row and
// at a few hundred rows (the decode rows M = 1 N = 4096 and M = 512 N = 8192), and does taking
// the weight's load off the critical path shorten it?
// The library's lean kernel (rms_norm_lean_kernel) loads a row, reduces it (chunk_sum: two block
// barriers), and only then loads the weight: a second dependent memory round trip per row. Its
// kEarlyWeight form ("early-w") issues the weight's loads right after the x loads, before the
// reduction, keeping them as raw 16-bit packs (4 registers per vector); the arithmetic and its
// order are the same, so its output must equal the library's bit for bit.
// `add` as the first argument runs the fused add instead: the public add_rms_norm call against
// the lean kernel's fused-add form (Tr = bf16; no library plan takes it yet), y and s compared.
// Per shape: the public rms_norm call (the plan's kernel), the library's lean kernel at each
// split that covers the row (1, 2 and 4 vectors per thread), and its early-weight
// form at the same splits, from 264 rows on also with 2 and 4 rows per block (a block's next
// row's loads behind its current row's stores). CUDA-graph replay (50 launches per graph; the
// main job takes 20) for M <= 512, cold-L2 event medians above; every output against the public
// call's bit for bit; the copy bandwidth of the same run. Arguments [add] M N run that shape only
// (for a profiler: its first rms_norm kernel is the public call's). Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rms_norm_decode.cu build/libropenorm.a -o rms_norm_decode
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "experiment_timing.cuh"
#include "rms_experiment_args.cuh"
#include "ropenorm/rms_norm.h"
using namespace ropenorm;
using namespace ropenorm::cuda;

// The library's lean kernel at VPT vectors per thread (early: its kEarlyWeight form; fused: its
// fused-add form, Tr = bf16).
template <int VPT, bool kFused>
auto lean_kernel(bool early) {
  using Tr = std::conditional_t<kFused, bf16, NoResidual>;
  return early ? rms_norm_lean_kernel<bf16, 8, VPT, true, Tr>
               : rms_norm_lean_kernel<bf16, 8, VPT, false, Tr>;
}
template <bool kFused>
auto lean_kernel(int vpt, bool early) {
  return vpt == 1   ? lean_kernel<1, kFused>(early)
         : vpt == 2 ? lean_kernel<2, kFused>(early)
                    : lean_kernel<4, kFused>(early);
}
auto lean_kernel(int vpt, bool early, bool fused) {
  return fused ? lean_kernel<true>(vpt, early) : lean_kernel<false>(vpt, early);
}
// rows_per_block > 1: a grid of M / rows_per_block blocks, each taking its rows one after the
// other (the kernel's row loop), so that a block's next row's loads go out behind its current
// row's stores.
void launch_lean(int vpt, bool early, bool fused, int threads, const RmsNormKernelArgs& a,
                 cudaStream_t s, int rows_per_block = 1) {
  const int64_t blocks = (a.m + rows_per_block - 1) / rows_per_block;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 32 ? blocks : 65535 * 32);
  CK(launch_with_pdl(lean_kernel(vpt, early, fused), dim3(grid), dim3(threads), 0, s, a));
}
int regs(int vpt, bool early, bool fused) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, lean_kernel(vpt, early, fused)));
  return fa.numRegs;
}

int main(int argc, char** argv) {
  const int64_t MM = 32768, NN = 8192;
  const bool fused = argc > 1 && std::string(argv[1]) == "add";
  const int arg0 = fused ? 2 : 1;
  bf16 *x, *y, *w, *r = nullptr, *ro = nullptr;
  CK(cudaMalloc(&x, MM * NN * 2));
  CK(cudaMalloc(&y, MM * NN * 2));
  CK(cudaMalloc(&w, NN * 2));
  if (fused) {
    CK(cudaMalloc(&r, MM * NN * 2));
    CK(cudaMalloc(&ro, MM * NN * 2));
  }
  {
    std::vector<uint16_t> h(MM * NN);
    uint64_t s = 88172645463325252ull;
    fill_bf16_bits(h, s, true);
    CK(cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, h.data() + 12345, NN * 2, cudaMemcpyHostToDevice));
    if (fused) {
      fill_bf16_bits(h, s, true);
      CK(cudaMemcpy(r, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    }
  }
  const double copy = copy_bandwidth_gbps(size_t{1} << 30);
  printf("copy %.0f GB/s\n", copy);
  struct Shape {
    int64_t m, n;
  };
  const std::vector<Shape> shapes = {{1, 4096},    {32, 4096},   {132, 4096},  {512, 4096},
                                     {4096, 4096}, {1, 8192},    {132, 8192},  {264, 8192},
                                     {512, 8192},  {4096, 8192}, {32768, 8192}};
  const int64_t only_m = argc > arg0 + 1 ? std::atoll(argv[arg0]) : 0,
                only_n = argc > arg0 + 1 ? std::atoll(argv[arg0 + 1]) : 0;
  size_t bad = 0;
  for (const Shape& sh : shapes) {
    const int64_t M = sh.m, N = sh.n;
    if (only_m > 0 && (M != only_m || N != only_n)) continue;
    const RmsNormKernelArgs a = make_args(x, w, y, r, ro, M, N);
    const double bytes = (fused ? 4.0 : 2.0) * M * N * 2;
    const bool graph = M <= 512;
    // out: y, then (fused) s.
    std::vector<uint16_t> ref, out(M * N * (fused ? 2 : 1));
    auto time = [&](auto run) {
      CK(cudaMemset(y, 0xff, M * N * 2));
      if (fused) CK(cudaMemset(ro, 0xff, M * N * 2));
      const float us = graph ? time_graph(run) : time_med([&] { run(0); }, true, 21);
      CK(cudaMemcpy(out.data(), y, M * N * 2, cudaMemcpyDeviceToHost));
      if (fused) CK(cudaMemcpy(out.data() + M * N, ro, M * N * 2, cudaMemcpyDeviceToHost));
      return us;
    };
    auto rows = [&](void* p) {
      return TensorRef::contiguous(p, DType::kBFloat16, {M, N}, Device::cuda(0));
    };
    const TensorRef wt = TensorRef::contiguous(w, DType::kBFloat16, {N}, Device::cuda(0));
    const float lib_us = time([&](cudaStream_t s) {
      const Status st = fused ? add_rms_norm(rows(x), rows(r), wt, rows(y), rows(ro), TensorRef(),
                                             RmsNormParams{}, s)
                              : rms_norm(rows(x), wt, rows(y), TensorRef(), RmsNormParams{}, s);
      if (!st.ok()) {
        printf("%s\n", st.message().c_str());
        exit(1);
      }
    });
    ref = out;
    printf("%-8s M=%6ld N=%5ld %-11s %8.2f us %6.0f GB/s %5.1f%% copy\n",
           fused ? "lib-add" : "library", (long)M, (long)N, graph ? "cuda_graph" : "cold_l2",
           lib_us, bytes / lib_us / 1e3, 100 * bytes / lib_us / 1e3 / copy);
    const int nvec = static_cast<int>(N / 8);
    for (int vpt : {1, 2, 4}) {
      const int threads = nvec / vpt;
      if (threads > core::kRowsMaxThreads || threads < 64) continue;
      for (int rows_per_block : {1, 2, 4}) {
        if (rows_per_block > 1 && M < 264) continue;
        for (const bool early : {false, true}) {
          const float us = time([&](cudaStream_t s) {
            launch_lean(vpt, early, fused, threads, a, s, rows_per_block);
          });
          size_t ndiff = 0;
          for (size_t k = 0; k < out.size(); ++k) ndiff += out[k] != ref[k];
          bad += ndiff;
          printf(
              "%-8s M=%6ld N=%5ld %3dx%d %d row%s/block regs=%2d %8.2f us %6.0f GB/s %5.1f%% copy"
              "  %5.3fx lib  vs-library: %zu differ\n",
              fused ? (early ? "add-ew" : "add-lean") : (early ? "early-w" : "lean"), (long)M,
              (long)N, threads, vpt, rows_per_block, rows_per_block > 1 ? "s" : " ",
              regs(vpt, early, fused), us, bytes / us / 1e3, 100 * bytes / us / 1e3 / copy,
              lib_us / us, ndiff);
        }
      }
    }
  }
  printf("done: %zu elements differing from the library\n", bad);
  return bad == 0 ? 0 : 1;
}
