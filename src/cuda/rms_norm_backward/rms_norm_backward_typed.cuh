// Per-dtype launch of the RMSNorm backward kernels: picks the kernel instantiation for a plan
// (path, vector width, vectors per thread, ring depth, where dw partials live, and the plain form
// for the calls core::bwd_plain_call accepts, on core::bwd_plain_plan's ring) and launches it on
// the caller's stream with a persistent grid; the fused add's ds read directly where the plan
// says so (ds_direct). Included by exactly one .cu per input dtype, which
// instantiates it; the launcher calls it through dispatch.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "core/rms_norm_backward_plan.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_kernels.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_lean.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_typed.h"
#include "ropenorm/status.h"

namespace ropenorm::cuda {

namespace bwd_detail {

inline Status bad_plan(const char* op, const char* what, int value) {
  return Status(StatusCode::kUnsupported,
                std::string(op) + ": no kernel for " + what + " " + std::to_string(value));
}

inline Status launch_error(const char* op, cudaError_t e) {
  return Status(StatusCode::kDeviceError,
                std::string(op) + ": kernel launch failed: " + cudaGetErrorString(e));
}

// Persistent grid: one block per row (per R rows on the warp path), at most the resident blocks
// of the ring kernel and the plan's cap per SM. With `lean` (the plan's lean kernel) that kernel
// runs on the ring kernel's grid instead.
template <typename Kernel>
Status launch_persistent(const char* op, Kernel kernel, const RmsNormBwdKernelArgs& a,
                         const core::RmsNormBwdPlan& p, cudaStream_t s, int64_t* grid,
                         Kernel lean = nullptr) {
  const bool warp = p.path == core::RmsNormBwdPath::kWarpPerRow;
  const dim3 block = warp ? dim3(32, p.rows_per_block) : dim3(p.threads);
  const size_t smem = static_cast<size_t>(p.smem_bytes);
  if (smem > 48 * 1024) {
    const int e = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
    if (e != 0) {
      return Status(StatusCode::kDeviceError,
                    std::string(op) + ": cannot raise shared memory to " + std::to_string(smem) +
                        " bytes: " + cudaGetErrorString(static_cast<cudaError_t>(e)));
    }
  }
  const int threads = static_cast<int>(block.x * block.y);
  const int resident = blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, smem);
  *grid = core::bwd_grid(a.m, a.n, p, resident, device_sm_count());
  const cudaError_t e =
      lean != nullptr
          ? launch_with_pdl(lean, dim3(static_cast<unsigned>(*grid)), block, 0, s, a)
          : launch_with_pdl(kernel, dim3(static_cast<unsigned>(*grid)), block, smem, s, a);
  return e == cudaSuccess ? Status::Ok() : launch_error(op, e);
}

// The plan's lean kernel (core::bwd_lean_call) for this instance: built for the block path with
// register partials, dy in the input's dtype and 16-byte vectors; the plain form for plain calls.
// Null when the plan does not ask for it; an error when it does and none is built.
template <typename Tin, typename Tdy, int V, int VPT, bool kWarp, bool kSmemAcc>
Status lean_kernel(const char* op, const core::RmsNormBwdPlan& p, bool plain,
                   void (**lean)(RmsNormBwdKernelArgs)) {
  *lean = nullptr;
  if (!p.lean) return Status::Ok();
  if constexpr (!kWarp && !kSmemAcc && std::is_same_v<Tin, Tdy> && V * sizeof(Tin) == 16) {
    *lean = plain ? rms_norm_bwd_lean_kernel<Tin, V, VPT, true>
                  : rms_norm_bwd_lean_kernel<Tin, V, VPT, false>;
    return Status::Ok();
  }
  return bad_plan(op, "lean rows at vectors per thread", VPT);
}

// plain: core::bwd_plain_call accepted the call (built for equal dtypes with register partials),
// at the ring's own depth or, on the block path at core::kBwdPlainDeepVpt vectors per thread,
// at core::kBwdPlainDeepStages (core::bwd_plain_plan).
template <typename Tin, typename Tdy, int V, int VPT, bool kWarp, bool kSmemAcc>
Status launch_stages(const char* op, const RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
                     bool plain, cudaStream_t s, int64_t* grid) {
  constexpr int kStages = kWarp ? core::kBwdWarpStages : core::kBwdBlockStages;
  constexpr int kDeep = core::kBwdPlainDeepStages;
  void (*lean)(RmsNormBwdKernelArgs) = nullptr;
  const Status lean_st = lean_kernel<Tin, Tdy, V, VPT, kWarp, kSmemAcc>(op, p, plain, &lean);
  if (!lean_st.ok()) return lean_st;
  // The plan's ds_direct (ds read from global memory, not through the ring; never a plain call,
  // which has no ds): built for the block path with register partials at the splits
  // core::plan_rms_norm_backward_ds gives it.
  if (p.ds_direct) {
    if constexpr (!kWarp && !kSmemAcc && core::bwd_ds_direct_vpt(VPT)) {
      if (p.stages == kStages) {
        return launch_persistent(
            op, rms_norm_bwd_rows_kernel<Tin, Tdy, V, VPT, kStages, false, false, false, true>, a,
            p, s, grid, lean);
      }
    }
    return bad_plan(op, "ds read directly at vectors per thread", VPT);
  }
  if constexpr (!kSmemAcc && std::is_same_v<Tin, Tdy>) {
    if (plain && p.stages == kStages) {
      return launch_persistent(
          op, rms_norm_bwd_rows_kernel<Tin, Tdy, V, VPT, kStages, kWarp, false, true>, a, p, s,
          grid, lean);
    }
    // core::bwd_plain_plan's deeper ring: built for what it gives (16-bit rows, block path).
    if constexpr (!kWarp && VPT == core::kBwdPlainDeepVpt && sizeof(Tin) == 2) {
      if (plain && p.stages == kDeep) {
        return launch_persistent(
            op, rms_norm_bwd_rows_kernel<Tin, Tdy, V, VPT, kDeep, false, false, true>, a, p, s,
            grid, lean);
      }
    }
  }
  if (p.stages != kStages) return bad_plan(op, "ring stages", p.stages);
  if (plain) return bad_plan(op, "plain call of dtype pair", static_cast<int>(DTypeOf<Tdy>::value));
  return launch_persistent(op, rms_norm_bwd_rows_kernel<Tin, Tdy, V, VPT, kStages, kWarp, kSmemAcc>,
                           a, p, s, grid, lean);
}

template <typename Tin, typename Tdy, int V, bool kWarp, bool kSmemAcc>
Status launch_vpt(const char* op, const RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
                  bool plain, cudaStream_t s, int64_t* grid) {
  switch (p.vpt) {
    case 1:
      return launch_stages<Tin, Tdy, V, 1, kWarp, kSmemAcc>(op, a, p, plain, s, grid);
    case 2:
      return launch_stages<Tin, Tdy, V, 2, kWarp, kSmemAcc>(op, a, p, plain, s, grid);
    case 4:
      return launch_stages<Tin, Tdy, V, 4, kWarp, kSmemAcc>(op, a, p, plain, s, grid);
    case 8:
      if constexpr (!kWarp && V * 8 <= core::kMaxRegElems) {
        return launch_stages<Tin, Tdy, V, 8, kWarp, kSmemAcc>(op, a, p, plain, s, grid);
      }
      return bad_plan(op, "vectors per thread", p.vpt);
    default:
      return bad_plan(op, "vectors per thread", p.vpt);
  }
}

template <typename Tin, typename Tdy, int V, bool kSmemAcc>
Status launch_rows(const char* op, const RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
                   cudaStream_t s, int64_t* grid) {
  core::BwdPlainFacts f;
  f.rstd_saved = a.rstd != nullptr;
  f.weight = a.weight != nullptr;
  f.dw = a.partials != nullptr;
  f.ds = a.ds != nullptr;
  f.dresidual = a.dres != nullptr;
  f.dx_as_input = a.dx_dtype == DTypeOf<Tin>::value;
  f.dy_as_input = std::is_same_v<Tin, Tdy>;
  const bool plain = core::bwd_plain_call(p, f);
  const core::RmsNormBwdPlan q =
      plain ? core::bwd_plain_plan(p, static_cast<int>(sizeof(Tin)), device_smem_per_sm(),
                                   device_smem_reserved_per_block())
            : p;
  if (q.path == core::RmsNormBwdPath::kWarpPerRow) {
    return launch_vpt<Tin, Tdy, V, true, kSmemAcc>(op, a, q, plain, s, grid);
  }
  return launch_vpt<Tin, Tdy, V, false, kSmemAcc>(op, a, q, plain, s, grid);
}

template <typename Tin, typename Tdy, int V>
Status launch_two_pass(const char* op, const RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
                       cudaStream_t s, int64_t* grid) {
  auto kernel = rms_norm_bwd_two_pass_kernel<Tin, Tdy, V>;
  const int resident = blocks_per_sm(reinterpret_cast<const void*>(kernel), p.threads, 0);
  *grid = core::bwd_grid(a.m, a.n, p, resident, device_sm_count());
  const cudaError_t e =
      launch_with_pdl(kernel, dim3(static_cast<unsigned>(*grid)), dim3(p.threads), 0, s, a);
  return e == cudaSuccess ? Status::Ok() : launch_error(op, e);
}

}  // namespace bwd_detail

