// RMSNorm forward at a few thousand rows (H200): at M = 4096 N = 4096 (bf16) the peers benchmark
// had Liger-Kernel's kernel (one program of 8 warps per row: 256 threads of two 16-byte vectors,
// the weight loaded with x in its source; its sm_90 code issues the weight's loads between the
// warp butterfly and the block barrier, liger-forward-sass-sm90.log) at 18.56 us through torch
// against ropenorm's 20.48, whose plan there is the same split on the lean kernel (256 x 2,
// weight after the reduction), launched with programmatic dependent launch (PDL). Question: is the
// difference the split, the weight's load order, or the launch attribute? The public call against
// the library's lean kernel at 512 x 1, 256 x 2 and 128 x 4 (4 vectors per thread: the many-rows
// split), without and with the early weight, each launched with PDL and with a plain launch, bit
// for bit against the public call (y and the rstd; the same chunk_sum chunks at every split). bf16
// x, weight and y, contiguous [M, N], rstd saved, eps 1e-6; cold-L2 CUDA-event medians (the flush a
// kernel before each run), the copy bandwidth of the same run. Ownership as the lean kernel
// (rms_norm_kernels.cuh). At fc9e073 (rms-fwd-mid-rows-fc9e073-*): the early weight slower
// everywhere. At 769e73a (rms-fwd-mid-rows-variants-769e73a-*), with the early weight also held to
// 6 blocks of 256 threads per multiprocessor (its 48 registers otherwise leave 5) and two variants
// of the lean kernel then built for it (x kept as stored, kRawX; a block's loop run once, kOneRow):
// 0 values differing, the bounded early weight slower still (M = 4096 N = 4096 23.46 us against the
// library's 19.90 and 256 x 2's 19.33; spills at 4 vectors per thread, 78.08), x kept as stored
// within 0.4% of the plain form (19.26), the loop run once no help; the two variants were taken out
// again. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/rms_norm_forward_mid_rows.cu build-sm90/libropenorm.a \
//        -o rms_norm_forward_mid_rows
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "experiment_compare.cuh"
#include "experiment_timing.cuh"
#include "rms_experiment_args.cuh"
#include "ropenorm/rms_norm.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

using Kernel = void (*)(const RmsNormKernelArgs);

struct Variant {
  int vpt;
  bool early;
  Kernel kernel;
  int max_threads = core::kRowsMaxThreads;  ///< its launch bound; 6 blocks of 256 when bounded
};

template <int VPT>
void add(std::vector<Variant>& out) {
  out.push_back({VPT, false, rms_norm_lean_kernel<bf16, 8, VPT, false>});
  out.push_back({VPT, true, rms_norm_lean_kernel<bf16, 8, VPT, true>});
  // The early weight held to the plain form's 6 blocks of 256 threads per multiprocessor.
  out.push_back({VPT, true, rms_norm_lean_kernel<bf16, 8, VPT, true, false, 256, 6>, 256});
}

int registers(Kernel k) {
  cudaFuncAttributes attr{};
  CK(cudaFuncGetAttributes(&attr, k));
  return attr.numRegs;
}

}  // namespace

int main() {
  const int64_t kMaxM = 8192, kMaxN = 8192;
  const size_t max_bytes = static_cast<size_t>(kMaxM * kMaxN) * 2;
  void *x, *w, *y, *rstd;
  CK(cudaMalloc(&x, max_bytes));
  CK(cudaMalloc(&y, max_bytes));
  CK(cudaMalloc(&w, kMaxN * 2));
  CK(cudaMalloc(&rstd, kMaxM * 4));
  uint64_t s = 88172645463325252ull;
  std::vector<uint16_t> hx(max_bytes / 2), hw(kMaxN);
  fill_bf16_bits(hx, s, true);
  fill_bf16_bits(hw, s, false);
  CK(cudaMemcpy(x, hx.data(), max_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(w, hw.data(), kMaxN * 2, cudaMemcpyHostToDevice));
  const double copy = copy_bandwidth_gbps(size_t{1} << 30);
  std::printf("copy %.0f GB/s\n", copy);
  std::vector<Variant> vars;
  add<1>(vars);
  add<2>(vars);
  add<4>(vars);
  for (const Variant& v : vars) {
    std::printf("lean x%d%s%s: %d registers\n", v.vpt, v.early ? " early" : "",
                v.max_threads == 256 ? " bound 256 x 6" : "", registers(v.kernel));
  }
  size_t bad = 0;
  for (int64_t n : {4096, 8192}) {
    for (int64_t m : {2048, 4096, 8192}) {
      const size_t count = static_cast<size_t>(m * n);
      const double bytes = 2.0 * count * 2;
      RmsNormKernelArgs a = make_args(x, w, y, nullptr, nullptr, m, n);
      a.rstd = static_cast<float*>(rstd);
      std::vector<uint16_t> ref_y(count), out_y(count);
      std::vector<float> ref_r(m), out_r(m);
      auto run_once = [&](auto launch, std::vector<uint16_t>& oy, std::vector<float>& orr) {
        CK(cudaMemset(y, 0xff, count * 2));
        CK(cudaMemset(rstd, 0xff, m * 4));
        launch();
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(oy.data(), y, count * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(orr.data(), rstd, m * 4, cudaMemcpyDeviceToHost));
      };
      const TensorRef xt = TensorRef::contiguous(x, DType::kBFloat16, {m, n}, Device::cuda(0));
      const TensorRef yt = TensorRef::contiguous(y, DType::kBFloat16, {m, n}, Device::cuda(0));
      const TensorRef wt = TensorRef::contiguous(w, DType::kBFloat16, {n}, Device::cuda(0));
      const TensorRef rt = TensorRef::contiguous(rstd, DType::kFloat32, {m}, Device::cuda(0));
      auto lib = [&] { require_ok(rms_norm(xt, wt, yt, rt, RmsNormParams{})); };
      run_once(lib, ref_y, ref_r);
      const float lib_us = time_med(lib, true, 31);
      std::printf("N=%5lld M=%5lld library %8.2f us %5.1f%% copy\n", static_cast<long long>(n),
                  static_cast<long long>(m), lib_us, 100 * bytes / lib_us / 1e3 / copy);
      for (const Variant& v : vars) {
        const int threads = static_cast<int>(n / 8 / v.vpt);
        if (threads > v.max_threads || threads < 64) continue;
        for (bool pdl : {true, false}) {
          auto launch = [&] {
            if (pdl) {
              CK(launch_with_pdl(v.kernel, dim3(static_cast<unsigned>(m)), dim3(threads), 0,
                                 nullptr, a));
            } else {
              v.kernel<<<static_cast<unsigned>(m), threads>>>(a);
            }
          };
          run_once(launch, out_y, out_r);
          size_t nd = differing(ref_y, out_y);
          for (int64_t i = 0; i < m; ++i) nd += ref_r[i] != out_r[i];
          bad += nd;
          const float us = time_med(launch, true, 31);
          std::printf(
              "N=%5lld M=%5lld lean %3dx%d%s%s %-5s %8.2f us %5.1f%% copy %6.3fx lib  %zu "
              "differ\n",
              static_cast<long long>(n), static_cast<long long>(m), threads, v.vpt,
              v.early ? " early" : "      ", v.max_threads == 256 ? " b6" : "   ",
              pdl ? "pdl" : "plain", us, 100 * bytes / us / 1e3 / copy, us / lib_us, nd);
        }
      }
    }
  }
  std::printf("values differing in all: %zu\n", bad);
  return bad == 0 ? 0 : 1;
}
