// RMSNorm few-rows experiment (H200): what sets the time of a plain bf16 RMSNorm at one row and
// at a few hundred rows (the decode rows M = 1 N = 4096 and M = 512 N = 8192), and does taking
// the weight's load off the critical path shorten it?
// The library's lean kernel (rms_norm_lean_kernel) loads a row, reduces it (chunk_sum: two block
// barriers), and only then loads the weight: a second dependent memory round trip per row. Its
// kEarlyWeight form ("early-w") issues the weight's loads right after the x loads, before the
// reduction, keeping them as raw 16-bit packs (4 registers per vector); the arithmetic and its
// order are the same, so its output must equal the library's bit for bit.
// Per shape: the public rms_norm call (the plan's kernel), the library's lean kernel at each
// split that covers the row (1, 2 and 4 vectors per thread), and its early-weight
// form at the same splits, from 264 rows on also with 2 and 4 rows per block (a block's next
// row's loads behind its current row's stores). CUDA-graph replay (50 launches per graph; the
// main job takes 20) for M <= 512, cold-L2 event medians above; every output against the public
// call's bit for bit; the copy bandwidth of the same run. Arguments M N run that shape only (for a
// profiler: its first rms_norm kernel is the public call's). Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rms_norm_decode.cu build/libropenorm.a -o rms_norm_decode
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

// The library's lean kernel at VPT vectors per thread (early: its kEarlyWeight form).
template <int VPT>
auto lean_kernel(bool early) {
  return early ? rms_norm_lean_kernel<bf16, 8, VPT, true> : rms_norm_lean_kernel<bf16, 8, VPT>;
}
auto lean_kernel(int vpt, bool early) {
  return vpt == 1   ? lean_kernel<1>(early)
         : vpt == 2 ? lean_kernel<2>(early)
                    : lean_kernel<4>(early);
}
// rows_per_block > 1: a grid of M / rows_per_block blocks, each taking its rows one after the
// other (the kernel's row loop), so that a block's next row's loads go out behind its current
// row's stores.
void launch_lean(int vpt, bool early, int threads, const RmsNormKernelArgs& a, cudaStream_t s,
                 int rows_per_block = 1) {
  const int64_t blocks = (a.m + rows_per_block - 1) / rows_per_block;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 32 ? blocks : 65535 * 32);
  CK(launch_with_pdl(lean_kernel(vpt, early), dim3(grid), dim3(threads), 0, s, a));
}
int regs(int vpt, bool early) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, lean_kernel(vpt, early)));
  return fa.numRegs;
}

int main(int argc, char** argv) {
  const int64_t MM = 32768, NN = 8192;
  bf16 *x, *y, *w;
  CK(cudaMalloc(&x, MM * NN * 2));
  CK(cudaMalloc(&y, MM * NN * 2));
  CK(cudaMalloc(&w, NN * 2));
  {
    std::vector<uint16_t> h(MM * NN);
    uint64_t s = 88172645463325252ull;
    fill_bf16_bits(h, s, true);
    CK(cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, h.data() + 12345, NN * 2, cudaMemcpyHostToDevice));
  }
  const double copy = copy_bandwidth_gbps(size_t{1} << 30);
  printf("copy %.0f GB/s\n", copy);
  struct Shape {
    int64_t m, n;
  };
  const std::vector<Shape> shapes = {{1, 4096},    {32, 4096},   {132, 4096},  {512, 4096},
                                     {4096, 4096}, {1, 8192},    {132, 8192},  {264, 8192},
                                     {512, 8192},  {4096, 8192}, {32768, 8192}};
  const int64_t only_m = argc > 2 ? std::atoll(argv[1]) : 0,
                only_n = argc > 2 ? std::atoll(argv[2]) : 0;
  size_t bad = 0;
  for (const Shape& sh : shapes) {
    const int64_t M = sh.m, N = sh.n;
    if (only_m > 0 && (M != only_m || N != only_n)) continue;
    const RmsNormKernelArgs a = make_args(x, w, y, nullptr, nullptr, M, N);
    const double bytes = 2.0 * M * N * 2;
    const bool graph = M <= 512;
    std::vector<uint16_t> ref(M * N), out(M * N);
    auto time = [&](auto run) {
      CK(cudaMemset(y, 0xff, M * N * 2));
      const float us = graph ? time_graph(run) : time_med([&] { run(0); }, true, 21);
      CK(cudaMemcpy(out.data(), y, M * N * 2, cudaMemcpyDeviceToHost));
      return us;
    };
    const TensorRef xt = TensorRef::contiguous(x, DType::kBFloat16, {M, N}, Device::cuda(0));
    const TensorRef yt = TensorRef::contiguous(y, DType::kBFloat16, {M, N}, Device::cuda(0));
    const TensorRef wt = TensorRef::contiguous(w, DType::kBFloat16, {N}, Device::cuda(0));
    const float lib_us = time([&](cudaStream_t s) {
      const Status st = rms_norm(xt, wt, yt, TensorRef(), RmsNormParams{}, s);
      if (!st.ok()) {
        printf("%s\n", st.message().c_str());
        exit(1);
      }
    });
    ref = out;
    printf("%-8s M=%6ld N=%5ld %-11s %8.2f us %6.0f GB/s %5.1f%% copy\n", "library", (long)M,
           (long)N, graph ? "cuda_graph" : "cold_l2", lib_us, bytes / lib_us / 1e3,
           100 * bytes / lib_us / 1e3 / copy);
    const int nvec = static_cast<int>(N / 8);
    for (int vpt : {1, 2, 4}) {
      const int threads = nvec / vpt;
      if (threads > core::kRowsMaxThreads || threads < 64) continue;
      for (int rows : {1, 2, 4}) {
        if (rows > 1 && M < 264) continue;
        for (const bool early : {false, true}) {
          const float us =
              time([&](cudaStream_t s) { launch_lean(vpt, early, threads, a, s, rows); });
          size_t ndiff = 0;
          for (size_t k = 0; k < out.size(); ++k) ndiff += out[k] != ref[k];
          bad += ndiff;
          printf(
              "%-8s M=%6ld N=%5ld %3dx%d %d row%s/block regs=%2d %8.2f us %6.0f GB/s %5.1f%% copy"
              "  %5.3fx lib  vs-library: %zu differ\n",
              early ? "early-w" : "lean", (long)M, (long)N, threads, vpt, rows,
              rows > 1 ? "s" : " ", regs(vpt, early), us, bytes / us / 1e3,
              100 * bytes / us / 1e3 / copy, lib_us / us, ndiff);
        }
      }
    }
  }
  printf("done: %zu elements differing from the library\n", bad);
  return bad == 0 ? 0 : 1;
}
