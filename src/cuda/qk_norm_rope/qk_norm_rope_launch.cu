// Public entry point qk_norm_rope and its launcher run_qk_norm_rope: validate, current device,
// validate the device, no-op on zero size, (checked mode: positions read back and checked
// against the table), plan, dispatch, launch. Nothing is allocated; the launch goes on the caller's
// stream, which only checked mode synchronises.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/qk_norm_rope_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_run.h"
#include "cuda/qk_norm_rope/qk_norm_rope_typed.h"
#include "cuda/rope/rope_host.h"
#include "ropenorm/qk_norm_rope.h"

namespace ropenorm {

namespace {

constexpr const char* kOp = "qk_norm_rope";

}  // namespace

namespace cuda {

Status run_qk_norm_rope(const core::QkNormRopeCall& c, bool allow_lean, Stream stream) {
  core::RopeGeometry g;
  ROPENORM_TRY(core::validate_qk_norm_rope(c, -1, &g));
  int device = 0;
  ROPENORM_TRY(core::current_device(kOp, &device));
  ROPENORM_TRY(core::validate_qk_norm_rope_devices(c, device));
  if (g.tokens == 0 || g.hq + g.hk == 0) return Status::Ok();
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (c.rope.params.check_positions) ROPENORM_TRY(check_positions_on_host(kOp, c.rope, g, s));

  QkNormRopeArgs qa{};
  core::QkNormRopeFacts facts;
  fill_qk_norm_rope_args(c, g, &qa, &facts);
  facts.allow_lean = allow_lean;
  facts.sm_count = device_sm_count();
  const core::QkNormRopePlan plan = core::plan_qk_norm_rope(facts);
  qa.group = plan.group;
  qa.groups_per_token = plan.groups_per_token;

  return core::dispatch_float_dtype<f16, bf16>(c.rope.q.dtype, kOp, "q", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return launch_qk_norm_rope_typed<T>(qa, plan, s);
  });
}

}  // namespace cuda

Status qk_norm_rope(const TensorRef& q, const TensorRef& k, const TensorRef& wq,
                    const TensorRef& wk, const TensorRef& q_out, const TensorRef& k_out,
                    const TensorRef& q_rstd, const TensorRef& k_rstd,
                    const RopePositions& positions, const RopeCosSin& cos_sin,
                    const RopeParams& rope_params, const QkNormParams& norm_params, Stream stream) {
  return cuda::run_qk_norm_rope(
      core::qk_norm_rope_call(q, k, wq, wk, q_out, k_out, q_rstd, k_rstd, positions, cos_sin,
                              rope_params, norm_params),
      true, stream);
}

}  // namespace ropenorm
