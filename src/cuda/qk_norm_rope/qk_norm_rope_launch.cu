// Public entry point qk_norm_rope: validate, current device, validate the device, no-op on zero
// size, (checked mode: positions read back and checked against the table), plan, dispatch,
// launch. Nothing is allocated; the launch goes on the caller's stream, which only checked mode
// synchronises.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_typed.h"
#include "cuda/rope/rope_host.h"
#include "ropenorm/qk_norm_rope.h"

namespace ropenorm {

namespace {

constexpr const char* kOp = "qk_norm_rope";

// Largest grid launched (the kernel loops over the remaining tokens).
constexpr int64_t kMaxGrid = int64_t{1} << 30;

// Lanes per head vector: the smallest power of two >= D / 2 slots, at most a warp.
int group_for(int64_t slots) {
  int g = 1;
  while (g < 32 && g < slots) g <<= 1;
  return g;
}

}  // namespace

Status qk_norm_rope(const TensorRef& q, const TensorRef& k, const TensorRef& wq,
                    const TensorRef& wk, const TensorRef& q_out, const TensorRef& k_out,
                    const TensorRef& q_rstd, const TensorRef& k_rstd,
                    const RopePositions& positions, const RopeCosSin& cos_sin,
                    const RopeParams& rope_params, const QkNormParams& norm_params, Stream stream) {
  core::QkNormRopeCall c;
  c.rope.q = q;
  c.rope.k = k;
  c.rope.q_out = q_out;
  c.rope.k_out = k_out;
  c.rope.positions = positions;
  c.rope.cos_sin = cos_sin;
  c.rope.params = rope_params;
  c.wq = wq;
  c.wk = wk;
  c.q_rstd = q_rstd;
  c.k_rstd = k_rstd;
  c.norm = norm_params;
  core::RopeGeometry g;
  ROPENORM_TRY(core::validate_qk_norm_rope(c, -1, &g));
  int device = 0;
  ROPENORM_TRY(core::current_device(kOp, &device));
  ROPENORM_TRY(core::validate_qk_norm_rope_devices(c, device));
  if (g.tokens == 0 || g.hq + g.hk == 0) return Status::Ok();
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (rope_params.check_positions) ROPENORM_TRY(cuda::check_positions_on_host(kOp, c.rope, g, s));

  cuda::QkNormRopeArgs qa{};
  cuda::RopeKernelArgs& a = qa.rope;
  cuda::fill_rope_args(c.rope, g, &a);

  qa.wq = wq.data;
  qa.wk = wk.data;
  qa.wq_dtype = wq.dtype;
  qa.wk_dtype = wk.dtype;
  qa.eps = norm_params.eps;
  qa.weight_offset = norm_params.weight_offset;
  qa.q_rstd = q_rstd.defined() ? static_cast<float*>(q_rstd.data) : nullptr;
  qa.k_rstd = k_rstd.defined() ? static_cast<float*>(k_rstd.data) : nullptr;
  qa.slots = static_cast<int>(g.head_dim / 2);

  // Plan, first that applies (every one gives the same bits: same per-lane sums in a fixed
  // order, same butterfly, same formulas):
  //  - the pair kernel (the RoPE kernel's layout, core::plan_rope): 16-bit q/k, every operand
  //    allows 16-byte accesses, R = D, h / 8 a power of two <= 32, both weights 16-byte aligned;
  //  - the vector kernel: 16-bit q/k, 16-byte accesses, D / 8 a power of two <= 32;
  //  - the scalar kernel with KS slots per lane (rounded up to 1, 2, 4, 8) and enough warps for
  //    the token's heads.
  cuda::QkNormRopePlan plan;
  const int64_t heads = g.hq + g.hk;
  const int64_t vec_lanes = g.head_dim / cuda::kQkVecChannels;
  const int width = cuda::rope_access_width(c.rope, g, a);
  const int64_t pair_lanes = g.rotary_dim / 2 / cuda::kQkVecChannels;
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  plan.pair = dtype_size(q.dtype) == 2 && width == cuda::kQkVecChannels &&
              g.rotary_dim == g.head_dim && g.rotary_dim % (2 * cuda::kQkVecChannels) == 0 &&
              pair_lanes >= 1 && pair_lanes <= 32 && (pair_lanes & (pair_lanes - 1)) == 0 &&
              aligned16(wq.data) && aligned16(wk.data);
  if (plan.pair) {
    plan.rope = core::plan_rope(g.tokens, heads, g.rotary_dim / 2, cuda::kQkVecChannels);
    return core::dispatch_float_dtype<cuda::f16, cuda::bf16>(
        q.dtype, kOp, "q", [&](auto tag) -> Status {
          using T = typename decltype(tag)::type;
          return cuda::launch_qk_norm_rope_typed<T>(qa, plan, s);
        });
  }
  plan.vector = dtype_size(q.dtype) == 2 && width == cuda::kQkVecChannels && vec_lanes <= 32 &&
                (vec_lanes & (vec_lanes - 1)) == 0;
  if (plan.vector) {
    // Groups of kQkVecHeadsPerGroup heads, enough for all of a token's heads (at most a block),
    // and as many tokens per block as fit in kQkVecThreads.
    qa.group = static_cast<int>(vec_lanes);
    const int64_t max_groups = cuda::kQkVecThreads / vec_lanes;
    const int64_t ng = std::min<int64_t>(
        max_groups, (heads + cuda::kQkVecHeadsPerGroup - 1) / cuda::kQkVecHeadsPerGroup);
    const int64_t tpb = std::min<int64_t>(max_groups / ng, g.tokens);
    qa.groups_per_token = static_cast<int>(ng);
    plan.threads = static_cast<int>(tpb * ng * vec_lanes);
    plan.grid = std::min<int64_t>((g.tokens + tpb - 1) / tpb, kMaxGrid);
  } else {
    qa.group = group_for(qa.slots);
    const int need = (qa.slots + qa.group - 1) / qa.group;
    plan.slots_per_lane = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8;
    const int64_t heads_per_warp = 32 / qa.group;
    const int64_t warps_needed = (heads + heads_per_warp - 1) / heads_per_warp;
    const int64_t warps =
        std::min<int64_t>(cuda::kQkNormRopeMaxThreads / 32, std::max<int64_t>(1, warps_needed));
    plan.threads = static_cast<int>(warps * 32);
    plan.grid = std::min<int64_t>(g.tokens, kMaxGrid);
  }

  return core::dispatch_float_dtype<cuda::f16, cuda::bf16>(
      q.dtype, kOp, "q", [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return cuda::launch_qk_norm_rope_typed<T>(qa, plan, s);
      });
}

}  // namespace ropenorm
