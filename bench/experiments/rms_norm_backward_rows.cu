// RMSNorm backward row-kernel experiment (H200): the public rms_norm_backward and
// add_rms_norm_backward (bf16, contiguous rows, bf16 weight, saved rstd or recomputed) at
// M = 4096 and 32768, N = 4096 and 8192, cold-L2 CUDA-event medians against the copy bandwidth of
// the same run; built against two library versions it times one against the other. With the
// argument "once" it runs each shape once (for a profiler); with "grid" it also times the block
// ring at 4 vectors per thread with its resident blocks per SM capped at 4 ... 1 (function
// grid_cap: fewer partial rows); with "narrow" it also times rows of
// N = 256, 512 and 1024 (the warp-per-row ring) at other rows per block, ring depths and as the
// block ring (function narrow), and single rows by part (function single); with "stages" it also
// times the plain ring kernel at 2 (the library's), 3 and 4 stages (function stages), with
// "general" the general ring kernel at 2 and 3 (function general), with "fixed" the plain call's
// per-launch cost by row count (function fixed), with "odd [N ...]" rows of varying phase (N =
// 4095 unless given) by split and ring depth (function odd); with "splits" it also times
// the block-per-row ring kernel at every threads x vectors-per-thread split that fits, for the
// plain op, the fused add and the fused add with dresidual absent (dx alone written) (the
// most elementwise ulps by which dx differs from the production plan's at M = 4096: a different
// reduction order, amplified where g and xh * mean nearly cancel). Question: what sets the time
// of a row in the ring kernel, whose plain op at N = 4096 moved 60% of the fused add's bytes in
// the same time. Answered (bench/results/bwd-splits-*-nvidia-h200.log, docs/performance.md):
// about 425 warp instructions per row per warp at 512 x 1 (ncu: 57% issue-slot use), so 4 vectors
// per thread win at many rows, and a 2-stage ring beat a 4-stage one at every split. At 772e28e a
// "tail" mode timed the plain call with its last rows in tail blocks past the resident grid
// (through a split 772e28e's library accepted, since removed;
// rms-bwd-tail-772e28e-nvidia-h200.log); the mode was removed with it. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rms_norm_backward_rows.cu build/libropenorm.a -o rms_norm_backward_rows
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backward_experiment.cuh"
#include "core/rms_norm_backward_plan.h"
#include "core/row_layout.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/rms_norm_backward/rms_norm_backward_kernels.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_typed.h"
#include "experiment_compare.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"

using namespace ropenorm;

namespace {

int ulp_dist(uint16_t a, uint16_t b) {
  auto key = [](uint16_t u) { return (u & 0x8000) ? -(int)(u & 0x7fff) : (int)u; };
  return std::abs(key(a) - key(b));
}

// dev's values after poisoning them and running `call` once.
template <typename Call>
std::vector<uint16_t> poisoned_run(Call&& call, void* dev, size_t count) {
  CK(cudaMemset(dev, 0xff, count * 2));
  call();
  CK(cudaDeviceSynchronize());
  return device_values(dev, count);
}

// Launches ring kernel `kernel` of plan p (its block shape and dynamic shared memory) directly on
// the persistent grid core::bwd_grid sizes from the blocks that fit per SM; false when none fits.
bool launch_ring(void (*kernel)(cuda::RmsNormBwdKernelArgs), const cuda::RmsNormBwdKernelArgs& a,
                 const core::RmsNormBwdPlan& p, int64_t* grid) {
  const size_t smem = static_cast<size_t>(p.smem_bytes);
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess) {
    return false;
  }
  const bool warp = p.path == core::RmsNormBwdPath::kWarpPerRow;
  const dim3 block = warp ? dim3(32, p.rows_per_block) : dim3(p.threads);
  int resident = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, block.x * block.y, smem));
  if (resident == 0) return false;
  *grid = core::bwd_grid(a.m, a.n, p, resident, cuda::device_sm_count());
  kernel<<<static_cast<unsigned>(*grid), block, smem>>>(a);
  return true;
}

// The block-per-row ring plan at vpt vectors per thread (threads 0 when the split does not
// fit), shared memory as core::plan_rms_norm_backward charges it.
core::RmsNormBwdPlan split_plan(int64_t n, int vpt, int ring_elem_bytes) {
  core::RmsNormBwdPlan p;
  p.path = core::RmsNormBwdPath::kBlockPerRow;
  p.vec = 8;
  p.vpt = vpt;
  const int64_t lanes = core::bwd_table_lanes(n, 8);
  p.threads = static_cast<int>((lanes + vpt - 1) / vpt + 31) / 32 * 32;
  p.rows_per_block = 1;
  p.stages = core::kBwdBlockStages;
  p.smem_acc = false;
  p.smem_bytes = core::bwd_smem_bytes(p, ring_elem_bytes, true);
  if (p.threads > core::kBwdMaxThreads || p.threads * vpt < lanes ||
      (p.threads - 32) * vpt >= lanes || p.smem_bytes > core::kBwdSmemBudgetWide) {
    p.threads = 0;
  }
  return p;
}

