// Public entry point rope: validate, current device, validate the device, no-op on zero size,
// (checked mode: positions read back and checked), plan, dispatch, launch. Nothing is allocated;
// the launch goes on the caller's stream, which only checked mode synchronises.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_typed.h"

namespace ropenorm {

namespace {

constexpr const char* kOp = "rope";

}  // namespace

Status rope(const TensorRef& q, const TensorRef& k, const TensorRef& q_out, const TensorRef& k_out,
            const RopePositions& positions, const RopeCosSin& cos_sin, const RopeParams& params,
            Stream stream) {
  core::RopeCall c;
  c.q = q;
  c.k = k;
  c.q_out = q_out;
  c.k_out = k_out;
  c.positions = positions;
  c.cos_sin = cos_sin;
  c.params = params;
  core::RopeGeometry g;
  ROPENORM_TRY(core::validate_rope(c, -1, &g));
  int device = 0;
  ROPENORM_TRY(core::current_device(kOp, &device));
  ROPENORM_TRY(core::validate_rope_devices(c, device));
  if (g.tokens == 0 || g.hq + g.hk == 0) return Status::Ok();
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (params.check_positions) ROPENORM_TRY(cuda::check_positions_on_host(kOp, c, g, s));

  cuda::RopeKernelArgs a{};
  cuda::fill_rope_args(c, g, &a);
  a.copy_q_tail = q_out.data != q.data && g.rotary_dim < g.head_dim;
  a.copy_k_tail = k.defined() && k_out.data != k.data && g.rotary_dim < g.head_dim;

  const int vec = cuda::rope_access_width(c, g, a);
  const int64_t h = g.rotary_dim / 2;
  const core::RopeLeanFacts lf = cuda::rope_lean_facts(c, g, vec);
  const core::RopePlan plan =
      core::rope_lean(lf) ? core::plan_rope_lean(lf) : core::plan_rope(g.tokens, lf.heads, h, vec);

  return core::dispatch_float_dtype<cuda::f16, cuda::bf16>(
      q.dtype, kOp, "q", [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return cuda::launch_rope_typed<T>(a, plan, s);
      });
}

}  // namespace ropenorm
