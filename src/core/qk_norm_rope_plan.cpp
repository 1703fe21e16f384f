// Launch planning for the fused QK-norm + RoPE forward (see qk_norm_rope_plan.h).
#include "core/qk_norm_rope_plan.h"

#include <algorithm>

namespace ropenorm::core {

static_assert(kQkVecChannels == kRopeLeanVec, "the lean launch moves the pair kernel's vectors");

QkNormRopePlan plan_qk_norm_rope(const QkNormRopeFacts& f) {
  QkNormRopePlan p;
  const RopeLeanFacts& r = f.rope;
  const bool vec16 = r.elem_size == 2 && r.vec == kQkVecChannels;
  if (vec16 && 2 * r.half == r.head_dim && r.half % kQkVecChannels == 0 &&
      power_of_two_upto_32(r.half / kQkVecChannels) && f.weights_aligned16) {
    if (f.allow_lean && lean_run_shape(r, kQkLeanRunMinTokens)) {
      p.kernel = QkKernel::kLeanRun;
      p.rope = plan_rope_lean_run(r, kQkLeanRunThreads, kQkLeanRunMinBlocks, f.sm_count,
                                  kQkLeanRunMaxGrid);
      return p;
    }
    if (f.allow_lean &&
        rope_lean(r, rope_lean_long_run_block(r) ? kQkLeanMaxTokens : kRopeLeanMaxTokens)) {
      p.kernel = QkKernel::kLean;
      p.rope = plan_rope_lean(r, f.sm_count);
      return p;
    }
    p.kernel = QkKernel::kPair;
    p.rope = plan_rope(r.tokens, r.heads, r.half, kQkVecChannels);
    return p;
  }
  const int64_t vec_lanes = r.head_dim / kQkVecChannels;
  if (vec16 && r.head_dim % kQkVecChannels == 0 && power_of_two_upto_32(vec_lanes)) {
    p.kernel = QkKernel::kVector;
    p.group = static_cast<int>(vec_lanes);
    const int64_t max_groups = kQkVecThreads / vec_lanes;
    const int64_t ng =
        std::min<int64_t>(max_groups, (r.heads + kQkVecHeadsPerGroup - 1) / kQkVecHeadsPerGroup);
    const int64_t tpb = std::max<int64_t>(1, std::min<int64_t>(max_groups / ng, r.tokens));
    p.groups_per_token = static_cast<int>(ng);
    p.threads = static_cast<int>(tpb * ng * vec_lanes);
    p.grid = std::min<int64_t>((r.tokens + tpb - 1) / tpb, kQkMaxGrid);
    return p;
  }
  p.kernel = QkKernel::kScalar;
  const int64_t slots = r.head_dim / 2;
  int g = 1;
  while (g < 32 && g < slots) g <<= 1;
  p.group = g;
  const int64_t need = (slots + g - 1) / g;
  p.slots_per_lane = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8;
  const int64_t heads_per_warp = 32 / g;
  const int64_t warps_needed = (r.heads + heads_per_warp - 1) / heads_per_warp;
  const int64_t warps =
      std::min<int64_t>(kQkScalarMaxThreads / 32, std::max<int64_t>(1, warps_needed));
  p.threads = static_cast<int>(warps * 32);
  p.grid = std::min<int64_t>(r.tokens, kQkMaxGrid);
  return p;
}

QkLeanInstance qk_lean_instance(const QkLeanInstanceFacts& f) {
  if (!f.weights_as_data || (f.lanes != 8 && f.lanes != 16)) return QkLeanInstance::kAny;
  if (f.lanes == 8 && f.cos_sin_rows && f.tokens <= kQkLeanDecodeTokens &&
      f.threads <= kQkLeanDecodeThreads) {
    if (f.explicit_position_bits == 64) return QkLeanInstance::kDecodeI64;
    if (f.explicit_position_bits == 32) return QkLeanInstance::kDecodeI32;
  }
  return QkLeanInstance::kLanesWeights;
}

QkLeanRunInstance qk_lean_run_instance(bool cos_sin_rows, int explicit_position_bits, bool flat,
                                       bool full_warps) {
  if (!cos_sin_rows) {
    return flat && full_warps ? QkLeanRunInstance::kFlatTokens : QkLeanRunInstance::kLanes;
  }
  if (explicit_position_bits != 64) return QkLeanRunInstance::kLanes;
  return flat && full_warps ? QkLeanRunInstance::kFlatI64 : QkLeanRunInstance::kLanesRowsI64;
}

}  // namespace ropenorm::core