// The row kernel of plan p, then the column sum of its partial rows into dw.
void rows_then_sum(const char* op, const cuda::RmsNormBwdKernelArgs& a,
                   const core::RmsNormBwdPlan& p, void* dw, cudaStream_t s) {
  int64_t grid = 0;
  check(cuda::launch_rms_norm_backward_typed<cuda::bf16, cuda::bf16>(op, a, p, s, &grid), "rows");
  check(cuda::launch_column_sum(op, a.partials, grid, a.n, DType::kBFloat16, dw, s), "column sum");
}

// The public call on bf16 rows [m, n] of shape sh: add_rms_norm_backward (ds in, dresidual out,
// sh's rstd) when fused, else rms_norm_backward with plain_rstd (sh's, or none: recomputed).
void public_backward(bool fused, const TensorRef& plain_rstd, void* dy, void* ds, void* dx,
                     void* dres, const BwdShape& sh, int64_t m, int64_t n,
                     const RmsNormBackwardParams& bp) {
  if (fused) {
    check(add_rms_norm_backward(rows(dy, DType::kBFloat16, m, n), rows(ds, DType::kBFloat16, m, n),
                                sh.x, sh.w, sh.rstd, rows(dx, DType::kBFloat16, m, n),
                                rows(dres, DType::kBFloat16, m, n), sh.dw, sh.ws, bp),
          "fused");
  } else {
    check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, sh.w, plain_rstd,
                            rows(dx, DType::kBFloat16, m, n), sh.dw, sh.ws, bp),
          "backward");
  }
}

void splits(void* x, void* dy, void* ds, void* dx, void* dres, void* w, void* dw, void* rstd,
            void* ws, size_t ws_bytes) {
  std::printf("\nblock-per-row ring kernel by split (rstd saved; us, cold L2)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  std::vector<uint16_t> ref, got;
  enum Form { kPlain, kFused, kShared };  // kShared: the fused add with dresidual absent
  for (int64_t n : {4096, 8192}) {
    for (Form form : {kPlain, kFused, kShared}) {
      const bool fused = form != kPlain;
      for (int64_t m : {4096, 32768}) {
        const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
        const size_t count = static_cast<size_t>(m) * n;
        const bool compare = m == 4096;
        if (compare) {
          public_backward(fused, sh.rstd, dy, ds, dx, dres, sh, m, n, bp);
          ref.resize(count);
          CK(cudaMemcpy(ref.data(), dx, count * 2, cudaMemcpyDeviceToHost));
        }
        const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, fused ? ds : nullptr, w, rstd, dx,
                                                      form == kFused ? dres : nullptr, ws, m, n);
        std::printf("%s N=%5lld M=%6lld:",
                    form == kPlain   ? "plain        "
                    : form == kFused ? "fused add    "
                                     : "fused, dx only",
                    static_cast<long long>(n), static_cast<long long>(m));
        for (int vpt : {1, 2, 4}) {
          const core::RmsNormBwdPlan p = split_plan(n, vpt, fused ? 6 : 4);
          if (p.threads == 0) continue;
          auto run = [&] { rows_then_sum("split", a, p, dw, nullptr); };
          const float t = time_med(run, true);
          int worst = 0;
          if (compare) {
            got.resize(count);
            CK(cudaMemcpy(got.data(), dx, count * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < count; ++i) worst = std::max(worst, ulp_dist(ref[i], got[i]));
          }
          std::printf("  %dx%d S%d %7.2f", p.threads, vpt, p.stages, t);
          if (compare) std::printf(" (%d ulp)", worst);
        }
        std::printf("\n");
      }
    }
  }
}

// The production split's block ring (4 vectors per thread) with its resident blocks per SM
// capped at k by padding its dynamic shared memory, so the grid (= partial rows the column sum
// reads) shrinks: what do a launch's partial rows cost at a few thousand rows? dx must not
// change (each row is one block's); dw's sum order does (more rows per partial).
void grid_cap(void* x, void* dy, void* dx, void* w, void* dw, void* rstd, void* ws,
              size_t ws_bytes) {
  std::printf(
      "\nblock ring at 4 vectors per thread, blocks per SM capped (rstd saved; us, cold)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  std::vector<uint16_t> ref;
  for (int64_t n : {4096, 8192}) {
    for (int64_t m : {1024, 4096, 32768}) {
      const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
      const size_t count = static_cast<size_t>(m) * n;
      check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, sh.w, sh.rstd,
                              rows(dx, DType::kBFloat16, m, n), sh.dw, sh.ws, bp),
            "backward");
      ref.resize(count);
      CK(cudaMemcpy(ref.data(), dx, count * 2, cudaMemcpyDeviceToHost));
      const float t_pub = time_med(
          [&] {
            check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, sh.w, sh.rstd,
                                    rows(dx, DType::kBFloat16, m, n), sh.dw, sh.ws, bp),
                  "backward");
          },
          true);
      std::printf("N=%5lld M=%6lld: public %7.2f", static_cast<long long>(n),
                  static_cast<long long>(m), t_pub);
      const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, nullptr, w, rstd, dx, nullptr, ws, m, n);
      const core::RmsNormBwdPlan p = split_plan(n, 4, 4);
      for (int k : {4, 3, 2, 1}) {
        core::RmsNormBwdPlan q = p;
        q.smem_bytes = std::max<int64_t>(p.smem_bytes, 233472 / k - 2048);
        int64_t grid = 0;
        auto run = [&] {
          check(cuda::launch_rms_norm_backward_typed<cuda::bf16, cuda::bf16>("cap", a, q, nullptr,
                                                                             &grid),
                "rows");
          check(
              cuda::launch_column_sum("cap", a.partials, grid, a.n, DType::kBFloat16, dw, nullptr),
              "column sum");
        };
        const size_t differ = differing(ref, poisoned_run(run, dx, count));
        const float t = time_med(run, true);
        std::printf(" | %d/SM (grid %lld) %7.2f, %zu dx differ", k, static_cast<long long>(grid), t,
                    differ);
      }
      std::printf(" us\n");
    }
  }
}

