// Column-sum experiment (H200): the second stage of the weight-gradient reductions. Question:
// how much of the RMSNorm backward at M = 4096 is the column sum of its partial rows (528 rows
// of N fp32 on 132 SMs, 8.6 MB at N = 4096), and does a form with more bytes in flight (16-byte
// loads, 64 slices of 4-row batches, launched with programmatic dependent launch) shorten it?
// Times the former kernel (8 slices of scalar loads, copied here as `column_sum_before`) against
// the library's launch_column_sum with the partials hot in L2 (as the row kernel leaves them)
// and cold, checks both against a float64 sum and the library's twice for equal bits; then the
// public rms_norm_backward (bf16, saved rstd) against its row kernel alone and the row kernel
// followed by the former column sum, cold-L2 CUDA-event medians.
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/column_sum.cu build/libropenorm.a -o column_sum
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backward_experiment.cuh"
#include "core/rms_norm_backward_plan.h"
#include "core/row_layout.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_typed.h"
#include "experiment_timing.cuh"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"

using namespace ropenorm;

namespace {

__global__ void column_sum_before(const float* __restrict__ partials, int64_t parts, int64_t cols,
                                  float* __restrict__ out) {
  __shared__ float slice_sum[8][32];
  const int lane = threadIdx.x % 32;
  const int slice = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float acc = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t p = slice; p < parts; p += 8) acc += partials[p * cols + c];
  }
  slice_sum[slice][lane] = acc;
  __syncthreads();
  if (slice == 0 && c < cols) {
    float total = slice_sum[0][lane];
    for (int j = 1; j < 8; ++j) total += slice_sum[j][lane];
    out[c] = total;
  }
}

void launch_before(const float* partials, int64_t parts, int64_t cols, float* out) {
  column_sum_before<<<static_cast<unsigned>((cols + 31) / 32), 256>>>(partials, parts, cols, out);
}

void column_sums() {
  std::printf("column sums alone (us; hot: partials in L2, cold: L2 evicted)\n");
  struct Shape {
    int64_t parts, cols;
  };
  for (Shape sh : {Shape{528, 1024}, Shape{528, 4096}, Shape{528, 8192}, Shape{528, 4095},
                   Shape{264, 128}, Shape{132, 65536}}) {
    const size_t count = static_cast<size_t>(sh.parts) * sh.cols;
    std::vector<float> h(count);
    unsigned s = 7;
    for (auto& v : h) {
      s = s * 1664525u + 1013904223u;
      v = static_cast<float>(static_cast<int>(s >> 8) - (1 << 23)) / (1 << 20);
    }
    float *p, *o1, *o2, *o3;
    CK(cudaMalloc(&p, count * 4));
    CK(cudaMalloc(&o1, sh.cols * 4));
    CK(cudaMalloc(&o2, sh.cols * 4));
    CK(cudaMalloc(&o3, sh.cols * 4));
    CK(cudaMemcpy(p, h.data(), count * 4, cudaMemcpyHostToDevice));
    auto before = [&] { launch_before(p, sh.parts, sh.cols, o1); };
    auto after = [&] {
      check(cuda::launch_column_sum("exp", p, sh.parts, sh.cols, DType::kFloat32, o2, nullptr),
            "column sum");
    };
    const float bh = time_med(before, false, 51), bc = time_med(before, true, 31);
    const float ah = time_med(after, false, 51), ac = time_med(after, true, 31);
    check(cuda::launch_column_sum("exp", p, sh.parts, sh.cols, DType::kFloat32, o3, nullptr),
          "column sum");
    CK(cudaDeviceSynchronize());
    std::vector<float> g1(sh.cols), g2(sh.cols), g3(sh.cols);
    CK(cudaMemcpy(g1.data(), o1, sh.cols * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g2.data(), o2, sh.cols * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g3.data(), o3, sh.cols * 4, cudaMemcpyDeviceToHost));
    double e1 = 0, e2 = 0;
    for (int64_t c = 0; c < sh.cols; ++c) {
      double ref = 0, mag = 0;
      for (int64_t q = 0; q < sh.parts; ++q) {
        ref += h[q * sh.cols + c];
        mag += std::fabs(h[q * sh.cols + c]);
      }
      e1 = std::max(e1, std::fabs(g1[c] - ref) / mag);
      e2 = std::max(e2, std::fabs(g2[c] - ref) / mag);
    }
    const bool same = std::memcmp(g2.data(), g3.data(), sh.cols * 4) == 0;
    std::printf(
        "parts %4lld cols %6lld: before %7.2f hot %7.2f cold | after %7.2f hot %7.2f cold | "
        "err/sum|p| before %.1e after %.1e | after run-to-run %s\n",
        static_cast<long long>(sh.parts), static_cast<long long>(sh.cols), bh, bc, ah, ac, e1, e2,
        same ? "same bits" : "DIFFER");
    CK(cudaFree(p));
    CK(cudaFree(o1));
    CK(cudaFree(o2));
    CK(cudaFree(o3));
  }
}

void backward_share() {
  std::printf("\nrms_norm_backward bf16, saved rstd, cold L2 (us)\n");
  const int64_t kMaxM = 32768, kMaxN = 8192;
  const BwdBuffers b = alloc_bwd_buffers(kMaxM, kMaxN);
  void *x = b.x, *dy = b.dy, *dx = b.dx, *w = b.w, *dw = b.dw, *rstd = b.rstd, *ws = b.ws;
  const size_t ws_bytes = b.ws_bytes;
  float* dwf;
  CK(cudaMalloc(&dwf, kMaxN * 4));
  for (int64_t n : {1024, 4096, 8192}) {
    for (int64_t m : {1024, 4096, 32768}) {
      const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
      const TensorRef &tx = sh.x, &tw = sh.w, &tr = sh.rstd, &tws = sh.ws, &tdw = sh.dw;
      RmsNormBackwardParams bp;
      bp.eps = 1e-6f;
      auto api = [&] {
        check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), tx, tw, tr,
                                rows(dx, DType::kBFloat16, m, n), tdw, tws, bp),
              "backward");
      };
      const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, nullptr, w, rstd, dx, nullptr, ws, m, n);
      const core::RmsNormBwdPlan plan = core::plan_rms_norm_backward(n, 8, true, true, 4, true);
      int64_t grid = 0;
      auto rows_only = [&] {
        check(cuda::launch_rms_norm_backward_typed<cuda::bf16, cuda::bf16>("exp", a, plan, nullptr,
                                                                           &grid),
              "rows");
      };
      auto rows_before = [&] {
        rows_only();
        launch_before(a.partials, grid, n, dwf);
      };
      const float t_api = time_med(api, true, 31);
      const float t_rows = time_med(rows_only, true, 31);
      const float t_before = time_med(rows_before, true, 31);
      std::printf(
          "N=%5lld M=%6lld (%s %dx%d x%d rows, %lld partial rows): API %7.2f | rows kernel %7.2f | "
          "rows + former column sum %7.2f\n",
          static_cast<long long>(n), static_cast<long long>(m),
          core::rms_norm_bwd_path_name(plan.path), plan.threads, plan.vpt, plan.rows_per_block,
          static_cast<long long>(grid), t_api, t_rows, t_before);
    }
  }
}

}  // namespace

int main() {
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  column_sums();
  backward_share();
  return 0;
}
