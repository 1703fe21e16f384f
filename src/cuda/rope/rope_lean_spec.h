// Compile-time facts a lean launch (RoPE, QK-norm + RoPE) may fix instead of reading them from
// the argument block. A kernel instantiated with a spec serves only the calls that match it;
// every fact left as "any" is read at run time, so LeanAny serves every call the lean rule
// accepts. A fixed fact gives the same bits as its run-time form.
#pragma once

#include "core/rope_plan.h"
#include "cuda/rope/rope_args.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

/// Positions a lean spec fixes: kAny (explicit of either dtype, or implicit), else explicit
/// per-token positions of that dtype.
enum class LeanPositions : int { kAny = 0, kInt64 = 1, kInt32 = 2 };

/// kLanes: lanes per head (h / 8, so D = 16 kLanes; 0: blockDim.x and the argument block's D);
/// kPos: the positions; kRows: cos/sin rows at p * row (a cache or a [P, R] table; false: any
/// table source); kWeightsAsData: both norm weights in q/k's dtype (QK-norm + RoPE only);
/// kMaxThreads: the launch bound (threads per block at most; it sets the register budget).
template <int kLanes_, LeanPositions kPos_, bool kRows_, bool kWeightsAsData_,
          int kMaxThreads_ = core::kRopeLeanMaxThreads>
struct LeanSpec {
  static constexpr int kLanes = kLanes_;
  static constexpr LeanPositions kPos = kPos_;
  static constexpr bool kRows = kRows_;
  static constexpr bool kWeightsAsData = kWeightsAsData_;
  static constexpr int kMaxThreads = kMaxThreads_;
};

/// Every fact read at run time.
using LeanAny = LeanSpec<0, LeanPositions::kAny, false, false>;
/// RoPE: cos/sin rows indexed by position (RopeSource kCache or kTable).
using LeanRows = LeanSpec<0, LeanPositions::kAny, true, false>;

/// QK-norm + RoPE: kLanes lanes per head (D = 16 kLanes), every other fact at run time (the
/// lean-run forward and core::QkBwdLeanInstance::kLanes).
template <int kLanes>
using LeanLanes = LeanSpec<kLanes, LeanPositions::kAny, false, false>;

/// QK-norm + RoPE lean run, core::QkLeanRunInstance::kLanesRowsI64: kLanes lanes per head,
/// int64 explicit positions, cos/sin rows by position; the weights' dtype at run time.
template <int kLanes>
using LeanRowsI64 = LeanSpec<kLanes, LeanPositions::kInt64, true, false>;

}  // namespace ropenorm::cuda