// The warp-per-row ring kernel with R warps (rows in flight) per block and an S-stage ring,
// launched directly (the library fixes S = core::kBwdWarpStages); false when it does not fit.
template <int VPT, int S>
bool warp_variant(const cuda::RmsNormBwdKernelArgs& a, int rows_per_block, int64_t* grid) {
  core::RmsNormBwdPlan p;
  p.path = core::RmsNormBwdPath::kWarpPerRow;
  p.vec = 8;
  p.vpt = VPT;
  p.threads = 32;
  p.rows_per_block = rows_per_block;
  p.stages = S;
  p.smem_acc = false;
  p.smem_bytes = core::bwd_smem_bytes(p, 4, true);
  if (p.smem_bytes > core::kBwdSmemBudget) return false;
  return launch_ring(cuda::rms_norm_bwd_rows_kernel<cuda::bf16, cuda::bf16, 8, VPT, S, true, false>,
                     a, p, grid);
}

// Rows of at most 128 vectors (the warp-per-row ring): the production plan against the warp
// kernel at other rows per block and ring depths, and against the block-per-row ring at every
// split (rstd saved, plain; us, cold L2, column sum included; ulps of dx from the production
// result at M = 4096). Question: why N = 1024 moves 22-56% of copy where N = 4096 moves 90%.
void narrow(void* x, void* dy, void* dx, void* w, void* dw, void* rstd, void* ws, size_t ws_bytes) {
  std::printf(
      "\nnarrow rows: warp-per-row ring by rows per block R and stages S, block ring by split\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  std::vector<uint16_t> ref, got;
  for (int64_t n : {256, 512, 1024}) {
    for (int64_t m : {4096, 32768}) {
      const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
      const TensorRef &tx = sh.x, &tw = sh.w, &tr = sh.rstd, &tws = sh.ws, &tdw = sh.dw;
      const size_t count = static_cast<size_t>(m) * n;
      auto api = [&] {
        check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), tx, tw, tr,
                                rows(dx, DType::kBFloat16, m, n), tdw, tws, bp),
              "backward");
      };
      const float t_api = time_med(api, true);
      ref.resize(count);
      CK(cudaMemcpy(ref.data(), dx, count * 2, cudaMemcpyDeviceToHost));
      const core::RmsNormBwdPlan prod = core::plan_rms_norm_backward(n, 8, true, true, 4, true);
      std::printf("N=%5lld M=%6lld: API %7.2f (%s R%d S%d vpt %d)\n", static_cast<long long>(n),
                  static_cast<long long>(m), t_api, core::rms_norm_bwd_path_name(prod.path),
                  prod.rows_per_block, prod.stages, prod.vpt);
      const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, nullptr, w, rstd, dx, nullptr, ws, m, n);
      auto report = [&](const char* what, float t) {
        got.resize(count);
        CK(cudaMemcpy(got.data(), dx, count * 2, cudaMemcpyDeviceToHost));
        int worst = 0;
        for (size_t i = 0; i < count; ++i) worst = std::max(worst, ulp_dist(ref[i], got[i]));
        std::printf("  %-18s %7.2f us (%d ulp)\n", what, t, worst);
      };
      for (int r : {1, 2, 4, 8}) {
        for (int stages : {2, 4}) {
          bool fits = true;
          auto run = [&] {
            int64_t grid = 0;
            if (n == 256) {
              fits =
                  stages == 2 ? warp_variant<1, 2>(a, r, &grid) : warp_variant<1, 4>(a, r, &grid);
            } else if (n == 512) {
              fits =
                  stages == 2 ? warp_variant<2, 2>(a, r, &grid) : warp_variant<2, 4>(a, r, &grid);
            } else {
              fits =
                  stages == 2 ? warp_variant<4, 2>(a, r, &grid) : warp_variant<4, 4>(a, r, &grid);
            }
            if (fits) {
              check(cuda::launch_column_sum("narrow", a.partials, grid, n, DType::kBFloat16, dw,
                                            nullptr),
                    "column sum");
            }
          };
          run();
          if (!fits) continue;
          const float t = time_med(run, true);
          char what[32];
          std::snprintf(what, sizeof what, "warp R%d S%d", r, stages);
          report(what, t);
        }
      }
      for (int vpt : {1, 2, 4}) {
        const core::RmsNormBwdPlan p = split_plan(n, vpt, 4);
        if (p.threads == 0) continue;
        auto run = [&] { rows_then_sum("narrow", a, p, dw, nullptr); };
        const float t = time_med(run, true);
        char what[32];
        std::snprintf(what, sizeof what, "block %dx%d S%d", p.threads, vpt, p.stages);
        report(what, t);
      }
    }
  }
}