template <typename Tin, typename Tdy>
Status launch_rms_norm_backward_typed(const char* op, const RmsNormBwdKernelArgs& a,
                                      const core::RmsNormBwdPlan& plan, cudaStream_t stream,
                                      int64_t* grid) {
  constexpr int kVec = core::max_vector_width(sizeof(BwdRefT<Tin, Tdy>));
  // The ring kernels built: core::bwd_ring_kernels (the plan's rule); other pairs take the
  // two-pass kernel.
  constexpr bool kRing = core::bwd_ring_kernels(DTypeOf<Tin>::value, DTypeOf<Tdy>::value);
  Status st;
  if (plan.path == core::RmsNormBwdPath::kTwoPass) {
    if (plan.vec == kVec) {
      st = bwd_detail::launch_two_pass<Tin, Tdy, kVec>(op, a, plan, stream, grid);
    } else if (plan.vec == core::kScalarWidth) {
      st = bwd_detail::launch_two_pass<Tin, Tdy, core::kScalarWidth>(op, a, plan, stream, grid);
    } else {
      return bwd_detail::bad_plan(op, "vector width", plan.vec);
    }
  } else if (plan.vec != kVec) {
    return bwd_detail::bad_plan(op, "vector width", plan.vec);
  } else if constexpr (kRing) {
    st = plan.smem_acc ? bwd_detail::launch_rows<Tin, Tdy, kVec, true>(op, a, plan, stream, grid)
                       : bwd_detail::launch_rows<Tin, Tdy, kVec, false>(op, a, plan, stream, grid);
  } else {
    return bwd_detail::bad_plan(op, "ring path for dy dtype",
                                static_cast<int>(DTypeOf<Tdy>::value));
  }
  if (!st.ok()) return st;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : bwd_detail::launch_error(op, err);
}

#define ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(Tin, Tdy)                                   \
  template Status launch_rms_norm_backward_typed<Tin, Tdy>(                                \
      const char*, const RmsNormBwdKernelArgs&, const core::RmsNormBwdPlan&, cudaStream_t, \
      int64_t*);

}  // namespace ropenorm::cuda
