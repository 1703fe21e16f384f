// RMSNorm backward lean kernel experiment (H200): the lean kernel (rms_norm_bwd_lean_kernel: rows
// straight into registers, no ring) against the ring kernel of the same plan, each followed by
// the column sum, for bf16 rows at N = 2048, 4096 and 8192 and M from 1 to 4096, in three forms:
// plain (rstd saved), the fused add with ds and dx alone (rstd recomputed: what the torch binding
// runs when x and the residual share a dtype) and the fused add with dresidual written too.
// Both run on the ring kernel's grid and split, so dx, dresidual and dw must be bit for bit the
// same (outputs poisoned before each run; the count of differing values is printed). Times:
// cold-L2 CUDA-event medians; up to 132 rows also CUDA-graph replay (warm L2). Question: what a
// few rows' launch of the ring kernel spends on its code (up to 7456 instructions per instance,
// 45% instruction-fetch stalls at one row), and up to how many rows the lean kernel is faster.
// Answered (bench/results/rms-bwd-lean-nvidia-h200.log, docs/performance.md): up to 528 rows (4
// per SM) it was faster in 61 of 63 cases (plain N = 4096 M = 1 5.52 -> 3.69 us under graph
// replay); past 528 rows, at 4096 and 8192 columns, the ring won 12 of 18 cases; 0 values
// differing.
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/rms_norm_backward_lean.cu build-sm90/libropenorm.a -o
//        rms_norm_backward_lean
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "backward_experiment.cuh"
#include "core/rms_norm_backward_plan.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/rms_norm_backward/rms_norm_backward_typed.h"
#include "experiment_compare.cuh"
#include "experiment_timing.cuh"

using namespace ropenorm;

namespace {

enum class Form { kPlain, kFusedDx, kFusedDres };

const char* form_name(Form f) {
  return f == Form::kPlain ? "plain" : (f == Form::kFusedDx ? "fused dx" : "fused dx+dres");
}

}  // namespace

int main() {
  const int64_t kMaxM = 4096, kMaxN = 8192;
  const BwdBuffers b = alloc_bwd_buffers(kMaxM, kMaxN);
  const int sms = cuda::device_sm_count();
  std::printf("copy bandwidth %.1f GB/s, %d SMs\n", copy_bandwidth_gbps(size_t{1} << 30), sms);
  std::printf("%-14s %5s %5s | %9s %9s %6s | %9s %9s %6s | %s\n", "form", "N", "M", "ring", "lean",
              "ratio", "ring grph", "lean grph", "ratio", "values differing (dx, dres, dw)");
  for (Form form : {Form::kPlain, Form::kFusedDx, Form::kFusedDres}) {
    for (int64_t n : {2048, 4096, 8192}) {
      for (int64_t m : {1, 8, 32, 132, 264, 396, 528, 1024, 2048, 4096}) {
        const bool fused = form != Form::kPlain;
        const bool dres = form == Form::kFusedDres;
        const BwdShape sh = bwd_shape(b.x, b.w, b.rstd, b.dx, b.ws, b.ws_bytes, b.dw, m, n);
        cuda::RmsNormBwdKernelArgs a =
            bwd_args(b.dy, b.x, fused ? b.ds : nullptr, b.w, fused ? nullptr : b.rstd, b.dx,
                     dres ? b.dres : nullptr, b.ws, m, n);
        core::RmsNormBwdPlan p =
            core::plan_rms_norm_backward_ds(n, 8, true, true, 4, fused ? 2 : 0, dres, true);
        auto run = [&](bool lean, cudaStream_t s) {
          core::RmsNormBwdPlan q = p;
          q.lean = lean;
          int64_t grid = 0;
          check(
              cuda::launch_rms_norm_backward_typed<cuda::bf16, cuda::bf16>("lean", a, q, s, &grid),
              "rows");
          check(cuda::launch_column_sum("lean", a.partials, grid, n, DType::kBFloat16, b.dw, s),
                "column sum");
        };
        const size_t count = static_cast<size_t>(m * n);
        std::vector<uint16_t> out[2][3];
        for (int lean = 0; lean < 2; ++lean) {
          CK(cudaMemset(b.dx, 0xff, count * 2));
          CK(cudaMemset(b.dres, 0xff, count * 2));
          CK(cudaMemset(b.dw, 0xff, n * 2));
          run(lean == 1, nullptr);
          CK(cudaDeviceSynchronize());
          out[lean][0] = device_values(b.dx, count);
          out[lean][1] = device_values(b.dres, count);
          out[lean][2] = device_values(b.dw, n);
        }
        const float t_ring = time_med([&] { run(false, nullptr); }, true);
        const float t_lean = time_med([&] { run(true, nullptr); }, true);
        float g_ring = 0.0f, g_lean = 0.0f;
        if (m <= sms) {
          g_ring = time_graph([&](cudaStream_t s) { run(false, s); }, 20);
          g_lean = time_graph([&](cudaStream_t s) { run(true, s); }, 20);
        }
        std::printf(
            "%-14s %5lld %5lld | %9.2f %9.2f %6.3f | %9.2f %9.2f %6.3f | %zu %zu %zu (%s %dx%d)\n",
            form_name(form), static_cast<long long>(n), static_cast<long long>(m), t_ring, t_lean,
            t_lean / t_ring, g_ring, g_lean, m <= sms ? g_lean / g_ring : 0.0f,
            differing(out[0][0], out[1][0]), differing(out[0][1], out[1][1]),
            differing(out[0][2], out[1][2]), core::rms_norm_bwd_path_name(p.path), p.threads,
            p.vpt);
      }
    }
  }
  return 0;
}