// Single rows (M = 1, N = 1024 and 4096) under CUDA-graph replay: the public call, its row kernel
// alone, its column sum alone, and the public call again with the device's cache preference set
// to shared memory (cudaFuncCachePreferShared: no L1 / shared-memory reconfiguration between the
// row kernel's large dynamic shared memory and the column sum). Question: where a single row's
// 6-8 us go, against a launch floor of 0.78 us.
void single(void* x, void* dy, void* dx, void* w, void* dw, void* rstd, void* ws, size_t ws_bytes) {
  std::printf("\nsingle rows, CUDA-graph replay (us per call)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  for (int64_t n : {1024, 4096}) {
    const int64_t m = 1;
    const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
    const TensorRef tdy = rows(dy, DType::kBFloat16, m, n), tdx = rows(dx, DType::kBFloat16, m, n);
    auto api = [&](cudaStream_t st) {
      check(rms_norm_backward(tdy, sh.x, sh.w, sh.rstd, tdx, sh.dw, sh.ws, bp, st), "backward");
    };
    const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, nullptr, w, rstd, dx, nullptr, ws, m, n);
    const core::RmsNormBwdPlan plan = core::plan_rms_norm_backward(n, 8, true, true, 4, true);
    int64_t grid = 0;
    auto rows_only = [&](cudaStream_t st) {
      check(cuda::launch_rms_norm_backward_typed<cuda::bf16, cuda::bf16>("single", a, plan, st,
                                                                         &grid),
            "rows");
    };
    rows_only(nullptr);
    CK(cudaDeviceSynchronize());
    auto sum_only = [&](cudaStream_t st) {
      check(cuda::launch_column_sum("single", a.partials, grid, n, DType::kBFloat16, dw, st),
            "column sum");
    };
    const float t_api = time_graph(api);
    const float t_rows = time_graph(rows_only);
    const float t_sum = time_graph(sum_only);
    CK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    const float t_pref = time_graph(api);
    CK(cudaDeviceSetCacheConfig(cudaFuncCachePreferNone));
    std::printf(
        "N=%5lld M=1 (%s %dx%d R%d S%d, %lld blocks, %lld B shared): API %6.2f | rows kernel %6.2f "
        "| column sum %6.2f | API, prefer shared %6.2f\n",
        static_cast<long long>(n), core::rms_norm_bwd_path_name(plan.path), plan.threads, plan.vpt,
        plan.rows_per_block, plan.stages, static_cast<long long>(grid),
        static_cast<long long>(plan.smem_bytes), t_api, t_rows, t_sum, t_pref);
  }
}

// The ring kernel of plan p (the plain form when kPlain, else the general one; register
// partials) launched directly with an S-stage ring (the library fixes S = 2 but for
// core::bwd_plain_plan's deeper plain ring), shared memory as core::bwd_smem_bytes charges it for
// `ring_bytes` per column; false when p is not a split this function instantiates (warp path
// 32 x 4, block path 4 or 2 vectors per thread) or does not fit.
template <int S, bool kPlain>
bool ring_stages(const cuda::RmsNormBwdKernelArgs& a, core::RmsNormBwdPlan p, int ring_bytes,
                 int64_t* grid) {
  const bool warp = p.path == core::RmsNormBwdPath::kWarpPerRow;
  void (*kernel)(cuda::RmsNormBwdKernelArgs) = nullptr;
  using cuda::bf16;
  if (warp && p.vpt == 4) {
    kernel = cuda::rms_norm_bwd_rows_kernel<bf16, bf16, 8, 4, S, true, false, kPlain>;
  } else if (!warp && p.vpt == 4) {
    kernel = cuda::rms_norm_bwd_rows_kernel<bf16, bf16, 8, 4, S, false, false, kPlain>;
  } else if (!warp && p.vpt == 2) {
    kernel = cuda::rms_norm_bwd_rows_kernel<bf16, bf16, 8, 2, S, false, false, kPlain>;
  }
  if (kernel == nullptr || p.smem_acc) return false;
  p.stages = S;
  p.smem_bytes = core::bwd_smem_bytes(p, ring_bytes, true);
  return launch_ring(kernel, a, p, grid);
}

// One ring depth of a row of the stages and general tables: ring_stages<depth, kPlain> and the
// column sum, with dx (and dw) poisoned, run once and compared with the public call's ref (and
// ref_dw, when not empty), then timed; prints the time, the blocks per SM and the values that
// differ, or that the ring does not fit.
template <bool kPlain>
void depth_column(int depth, const cuda::RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
                  int ring_bytes, void* dw, const std::vector<uint16_t>& ref,
                  const std::vector<uint16_t>& ref_dw) {
  const size_t count = static_cast<size_t>(a.m * a.n);
  bool fits = true;
  int64_t grid = 0;
  auto run = [&] {
    fits = depth == 2   ? ring_stages<2, kPlain>(a, p, ring_bytes, &grid)
           : depth == 3 ? ring_stages<3, kPlain>(a, p, ring_bytes, &grid)
                        : ring_stages<4, kPlain>(a, p, ring_bytes, &grid);
    if (fits) {
      check(cuda::launch_column_sum("depth", a.partials, grid, a.n, DType::kBFloat16, dw, nullptr),
            "column sum");
    }
  };
  CK(cudaMemset(dw, 0xff, static_cast<size_t>(a.n) * 2));
  const std::vector<uint16_t> got = poisoned_run(run, a.dx, count);
  if (!fits) {
    std::printf(" | S%d: no fit", depth);
    return;
  }
  const size_t differ = differing(ref, got);
  const float t = time_med(run, true);
  const int64_t per_sm = (grid + cuda::device_sm_count() - 1) / cuda::device_sm_count();
  std::printf(" | S%d %8.2f [%lld] (%zu dx", depth, t, static_cast<long long>(per_sm), differ);
  if (!ref_dw.empty()) std::printf(", %zu dw", differing(ref_dw, device_values(dw, ref_dw.size())));
  std::printf(" differ)");
}

