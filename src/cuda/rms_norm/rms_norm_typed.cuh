// Per-dtype launch of the RMSNorm kernels: picks the kernel instantiation for a plan (vector
// width, vectors per thread, path) and launches it on the caller's stream. Included by exactly
// one .cu per input dtype, which instantiates it; the launcher calls it through dispatch.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "core/rms_norm_plan.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "cuda/rms_norm/rms_norm_typed.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

namespace detail {

constexpr int64_t kMaxGrid = int64_t{1} << 30;

inline Status bad_plan(const char* what, int value) {
  return Status(StatusCode::kUnsupported,
                std::string("rms_norm: no kernel for ") + what + " " + std::to_string(value));
}

// Persistent grid (ring paths): as many blocks as stay resident, never more than there are row
// groups.
template <typename Kernel>
Status launch_persistent(Kernel kernel, const RmsNormKernelArgs& a, const core::RmsNormPlan& p,
                         cudaStream_t s) {
  const dim3 block =
      p.path == core::RmsNormPath::kWarpPerRow ? dim3(32, p.rows_per_block) : dim3(p.threads);
  const int64_t rows_per_block = p.path == core::RmsNormPath::kWarpPerRow ? p.rows_per_block : 1;
  const size_t smem = static_cast<size_t>(p.smem_bytes);
  if (smem > 48 * 1024) {
    const int e = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    if (e != 0) {
      return Status(StatusCode::kDeviceError,
                    std::string("rms_norm: cannot raise shared memory to ") + std::to_string(smem) +
                        " bytes: " + cudaGetErrorString(static_cast<cudaError_t>(e)));
    }
  }
  const int threads = static_cast<int>(block.x * block.y);
  const int64_t resident =
      static_cast<int64_t>(blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, smem)) *
      device_sm_count();
  int64_t grid = (a.m + rows_per_block - 1) / rows_per_block;
  if (grid > resident) grid = resident;
  const cudaError_t e =
      launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), block, smem, s, a);
  if (e != cudaSuccess) {
    return Status(StatusCode::kDeviceError,
                  std::string("rms_norm: kernel launch failed: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

template <typename Tx, typename Tr, int V, int S, bool kWarp>
Status launch_rows_stages(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  switch (p.vpt) {
    case 1:
      return launch_persistent(rms_norm_rows_kernel<Tx, Tr, V, 1, S, kWarp>, a, p, s);
    case 2:
      return launch_persistent(rms_norm_rows_kernel<Tx, Tr, V, 2, S, kWarp>, a, p, s);
    case 4:
      return launch_persistent(rms_norm_rows_kernel<Tx, Tr, V, 4, S, kWarp>, a, p, s);
    default:
      return bad_plan("vectors per thread", p.vpt);
  }
}

// The warp ring is built at 4 and 2 stages, the block ring at core::kBlockRingStages.
template <typename Tx, typename Tr, int V, bool kWarp>
Status launch_rows(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  if constexpr (kWarp || core::kBlockRingStages == 4) {
    if (p.stages == 4) return launch_rows_stages<Tx, Tr, V, 4, kWarp>(a, p, s);
  }
  if constexpr (kWarp || core::kBlockRingStages == 2) {
    if (p.stages == 2) return launch_rows_stages<Tx, Tr, V, 2, kWarp>(a, p, s);
  }
  return bad_plan("ring stages", p.stages);
}

template <typename Kernel>
Status launch_grid(Kernel kernel, const RmsNormKernelArgs& a, int threads, cudaStream_t s) {
  const int64_t grid = a.m < kMaxGrid ? a.m : kMaxGrid;
  const cudaError_t e =
      launch_with_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(threads), 0, s, a);
  if (e != cudaSuccess) {
    return Status(StatusCode::kDeviceError,
                  std::string("rms_norm: kernel launch failed: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

template <typename Tx, int V, int VPT, bool kFused>
Status launch_lean_vpt(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  if (p.threads > core::kRowsMaxThreads) {
    // The fused add's wide instance (core::kLeanFusedWideThreads): 16-bit rows, one vector per
    // thread, no early weight.
    if constexpr (kFused && VPT == 1 && sizeof(Tx) == core::kLeanFusedWideElem) {
      if (!p.early_weight && p.threads <= core::kLeanFusedWideThreads) {
        return launch_grid(rms_norm_lean_kernel<Tx, V, 1, false, true, core::kLeanFusedWideThreads,
                                                core::kLeanFusedWideMinBlocks>,
                           a, p.threads, s);
      }
    }
    return bad_plan("lean kernel, threads", p.threads);
  }
  return p.early_weight
             ? launch_grid(rms_norm_lean_kernel<Tx, V, VPT, true, kFused>, a, p.threads, s)
             : launch_grid(rms_norm_lean_kernel<Tx, V, VPT, false, kFused>, a, p.threads, s);
}

// Built for what the plan sends there: vector rows of the plain op at 1, 2 and 4 vectors per
// thread, of the fused add with a residual of x's dtype at 1 and 2 (core::kLeanFusedMaxVpt), and
// its 16-bit rows of 1 on up to core::kLeanFusedWideThreads threads.
template <typename Tx, typename Tr, int V>
Status launch_lean(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  static_assert(core::kLeanMaxVpt == 4 && core::kLeanFusedMaxVpt == 2,
                "lean kernels are built for 1, 2 and 4 vectors per thread (fused: 1 and 2)");
  constexpr bool kFused = std::is_same_v<Tr, Tx>;
  if constexpr ((kFused || std::is_same_v<Tr, NoResidual>)&&V > core::kScalarWidth) {
    switch (p.vpt) {
      case 1:
        return launch_lean_vpt<Tx, V, 1, kFused>(a, p, s);
      case 2:
        return launch_lean_vpt<Tx, V, 2, kFused>(a, p, s);
      case 4:
        if constexpr (!kFused) return launch_lean_vpt<Tx, V, 4, false>(a, p, s);
        break;
      default:
        break;
    }
  }
  return bad_plan("lean kernel, vectors per thread", p.vpt);
}

template <typename Tx, typename Tr, int V>
Status launch_direct(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  if (p.lean) return launch_lean<Tx, Tr, V>(a, p, s);
  switch (p.vpt) {
    case 1:
      return launch_grid(rms_norm_direct_kernel<Tx, Tr, V, 1>, a, p.threads, s);
    case 2:
      return launch_grid(rms_norm_direct_kernel<Tx, Tr, V, 2>, a, p.threads, s);
    case 4:
      return launch_grid(rms_norm_direct_kernel<Tx, Tr, V, 4>, a, p.threads, s);
    case 8:
      if constexpr (V * 8 <= core::kMaxRegElems) {
        return launch_grid(rms_norm_direct_kernel<Tx, Tr, V, 8>, a, p.threads, s);
      }
      return bad_plan("vectors per thread", p.vpt);
    default:
      return bad_plan("vectors per thread", p.vpt);
  }
}

template <typename Tx, typename Tr, int V>
Status launch_path(const RmsNormKernelArgs& a, const core::RmsNormPlan& p, cudaStream_t s) {
  switch (p.path) {
    case core::RmsNormPath::kWarpPerRow:
      return launch_rows<Tx, Tr, V, true>(a, p, s);
    case core::RmsNormPath::kBlockPerRow:
      return launch_direct<Tx, Tr, V>(a, p, s);
    case core::RmsNormPath::kTwoPass:
      return launch_grid(rms_norm_two_pass_kernel<Tx, Tr, V>, a, p.threads, s);
    case core::RmsNormPath::kBlockRing:
      // Built for what the plan sends there: the fused add on vector rows.
      if constexpr (!std::is_same_v<Tr, NoResidual> && V > core::kScalarWidth) {
        return launch_rows<Tx, Tr, V, false>(a, p, s);
      }
      return bad_plan("block ring, vector width", V);
  }
  return bad_plan("path", static_cast<int>(p.path));
}

}  // namespace detail

template <typename Tx, typename Tr>
Status launch_rms_norm_typed(const RmsNormKernelArgs& a, const core::RmsNormPlan& plan,
                             cudaStream_t stream) {
  constexpr int kVec = core::max_vector_width(sizeof(Tx));
  Status st;
  switch (plan.vec) {
    case kVec:
      st = detail::launch_path<Tx, Tr, kVec>(a, plan, stream);
      break;
    case core::kScalarWidth:
      st = detail::launch_path<Tx, Tr, core::kScalarWidth>(a, plan, stream);
      break;
    default:
      return detail::bad_plan("vector width", plan.vec);
  }
  if (!st.ok()) return st;
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status(StatusCode::kDeviceError,
                  std::string("rms_norm: kernel launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

#define ROPENORM_INSTANTIATE_RMS_NORM(Tx, Tr)                             \
  template Status launch_rms_norm_typed<Tx, Tr>(const RmsNormKernelArgs&, \
                                                const core::RmsNormPlan&, cudaStream_t);

}  // namespace ropenorm::cuda
