// RMSNorm block-per-row launch-shape experiment (H200): the direct kernel at N = 4096 and 8192
// (bf16, M from 1 to 32768), plain and with the fused add, at every threads x vectors-per-thread
// split that covers the row (512 x 1, 256 x 2, 128 x 4), against the production plan's split
// for that M; CUDA-graph replay for M <= 512 (as the main job), cold-L2 CUDA-event medians
// above, the copy bandwidth of the same run; every variant's output compared bit for bit with
// the production plan's (the reduction is split-invariant, so every split must agree). Answered
// so far (docs/performance.md): N = 4096 at many rows is limited by the bytes a thread has in
// flight (128 x 4 reaches 96% of copy at M = 32768, 256 x 2 70%), while few rows want the widest
// block (M = 1: 512 x 1 in 1.71 us, 128 x 4 2.50 us with the split-invariant reduction, at
// 89ff5f2). Question now: where between the row counts does each split win (the
// plan's kFewRowsPerSm and kMidRowsPerSm)? Each split's registers are printed. Plain rows also
// run the library's lean direct kernel (rms_norm_lean_kernel, taken where plan.lean: aligned rows
// without edge elements, a weight in x's dtype, exact rounding) at 1 and 2 vectors per thread,
// against the direct kernel's output (the same arithmetic in the same order, so the same bits).
// Its form without row strides (26 / 31 registers at 1 / 2 vectors per thread, against 38 / 64
// for the direct kernel) was faster at every row count at those splits
// (bench/results/rms-launch-shapes-lean-21a42b5-nvidia-h200.log), which is why the library has it.
// `ring` as the argument runs ring_mode instead (below).
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rms_norm_launch_shapes.cu build/libropenorm.a -o rms_norm_launch_shapes
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rms_norm_plan.h"
#include "core/row_layout.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "cuda/rms_norm/rms_norm_typed.cuh"
#include "experiment_timing.cuh"
#include "rms_experiment_args.cuh"
using namespace ropenorm;
using namespace ropenorm::cuda;
int ulp_dist(uint16_t a, uint16_t b) {
  auto key = [](uint16_t u) { return (u & 0x8000) ? -(int)(u & 0x7fff) : (int)u; };
  return std::abs(key(a) - key(b));
}
// The direct kernel at VPT vectors per thread, one block per row.
template <typename Tr, int VPT>
const void* direct_kernel() {
  return reinterpret_cast<const void*>(rms_norm_direct_kernel<bf16, Tr, 8, VPT>);
}
template <typename Tr>
const void* direct_kernel(int vpt) {
  return vpt == 1   ? direct_kernel<Tr, 1>()
         : vpt == 2 ? direct_kernel<Tr, 2>()
                    : direct_kernel<Tr, 4>();
}
// The library's lean direct kernel (plan.lean) at VPT vectors per thread, one block per row.
template <int VPT>
const void* lean_ptr() {
  return reinterpret_cast<const void*>(rms_norm_lean_kernel<bf16, 8, VPT>);
}
const void* lean_kernel_of(int vpt) { return vpt == 1 ? lean_ptr<1>() : lean_ptr<2>(); }
void launch_lean(int vpt, int threads, const RmsNormKernelArgs& a, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(a.m < 65535 * 32 ? a.m : 65535 * 32);
  if (vpt == 1) {
    CK(launch_with_pdl(rms_norm_lean_kernel<bf16, 8, 1>, dim3(grid), dim3(threads), 0, s, a));
  } else {
    CK(launch_with_pdl(rms_norm_lean_kernel<bf16, 8, 2>, dim3(grid), dim3(threads), 0, s, a));
  }
}
int regs_of(const void* k) {
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, k));
  return fa.numRegs;
}
// Ring mode (`rms_norm_launch_shapes ring`): rows at many rows per SM, plain and with the fused
// add, aligned (N a multiple of 8) and of varying phase (4095, 4100): the library's plan (the
// block ring for the aligned fused add, the lean or direct kernel otherwise) against the block
// ring kernel at each threads x vectors-per-thread split (2 stages, the weight staged in shared
// memory; plain rows and rows of varying phase have no library ring), each output against the
// plan's bit for bit. At 6b366f2 this mode ran the fused ring at 4 and 2 stages: 2
// stages were faster from M = 2048 on at every N from 2048 to 8192 (N = 8192 M = 32768: 562.9
// against 596.5 us; direct 658.2; bench/results/rms-ring-6b366f2-nvidia-h200.log), hence
// core::kBlockRingStages.
template <typename Tr>
Status launch_ring_split(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  switch (p.vpt) {
    case 1:
      return detail::launch_persistent(rms_norm_rows_kernel<bf16, Tr, 8, 1, 2, false>, a, p, s);
    case 2:
      return detail::launch_persistent(rms_norm_rows_kernel<bf16, Tr, 8, 2, 2, false>, a, p, s);
    default:
      return detail::launch_persistent(rms_norm_rows_kernel<bf16, Tr, 8, 4, 2, false>, a, p, s);
  }
}
void ring_mode(const RmsNormKernelArgs& base, bf16* y, double copy) {
  const int sms = device_sm_count();
  for (int fused = 1; fused >= 0; --fused)
    for (int64_t N : {4096L, 5120L, 7168L, 8192L, 4095L, 4100L})
      for (int64_t M : {2048L, 4096L, 32768L}) {
        RmsNormKernelArgs a =
            make_args(static_cast<bf16*>(const_cast<void*>(base.x)),
                      static_cast<bf16*>(const_cast<void*>(base.weight)), y,
                      fused ? static_cast<bf16*>(const_cast<void*>(base.residual)) : nullptr,
                      static_cast<bf16*>(base.residual_out), M, N);
        const int r_elem = fused ? 2 : 0;
        const bool aligned = N % 8 == 0;  // contiguous rows: aligned exactly when 8 | N
        const core::RmsNormPlan prod =
            core::plan_rms_norm(N, 8, 2, r_elem, true, M, sms, !fused && aligned, aligned);
        std::vector<core::RmsNormPlan> plans = {prod};
        const int64_t nvec = (N + 7) / 8;
        for (int vpt : {1, 2, 4}) {
          const int threads = static_cast<int>((nvec + vpt - 1) / vpt + 31) / 32 * 32;
          if (threads > core::kRowsMaxThreads || threads * vpt > core::kRingMaxVectors) continue;
          core::RmsNormPlan p = prod;
          p.path = core::RmsNormPath::kBlockRing;
          p.lean = false;
          p.threads = threads;
          p.vpt = vpt;
          p.stages = 2;
          p.rows_per_block = 1;
          p.weight_in_smem = true;
          p.smem_bytes = core::ring_smem_bytes(N, true, 1, 8, vpt, 2, threads, 2, r_elem);
          plans.push_back(p);
        }
        std::vector<uint16_t> ref(M * N), out(M * N);
        const double bytes = (fused ? 4.0 : 2.0) * M * N * 2;
        for (size_t i = 0; i < plans.size(); ++i) {
          const core::RmsNormPlan p = plans[i];
          a.weight_in_smem = p.weight_in_smem;
          auto run = [&](cudaStream_t stream) {
            Status st;
            if (i == 0) {
              st = fused ? launch_rms_norm_typed<bf16, bf16>(a, p, stream)
                         : launch_rms_norm_typed<bf16, NoResidual>(a, p, stream);
            } else {
              st = fused ? launch_ring_split<bf16>(a, p, stream)
                         : launch_ring_split<NoResidual>(a, p, stream);
            }
            if (!st.ok()) {
              printf("%s\n", st.message().c_str());
              exit(1);
            }
          };
          CK(cudaMemset(y, 0xff, M * N * 2));
          const float us = time_med([&] { run(0); }, true, 21);
          CK(cudaMemcpy(out.data(), y, M * N * 2, cudaMemcpyDeviceToHost));
          size_t ndiff = 0;
          if (i == 0) {
            ref = out;
          } else {
            for (size_t k = 0; k < out.size(); ++k) ndiff += out[k] != ref[k];
          }
          printf(
              "%s N=%5ld M=%6ld %s %-13s%s threads=%3d vpt=%d stages=%d smem=%6ld %8.2f us "
              "%6.0f GB/s %5.1f%% copy  vs-plan: %zu differ\n",
              fused ? "add_rms" : "rms    ", (long)N, (long)M, i == 0 ? "(plan)" : "      ",
              core::rms_norm_path_name(p.path), p.lean ? " lean" : "     ", p.threads, p.vpt,
              p.stages, (long)p.smem_bytes, us, bytes / us / 1e3, 100 * bytes / us / 1e3 / copy,
              ndiff);
        }
      }
}
int main(int argc, char** argv) {
  const bool ring = argc > 1 && std::string(argv[1]) == "ring";
  const int64_t MM = 32768, NN = 8192;
  bf16 *x, *r, *y, *ro, *w;
  CK(cudaMalloc(&x, MM * NN * 2));
  CK(cudaMalloc(&r, MM * NN * 2));
  CK(cudaMalloc(&y, MM * NN * 2));
  CK(cudaMalloc(&ro, MM * NN * 2));
  CK(cudaMalloc(&w, NN * 2));
  {
    std::vector<uint16_t> h(MM * NN);
    uint64_t s = 88172645463325252ull;
    fill_bf16_bits(h, s, true);
    CK(cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    fill_bf16_bits(h, s, false);
    CK(cudaMemcpy(r, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, h.data(), NN * 2, cudaMemcpyHostToDevice));
  }
  const double copy = copy_bandwidth_gbps(size_t{1} << 30);
  printf("copy %.0f GB/s\n", copy);
  if (ring) {
    ring_mode(make_args(x, w, y, r, ro, MM, NN), y, copy);
    printf("done\n");
    return 0;
  }
  struct V {
    int threads, vpt;
  };
  for (int fused = 0; fused < 2; ++fused)
    for (int64_t N : {4096L, 8192L})
      for (int64_t M : {1L, 32L, 132L, 264L, 512L, 1024L, 2048L, 4096L, 8192L, 16384L, 32768L}) {
        RmsNormKernelArgs a = make_args(x, w, y, fused ? r : nullptr, ro, M, N);
        const core::RmsNormPlan prod =
            core::plan_rms_norm(N, 8, 2, fused ? 2 : 0, true, M, device_sm_count());
        a.weight_in_smem = prod.weight_in_smem;
        std::vector<uint16_t> ref(M * N), out(M * N);
        const double bytes = (fused ? 4.0 : 2.0) * M * N * 2;
        std::vector<V> vs = {{prod.threads, prod.vpt}};
        for (V v : {V{512, 1}, V{256, 2}, V{128, 4}, V{64, 8}}) {
          if (v.vpt * 8 > core::kMaxRegElems) continue;
          if (v.threads * v.vpt * 8 != N &&
              !(v.threads * v.vpt * 8 > N && (v.threads - 32) * v.vpt * 8 < N))
            continue;
          if (v.threads == prod.threads && v.vpt == prod.vpt) continue;
          vs.push_back(v);
        }
        for (size_t i = 0; i < vs.size(); ++i) {
          core::RmsNormPlan p = prod;
          p.threads = vs[i].threads;
          p.vpt = vs[i].vpt;
          auto run = [&](cudaStream_t stream) {
            Status st = fused ? launch_rms_norm_typed<bf16, bf16>(a, p, stream)
                              : launch_rms_norm_typed<bf16, NoResidual>(a, p, stream);
            if (!st.ok()) {
              printf("%s\n", st.message().c_str());
              exit(1);
            }
          };
          CK(cudaMemset(y, 0xff, M * N * 2));
          const float us = M <= 512 ? time_graph(run) : time_med([&] { run(0); }, true, 21);
          CK(cudaMemcpy(out.data(), y, M * N * 2, cudaMemcpyDeviceToHost));
          int maxd = 0;
          size_t ndiff = 0;
          if (i == 0)
            ref = out;
          else
            for (size_t k = 0; k < out.size(); ++k) {
              int d = ulp_dist(out[k], ref[k]);
              ndiff += d != 0;
              maxd = std::max(maxd, d);
            }
          const int regs = fused ? regs_of(direct_kernel<bf16>(vs[i].vpt))
                                 : regs_of(direct_kernel<NoResidual>(vs[i].vpt));
          printf(
              "%s N=%5ld M=%6ld threads=%3d vpt=%d %s regs=%3d %8.2f us %6.0f GB/s %5.1f%% copy  "
              "vs-prod: %zu differ, max %d ulp\n",
              fused ? "add_rms" : "rms    ", (long)N, (long)M, vs[i].threads, vs[i].vpt,
              i == 0 ? "(prod)" : "      ", regs, us, bytes / us / 1e3,
              100 * bytes / us / 1e3 / copy, ndiff, maxd);
          if (fused || vs[i].vpt > core::kLeanMaxVpt) continue;
          // The lean form of the same split, against the production output.
          const int vpt = vs[i].vpt, threads = vs[i].threads;
          auto lean = [&](cudaStream_t stream) { launch_lean(vpt, threads, a, stream); };
          CK(cudaMemset(y, 0xff, M * N * 2));
          const float lus = M <= 512 ? time_graph(lean) : time_med([&] { lean(0); }, true, 21);
          CK(cudaMemcpy(out.data(), y, M * N * 2, cudaMemcpyDeviceToHost));
          size_t ldiff = 0;
          int lmax = 0;
          for (size_t k = 0; k < out.size(); ++k) {
            const int d = ulp_dist(out[k], ref[k]);
            ldiff += d != 0;
            lmax = std::max(lmax, d);
          }
          printf(
              "lean    N=%5ld M=%6ld threads=%3d vpt=%d        regs=%3d %8.2f us %6.0f GB/s "
              "%5.1f%% "
              "copy  vs-prod: %zu differ, max %d ulp\n",
              (long)N, (long)M, threads, vpt, regs_of(lean_kernel_of(vpt)), lus, bytes / lus / 1e3,
              100 * bytes / lus / 1e3 / copy, ldiff, lmax);
        }
      }
  printf("done\n");
}