// The plain call (rstd saved, bf16 weight and dw) on the production plan: the public call, and
// its plain ring kernel launched directly at S = 2 (the library's), 3 and 4 stages, each with the
// column sum; dx and dw compared with the public call's bits. Question: with the plain kernel's
// 96 registers (4 blocks of 128 x 4 per SM at S = 2), does a deeper ring at fewer blocks per SM
// pay? (The early refill, a stage refilled as soon as read with dy and x held in registers,
// spilled and lost everywhere: rms-bwd-early-8ebfa03-nvidia-h200.log.)
void stages(void* x, void* dy, void* dx, void* w, void* dw, void* rstd, void* ws, size_t ws_bytes) {
  std::printf("\nplain ring kernel by ring depth (us, cold; blocks per SM in brackets)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  for (int64_t n : {1024, 2048, 4096, 8192}) {
    for (int64_t m : {1024, 4096, 32768}) {
      const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
      const size_t count = static_cast<size_t>(m) * n;
      auto api = [&] {
        check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, sh.w, sh.rstd,
                                rows(dx, DType::kBFloat16, m, n), sh.dw, sh.ws, bp),
              "backward");
      };
      const std::vector<uint16_t> ref = poisoned_run(api, dx, count);
      const std::vector<uint16_t> ref_dw = device_values(dw, static_cast<size_t>(n));
      const float t_api = time_med(api, true);
      const core::RmsNormBwdPlan p = core::plan_rms_norm_backward(n, 8, true, true, 4, true);
      const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, nullptr, w, rstd, dx, nullptr, ws, m, n);
      std::printf("N=%5lld M=%6lld (%s %dx%d R%d): API %8.2f", static_cast<long long>(n),
                  static_cast<long long>(m), core::rms_norm_bwd_path_name(p.path), p.threads, p.vpt,
                  p.rows_per_block, t_api);
      for (int depth : {2, 3, 4}) depth_column<true>(depth, a, p, 4, dw, ref, ref_dw);
      std::printf("\n");
    }
  }
}

