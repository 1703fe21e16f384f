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
/// Lean runs only: kFlat: every operand's token t at t times its token stride and the tables
/// within 32-bit rows (rope_flat_tokens, core::flat_tokens: 32-bit token index, table rows and
/// byte strides; needs int64 positions and cos/sin rows by position, or kTokenRows); kFullWarps:
/// every warp of the block full and no thread row exiting (core::lean_run_full_warps);
/// kTokenRows (with kFlat): cos/sin gathered per token (Hugging Face's position_embeddings),
/// token t's rows at t times the tables' token strides, no position read.
template <int kLanes_, LeanPositions kPos_, bool kRows_, bool kWeightsAsData_,
          int kMaxThreads_ = core::kRopeLeanMaxThreads, bool kFlat_ = false,
          bool kFullWarps_ = false, bool kTokenRows_ = false>
struct LeanSpec {
  static constexpr int kLanes = kLanes_;
  static constexpr LeanPositions kPos = kPos_;
  static constexpr bool kRows = kRows_;
  static constexpr bool kWeightsAsData = kWeightsAsData_;
  static constexpr int kMaxThreads = kMaxThreads_;
  static constexpr bool kFlat = kFlat_;
  static constexpr bool kFullWarps = kFullWarps_;
  static constexpr bool kTokenRows = kTokenRows_;
  static_assert(!kFlat || (kPos == LeanPositions::kInt64 && kRows) || (kTokenRows && !kRows),
                "a flat walk reads int64 positions and cos/sin rows by position, or rows by "
                "token");
  static_assert(!kTokenRows || kFlat, "rows by token are the flat walk's");
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

/// QK-norm + RoPE lean run, core::QkLeanRunInstance::kFlatI64: LeanRowsI64 with flat tokens and
/// full warps.
template <int kLanes>
using LeanFlatI64 =
    LeanSpec<kLanes, LeanPositions::kInt64, true, false, core::kRopeLeanMaxThreads, true, true>;

/// RoPE lean run, core::RopeLeanRunInstance::kRowsFlatI64: cos/sin rows by position, int64
/// explicit positions, flat tokens (any lanes per head, any warps).
using LeanRowsFlatI64 =
    LeanSpec<0, LeanPositions::kInt64, true, false, core::kRopeLeanMaxThreads, true, false>;

/// RoPE lean run, core::RopeLeanRunInstance::kTokensFlat: cos/sin gathered per token, flat
/// tokens (the tables' too; any lanes per head, any warps).
using LeanTokensFlat =
    LeanSpec<0, LeanPositions::kAny, false, false, core::kRopeLeanMaxThreads, true, false, true>;

/// QK-norm + RoPE lean run, core::QkLeanRunInstance::kFlatTokens: kLanes lanes per head, cos/sin
/// gathered per token, flat tokens (the tables' too) and full warps.
template <int kLanes>
using LeanFlatTokens = LeanSpec<kLanes, LeanPositions::kAny, false, false,
                                core::kRopeLeanMaxThreads, true, true, true>;

}  // namespace ropenorm::cuda
