// Public entry points qk_norm_rope_backward and its workspace query, and the launcher
// run_qk_norm_rope_backward: validate, current device, validate the device and the workspace size,
// (checked mode: positions read back and checked), plan (the lean kernel where it applies, else the
// general one), dispatch, launch the fused kernel, then the deterministic column sums of dwq and
// dwk (one launch for both when their dtypes match). Nothing is allocated; the launches go on the
// caller's stream, which only checked mode synchronises.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/qk_norm_rope_backward_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_host.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_run.h"
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_typed.h"
#include "cuda/rope/rope_host.h"
#include "ropenorm/qk_norm_rope_backward.h"

namespace ropenorm {

namespace {

constexpr const char* kOp = "qk_norm_rope_backward";

// Multiprocessors of `device` (-1: the current one), or 0 when it cannot be queried.
int sm_count_of(int device) {
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

// Column sums of the partial rows into the present weight gradients (parts = 0 writes zeros):
// one launch for both when their dtypes match.
Status reduce_dw(const TensorRef& dwq, const TensorRef& dwk, const float* partials, int64_t parts,
                 int64_t d, cudaStream_t s) {
  if (dwq.defined() && dwk.defined() && dwq.dtype == dwk.dtype) {
    const float* pk = partials != nullptr ? partials + parts * d : nullptr;
    const float* const src[2] = {partials, pk};
    void* const dst[2] = {dwq.data, dwk.data};
    return cuda::launch_column_sums(kOp, src, dst, 2, parts, d, dwq.dtype, s);
  }
  if (dwq.defined()) {
    ROPENORM_TRY(cuda::launch_column_sum(kOp, partials, parts, d, dwq.dtype, dwq.data, s));
  }
  if (dwk.defined()) {
    const float* pk = partials != nullptr ? partials + parts * d : nullptr;
    ROPENORM_TRY(cuda::launch_column_sum(kOp, pk, parts, d, dwk.dtype, dwk.data, s));
  }
  return Status::Ok();
}

}  // namespace

size_t qk_norm_rope_backward_workspace_size(int64_t tokens, int64_t hq, int64_t hk,
                                            int64_t head_dim, int device) {
  return core::qk_norm_rope_backward_workspace_bytes(tokens, hq, hk, head_dim, sm_count_of(device));
}

namespace cuda {

Status run_qk_norm_rope_backward(const core::QkNormRopeBackwardCall& c, bool allow_lean,
                                 Stream stream) {
  const core::RopeCall& rc = c.fwd.rope;
  const TensorRef& q = rc.q;
  const TensorRef& dwq = c.dwq;
  const TensorRef& dwk = c.dwk;
  core::RopeGeometry g;
  ROPENORM_TRY(core::validate_qk_norm_rope_backward(c, -1, 0, &g));
  int device = 0;
  ROPENORM_TRY(core::current_device(kOp, &device));
  ROPENORM_TRY(core::validate_qk_norm_rope_backward_devices(c, device));
  const int sms = device_sm_count();
  ROPENORM_TRY(core::validate_qk_norm_rope_backward_workspace(c, g, sms));
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (g.tokens == 0 || g.hq + g.hk == 0) return reduce_dw(dwq, dwk, nullptr, 0, g.head_dim, s);
  if (rc.params.check_positions) ROPENORM_TRY(check_positions_on_host(kOp, rc, g, s));

  QkNormRopeBackwardArgs qa{};
  core::RopeLeanFacts lf;
  fill_qk_norm_rope_backward_args(c, g, &qa, &lf);

  // The lean kernel where it applies, else the general one; planned for the largest grid, then
  // for the chosen instance's occupancy (never above it).
  const bool lean =
      allow_lean && core::qk_norm_rope_backward_lean(lf, qk_weights_aligned16(c.fwd), sms);
  auto plan_for = [&](int blocks_per_sm) {
    return lean ? core::plan_qk_norm_rope_backward_lean(lf, sms, blocks_per_sm)
                : core::plan_qk_norm_rope_backward(g.tokens, lf.half, g.head_dim, lf.vec, sms,
                                                   blocks_per_sm);
  };
  core::QkNormRopeBackwardPlan plan = plan_for(core::kQkBwdBlocksPerSm);
  int resident = 0;
  const Status queried =
      core::dispatch_float_dtype<f16, bf16>(q.dtype, kOp, "q", [&](auto tag) -> Status {
        resident = qk_norm_rope_backward_occupancy<typename decltype(tag)::type>(qa, plan);
        return Status::Ok();
      });
  if (!queried.ok()) return queried;
  plan = plan_for(resident);
  const bool want_dw = dwq.defined() || dwk.defined();
  qk_bwd_apply_plan(plan, want_dw ? static_cast<float*>(c.workspace.data) : nullptr, &qa);

  const Status launched =
      core::dispatch_float_dtype<f16, bf16>(q.dtype, kOp, "q", [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return launch_qk_norm_rope_backward_typed<T>(qa, plan, s);
      });
  if (!launched.ok()) return launched;
  if (!want_dw) return Status::Ok();
  return reduce_dw(dwq, dwk, qa.partials, plan.grid * plan.head_groups, g.head_dim, s);
}

}  // namespace cuda

Status qk_norm_rope_backward(const TensorRef& dq_out, const TensorRef& dk_out, const TensorRef& q,
                             const TensorRef& k, const TensorRef& wq, const TensorRef& wk,
                             const TensorRef& q_rstd, const TensorRef& k_rstd, const TensorRef& dq,
                             const TensorRef& dk, const TensorRef& dwq, const TensorRef& dwk,
                             const TensorRef& workspace, const RopePositions& positions,
                             const RopeCosSin& cos_sin, const RopeParams& rope_params,
                             const QkNormParams& norm_params, Stream stream) {
  return cuda::run_qk_norm_rope_backward(
      core::qk_norm_rope_backward_call(dq_out, dk_out, q, k, wq, wk, q_rstd, k_rstd, dq, dk, dwq,
                                       dwk, workspace, positions, cos_sin, rope_params,
                                       norm_params),
      true, stream);
}

}  // namespace ropenorm