// The calls the deeper ring does not serve (they take the general kernel): the rstd recomputed,
// and the fused add (ds read, dresidual written), N = 4096, at 2 stages (the library's) and 3;
// the public call beside them, dx compared with its bits. Question: would the general kernel
// gain from 3 stages as the plain one does?
void general(void* x, void* dy, void* ds, void* dx, void* dres, void* w, void* dw, void* rstd,
             void* ws, size_t ws_bytes) {
  std::printf("\ngeneral ring kernel at N = 4096 by ring depth (us, cold; blocks per SM)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  const int64_t n = 4096;
  for (bool fused : {false, true}) {
    for (int64_t m : {4096, 32768}) {
      const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
      const size_t count = static_cast<size_t>(m) * n;
      const TensorRef none{};
      auto api = [&] { public_backward(fused, none, dy, ds, dx, dres, sh, m, n, bp); };
      const std::vector<uint16_t> ref = poisoned_run(api, dx, count);
      const float t_api = time_med(api, true);
      const int ring_bytes = fused ? 6 : 4;
      const core::RmsNormBwdPlan p =
          core::plan_rms_norm_backward(n, 8, true, true, ring_bytes, true);
      const cuda::RmsNormBwdKernelArgs a =
          bwd_args(dy, x, fused ? ds : nullptr, w, fused ? rstd : nullptr, dx,
                   fused ? dres : nullptr, ws, m, n);
      std::printf("%s M=%6lld: API %8.2f",
                  fused ? "fused add, rstd saved" : "plain, recomputed    ",
                  static_cast<long long>(m), t_api);
      for (int depth : {2, 3}) depth_column<false>(depth, a, p, ring_bytes, dw, ref, {});
      std::printf("\n");
    }
  }
}

// The plain call at N = 4096 by row count (rstd saved; us, cold L2 unless marked warm): the
// public call (and its host time), the call without dw and without a weight, its row kernel
// alone (cold; in CUDA graphs of {flush, kernel} less graphs of {flush}; warm; and cold after an
// L2 flush run at the largest shared-memory carveout, so the row kernel needs no L1 /
// shared-memory reconfiguration), the forward, and device copies of the backward's and the
// forward's bytes. Question: where the backward's per-launch cost goes (19.7 us at M = 1024 for
// 25 MB; its rows then stream at the copy's rate), when the forward's is about 1.5 us. Answered
// (rms-bwd-fixed-*-nvidia-h200.log, docs/performance.md): about 7 us in the row kernel, 3 in
// the column sum; not the carveout, not host time.
void fixed(void* x, void* dy, void* ds, void* dx, void* dres, void* w, void* dw, void* rstd,
           void* ws, size_t ws_bytes) {
  std::printf("\nplain call at N = 4096 by rows (us; cold L2 unless warm)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  RmsNormParams fp;
  fp.eps = 1e-6f;
  const int64_t n = 4096;
  const int sms = cuda::device_sm_count();
  for (int64_t m : {int64_t{3} * sms, int64_t{1024}, int64_t{2048}, int64_t{4096}, int64_t{8192},
                    int64_t{32768}}) {
    const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
    const size_t row_bytes = static_cast<size_t>(n) * 2;
    auto api = [&] {
      check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, sh.w, sh.rstd,
                              rows(dx, DType::kBFloat16, m, n), sh.dw, sh.ws, bp),
            "backward");
    };
    auto forward = [&] {
      check(rms_norm(sh.x, sh.w, rows(dres, DType::kBFloat16, m, n), sh.rstd, fp), "forward");
    };
    const core::RmsNormBwdPlan p = core::plan_rms_norm_backward(n, 8, true, true, 4, true);
    const cuda::RmsNormBwdKernelArgs a = bwd_args(dy, x, nullptr, w, rstd, dx, nullptr, ws, m, n);
    int64_t grid = 0;
    auto rows_on = [&](cudaStream_t st) {
      check(cuda::launch_rms_norm_backward_typed<cuda::bf16, cuda::bf16>("fixed", a, p, st, &grid),
            "rows");
    };
    auto rows_only = [&] { rows_on(nullptr); };
    auto copy_of = [&](size_t bytes) {
      return [=] { cudaMemcpyAsync(dres, ds, bytes / 2, cudaMemcpyDeviceToDevice); };
    };
    const TensorRef none{};
    auto no_dw = [&] {
      check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, sh.w, sh.rstd,
                              rows(dx, DType::kBFloat16, m, n), none, none, bp),
            "backward, no dw");
    };
    auto no_w = [&] {
      check(rms_norm_backward(rows(dy, DType::kBFloat16, m, n), sh.x, none, sh.rstd,
                              rows(dx, DType::kBFloat16, m, n), none, none, bp),
            "backward, no weight");
    };
    const float t_api = time_med(api, true);
    const float t_rows = time_med(rows_only, true);
    // A second flush inside the timed span: its own time (about 60 us) is in the column.
    const float t_rows_2 = time_med(
        [&] {
          flush();
          rows_only();
        },
        true);
    const float t_no_dw = time_med(no_dw, true);
    const float t_no_w = time_med(no_w, true);
    // The same rows kernel in graphs of {flush, kernel} against graphs of {flush}: no host time.
    const float t_graph_flush = time_graph([&](cudaStream_t st) { flush(st); }, 10);
    const float t_graph_rows = time_graph(
                                   [&](cudaStream_t st) {
                                     flush(st);
                                     rows_on(st);
                                   },
                                   10) -
                               t_graph_flush;
    std::vector<double> host;
    for (int i = 0; i < 15; ++i) {
      CK(cudaDeviceSynchronize());
      const auto h0 = std::chrono::steady_clock::now();
      api();
      const auto h1 = std::chrono::steady_clock::now();
      host.push_back(std::chrono::duration<double, std::micro>(h1 - h0).count());
    }
    std::sort(host.begin(), host.end());
    const float t_rows_warm = time_med(rows_only, false);
    CK(cudaFuncSetAttribute(flush_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                            cudaSharedmemCarveoutMaxShared));
    const float t_rows_carve = time_med(rows_only, true);
    CK(cudaFuncSetAttribute(flush_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                            cudaSharedmemCarveoutDefault));
    const float t_fwd = time_med(forward, true);
    const float t_copy_bwd = time_med(copy_of(3 * row_bytes * m), true);
    const float t_copy_fwd = time_med(copy_of(2 * row_bytes * m), true);
    std::printf(
        "M=%6lld (grid %4lld): API %7.2f (host %6.2f) | no dw %7.2f | no weight %7.2f | rows "
        "%7.2f, two flushes %7.2f, in graphs %7.2f, warm %7.2f, max-carveout flush %7.2f | copy "
        "%7.2f | forward %7.2f, copy %7.2f\n",
        static_cast<long long>(m), static_cast<long long>(grid), t_api, host[host.size() / 2],
        t_no_dw, t_no_w, t_rows, t_rows_2, t_graph_rows, t_rows_warm, t_rows_carve, t_copy_bwd,
        t_fwd, t_copy_fwd);
  }
}

