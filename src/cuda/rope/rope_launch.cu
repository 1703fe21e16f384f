// Public entry point rope and its launcher run_rope: validate, current device, validate the
// device, no-op on zero size, (checked mode: positions read back and checked), plan, dispatch,
// launch. Nothing is allocated; the launch goes on the caller's stream, which only checked mode
// synchronises.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_run.h"
#include "cuda/rope/rope_typed.h"

namespace ropenorm {

namespace {

constexpr const char* kOp = "rope";

}  // namespace

namespace cuda {

Status run_rope(const core::RopeCall& c, bool allow_lean, Stream stream, core::RopePlan* planned) {
  core::RopeGeometry g;
  ROPENORM_TRY(core::validate_rope(c, -1, &g));
  int device = 0;
  ROPENORM_TRY(core::current_device(kOp, &device));
  ROPENORM_TRY(core::validate_rope_devices(c, device));
  if (g.tokens == 0 || g.hq + g.hk == 0) return Status::Ok();
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (c.params.check_positions) ROPENORM_TRY(check_positions_on_host(kOp, c, g, s));

  RopeKernelArgs a{};
  fill_rope_args(c, g, &a);
  a.copy_q_tail = c.q_out.data != c.q.data && g.rotary_dim < g.head_dim;
  a.copy_k_tail = c.k.defined() && c.k_out.data != c.k.data && g.rotary_dim < g.head_dim;

  const core::RopeLeanFacts lf = rope_lean_facts(c, g, rope_access_width(c, g, a));
  const core::RopePlan plan = core::plan_rope_call(lf, allow_lean, device_sm_count());
  if (planned != nullptr) *planned = plan;

  return core::dispatch_float_dtype<f16, bf16>(c.q.dtype, kOp, "q", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    return launch_rope_typed<T>(a, plan, s);
  });
}

}  // namespace cuda

Status rope(const TensorRef& q, const TensorRef& k, const TensorRef& q_out, const TensorRef& k_out,
            const RopePositions& positions, const RopeCosSin& cos_sin, const RopeParams& params,
            Stream stream) {
  return cuda::run_rope(core::RopeCall{q, k, q_out, k_out, positions, cos_sin, params}, true,
                        stream);
}

}  // namespace ropenorm
