// Launch planning of the fused QK-norm + RoPE backward kernel (see qk_norm_rope_backward_plan.h).
#include "core/qk_norm_rope_backward_plan.h"

#include <algorithm>

namespace ropenorm::core {

int64_t qk_norm_rope_backward_grid(int64_t tokens, int sm_count, int blocks_per_sm) {
  if (tokens <= 0) return 0;
  const int64_t per_sm = std::clamp<int64_t>(blocks_per_sm, 1, kQkBwdBlocksPerSm);
  const int64_t cap = sm_count > 0 ? std::min(kQkBwdMaxBlocks, per_sm * sm_count) : kQkBwdMaxBlocks;
  return std::min(tokens, cap);
}

size_t qk_norm_rope_backward_workspace_bytes(int64_t tokens, int64_t hq, int64_t hk,
                                             int64_t head_dim, int sm_count) {
  if (tokens <= 0 || hq + hk <= 0 || head_dim <= 0) return 0;
  const int64_t grid = qk_norm_rope_backward_grid(tokens, sm_count);
  return static_cast<size_t>(2 * grid * head_dim) * sizeof(float);
}

QkNormRopeBackwardPlan plan_qk_norm_rope_backward(int64_t tokens, int64_t half, int64_t head_dim,
                                                  int vec, int sm_count, int blocks_per_sm) {
  QkNormRopeBackwardPlan p;
  p.vec = vec;
  const int64_t rot_slots = half / vec;
  const int64_t pass = head_dim - 2 * half;  // pass-through channels, a multiple of vec
  p.slots = static_cast<int>(rot_slots + (pass / vec + 1) / 2);
  int g = 1;
  while (g < 32 && g < p.slots) g <<= 1;
  p.group = g;
  const int need = (p.slots + g - 1) / g;
  p.slots_per_lane = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8;
  p.threads = kQkBwdThreads;
  p.grid = std::max<int64_t>(1, qk_norm_rope_backward_grid(tokens, sm_count, blocks_per_sm));
  p.tokens_per_block = tokens > 0 ? (tokens + p.grid - 1) / p.grid : 1;
  const int64_t groups = p.threads / p.group;
  // (w + o) of q and k, then each group's dw partials of q and k.
  p.smem_bytes = static_cast<size_t>(2 * head_dim + groups * 2 * head_dim) * sizeof(float);
  return p;
}

namespace {

int64_t lean_head_groups(const RopeLeanFacts& f) {
  const int64_t rows_max = kQkBwdLeanThreads / (f.half / kRopeLeanVec);
  return (f.heads + rows_max - 1) / rows_max;
}

}  // namespace

bool qk_norm_rope_backward_lean(const RopeLeanFacts& f, bool weights_aligned16, int sm_count) {
  if (!rope_lean_shape(f) || !weights_aligned16) return false;
  if (!power_of_two_upto_32(f.half / kRopeLeanVec)) return false;
  return lean_head_groups(f) <= qk_norm_rope_backward_grid(f.tokens, sm_count, 1);
}

QkNormRopeBackwardPlan plan_qk_norm_rope_backward_lean(const RopeLeanFacts& f, int sm_count,
                                                       int blocks_per_sm) {
  QkNormRopeBackwardPlan p;
  p.lean = true;
  p.vec = kRopeLeanVec;
  p.group = static_cast<int>(f.half / kRopeLeanVec);
  p.slots = p.group;
  p.slots_per_lane = 1;
  p.head_groups = lean_head_groups(f);
  p.rows = static_cast<int>((f.heads + p.head_groups - 1) / p.head_groups);
  p.threads = p.group * p.rows;
  const int64_t blocks = qk_norm_rope_backward_grid(f.tokens, sm_count, blocks_per_sm);
  p.grid = std::max<int64_t>(1, blocks / p.head_groups);
  p.smem_bytes = 0;
  return p;
}

QkBwdLeanInstance qk_bwd_lean_instance(int64_t lanes) {
  return lanes == 8 || lanes == 16 ? QkBwdLeanInstance::kLanes : QkBwdLeanInstance::kAny;
}

}  // namespace ropenorm::core