// Ring kernel for rows of varying phase (shared partials table, weight factors staged in shared
// memory: a.w_table) at VPT vectors per thread and S stages on the split that gives (threads
// rounded up to warps), launched directly; false when it does not fit.
template <int VPT, int S>
bool odd_ring(cuda::RmsNormBwdKernelArgs a, int ring_bytes, int64_t* grid, bool table = true) {
  core::RmsNormBwdPlan p = split_plan(a.n, VPT, ring_bytes);
  if (p.threads == 0) return false;
  p.stages = S;
  p.smem_acc = true;
  p.stage_weights = table;
  a.w_table = table;
  p.smem_bytes = core::bwd_smem_bytes(p, ring_bytes, true) +
                 (table ? core::bwd_table_lanes(a.n, 8) * 8 * 4 : 0);
  return launch_ring(cuda::rms_norm_bwd_rows_kernel<cuda::bf16, cuda::bf16, 8, VPT, S, false, true>,
                     a, p, grid);
}

// Rows of varying phase (N = 4095, contiguous bf16 rows: the shared partials table, and the
// weight factors staged once per block in shared memory since this mode was added) at 512 x 1,
// 256 x 2 and 128 x 4 with 2 and 3 ring stages, each with the column sum, against the public call
// (512 x 1 at 2 stages when this mode was added, 256 x 2 since f1a4f1e); dx compared in ulps
// (another split changes a row's reduction order).
// Question: with the weight no longer read per element from global memory, is the widest block
// (the plan's choice for rows with edge elements) still the fastest? No (at 7bcbdab,
// bench/results/rms-bwd-odd-7bcbdab-nvidia-h200.log): 256 x 2 at 2 stages was the fastest of
// the six for both ops and row counts (plain M = 32768 332.64 against 408.48 us at 512 x 1,
// M = 4096 57.70 against 64.70; fused add 432.54 against 458.46 and 70.34 against 71.94), the
// plain op at 3 blocks per SM where 512 x 1 fits 2; 3 stages lost at every split but one (the fused
// add at M = 32768 and 256 x 2: 432.48 against 432.54), 128 x 4 lost to 512 x 1 for the fused add.
// The plan takes 256 x 2 for N = 4095 since (core::kBwdEdgeRowThreads). Other widths (arguments
// after "odd") are timed at the two 2-stage splits the rule chooses between, 512 x 1 and 256 x 2
// (threads rounded up to warps), for the widths it moved. At f1a4f1e
// (rms-bwd-odd-widths-f1a4f1e-nvidia-h200.log; N = 2057, 2300, 3073, 3585, 4095) the two-vector
// split was as fast or faster at M = 32768 for every width and both ops (plain 211.74 / 213.98 /
// 266.34 / 314.11 / 333.79 us against 237.22 / 244.51 / 343.84 / 396.13 / 408.29), and within 0.4
// us of the one-vector split at M = 4096 up to N = 2300, faster above. A last column ("factors from
// global memory") runs the same split without the shared weight table: at 381071b
// (rms-bwd-odd-table-381071b-nvidia-h200.log) the table won wherever the plan takes it, also where
// its bytes cost a block per SM (fused add N = 4353 458.11 against 535.26 us).
void odd(const std::vector<int64_t>& widths, void* x, void* dy, void* ds, void* dx, void* dres,
         void* w, void* dw, void* rstd, void* ws, size_t ws_bytes) {
  std::printf(
      "\nrows of varying phase by split and ring depth (us, cold; ulps of dx against the public "
      "call; blocks per SM)\n");
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  for (int64_t n : widths)
    for (bool fused : {false, true}) {
      for (int64_t m : {4096, 32768}) {
        const BwdShape sh = bwd_shape(x, w, rstd, dx, ws, ws_bytes, dw, m, n);
        const size_t count = static_cast<size_t>(m) * n;
        auto api = [&] { public_backward(fused, sh.rstd, dy, ds, dx, dres, sh, m, n, bp); };
        const std::vector<uint16_t> ref = poisoned_run(api, dx, count);
        std::printf("N=%5lld %s M=%6lld: API %8.2f", static_cast<long long>(n),
                    fused ? "fused add" : "plain    ", static_cast<long long>(m),
                    time_med(api, true));
        cuda::RmsNormBwdKernelArgs a =
            bwd_args(dy, x, fused ? ds : nullptr, w, rstd, dx, fused ? dres : nullptr, ws, m, n);
        a.w_table = true;
        const int ring_bytes = fused ? 6 : 4;
        auto column = [&](const char* name, auto launch) {
          bool fits = true;
          int64_t grid = 0;
          auto run = [&] {
            fits = launch(&grid);
            if (fits) {
              check(cuda::launch_column_sum("odd", a.partials, grid, n, DType::kBFloat16, dw,
                                            nullptr),
                    "column sum");
            }
          };
          const std::vector<uint16_t> got = poisoned_run(run, dx, count);
          if (!fits) {
            std::printf(" | %s no fit", name);
            return;
          }
          int worst = 0;
          for (size_t i = 0; i < count; ++i) worst = std::max(worst, ulp_dist(ref[i], got[i]));
          const float t = time_med(run, true);
          std::printf(" | %s %8.2f (%d ulp) [%lld]", name, t, worst,
                      static_cast<long long>(grid / cuda::device_sm_count()));
        };
        column("512x1 S2", [&](int64_t* g) { return odd_ring<1, 2>(a, ring_bytes, g); });
        if (n == 4095)
          column("512x1 S3", [&](int64_t* g) { return odd_ring<1, 3>(a, ring_bytes, g); });
        column("256x2 S2", [&](int64_t* g) { return odd_ring<2, 2>(a, ring_bytes, g); });
        if (n != 4095) {
          column("256x2 S2 factors from global memory",
                 [&](int64_t* g) { return odd_ring<2, 2>(a, ring_bytes, g, false); });
        }
        if (n == 4095) {
          column("256x2 S3", [&](int64_t* g) { return odd_ring<2, 3>(a, ring_bytes, g); });
          column("128x4 S2", [&](int64_t* g) { return odd_ring<4, 2>(a, ring_bytes, g); });
          column("128x4 S3", [&](int64_t* g) { return odd_ring<4, 3>(a, ring_bytes, g); });
        }
        std::printf("\n");
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  const bool once = argc > 1 && std::strcmp(argv[1], "once") == 0;
  const int64_t kMaxM = 32768, kMaxN = 8192;
  const BwdBuffers b = alloc_bwd_buffers(kMaxM, kMaxN);
  void *x = b.x, *dy = b.dy, *ds = b.ds, *dx = b.dx, *dres = b.dres, *w = b.w, *dw = b.dw,
       *rstd = b.rstd, *ws = b.ws;
  const size_t ws_bytes = b.ws_bytes;
  const double copy = once ? 0.0 : copy_bandwidth_gbps(size_t{1} << 30);
  if (!once) std::printf("copy bandwidth %.1f GB/s\n", copy);
  RmsNormParams fp;
  fp.eps = 1e-6f;
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;
  for (int64_t n : {4096, 8192}) {
    for (int64_t m : {4096, 32768}) {
      const TensorRef tx = rows(x, DType::kBFloat16, m, n), tdy = rows(dy, DType::kBFloat16, m, n);
      const TensorRef tds = rows(ds, DType::kBFloat16, m, n),
                      tdx = rows(dx, DType::kBFloat16, m, n);
      const TensorRef tdres = rows(dres, DType::kBFloat16, m, n);
      const TensorRef tw = TensorRef::contiguous(w, DType::kBFloat16, {n}, Device::cuda(0));
      const TensorRef tdw = TensorRef::contiguous(dw, DType::kBFloat16, {n}, Device::cuda(0));
      const TensorRef tr = TensorRef::contiguous(rstd, DType::kFloat32, {m}, Device::cuda(0));
      const TensorRef tws = TensorRef::contiguous(
          ws, DType::kFloat32, {static_cast<int64_t>(ws_bytes / 4)}, Device::cuda(0));
      check(rms_norm(tx, tw, tdx, tr, fp), "rms_norm");
      const TensorRef none{};
      auto plain = [&](bool saved) {
        check(rms_norm_backward(tdy, tx, tw, saved ? tr : none, tdx, tdw, tws, bp), "backward");
      };
      auto fused = [&] {
        check(add_rms_norm_backward(tdy, tds, tx, tw, tr, tdx, tdres, tdw, tws, bp), "fused");
      };
      if (once) {
        plain(true);
        fused();
        CK(cudaDeviceSynchronize());
        continue;
      }
      const double row_bytes = static_cast<double>(n) * 2;
      const double plain_bytes = 3 * row_bytes * m, fused_bytes = 5 * row_bytes * m;
      const float t_saved = time_med([&] { plain(true); }, true);
      const float t_recomp = time_med([&] { plain(false); }, true);
      const float t_fused = time_med(fused, true);
      std::printf(
          "N=%5lld M=%6lld  plain, rstd saved %8.2f us (%5.1f%%)  recomputed %8.2f us  "
          "fused add %8.2f us (%5.1f%%)\n",
          static_cast<long long>(n), static_cast<long long>(m), t_saved,
          100.0 * plain_bytes / (t_saved * 1e3) / copy, t_recomp, t_fused,
          100.0 * fused_bytes / (t_fused * 1e3) / copy);
    }
  }
  if (argc > 1 && std::strcmp(argv[1], "grid") == 0) grid_cap(x, dy, dx, w, dw, rstd, ws, ws_bytes);
  if (argc > 1 && std::strcmp(argv[1], "splits") == 0)
    splits(x, dy, ds, dx, dres, w, dw, rstd, ws, ws_bytes);
  if (argc > 1 && std::strcmp(argv[1], "stages") == 0) stages(x, dy, dx, w, dw, rstd, ws, ws_bytes);
  if (argc > 1 && std::strcmp(argv[1], "general") == 0)
    general(x, dy, ds, dx, dres, w, dw, rstd, ws, ws_bytes);
  if (argc > 1 && std::strcmp(argv[1], "odd") == 0) {
    std::vector<int64_t> widths;
    for (int i = 2; i < argc; ++i) widths.push_back(std::atoll(argv[i]));
    if (widths.empty()) widths.push_back(4095);
    odd(widths, x, dy, ds, dx, dres, w, dw, rstd, ws, ws_bytes);
  }
  if (argc > 1 && std::strcmp(argv[1], "fixed") == 0)
    fixed(x, dy, ds, dx, dres, w, dw, rstd, ws, ws_bytes);
  if (argc > 1 && std::strcmp(argv[1], "narrow") == 0) {
    narrow(x, dy, dx, w, dw, rstd, ws, ws_bytes);
    single(x, dy, dx, w, dw, rstd, ws, ws_bytes);
  }
  return 0;
}
