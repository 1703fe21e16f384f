// One fused QK-norm + RoPE backward verification case: inputs drawn fresh (the RoPE case's q, k,
// positions and cos/sin as the forward's inputs, N(0, 1) weights and incoming gradients), dq / dk
// (out of place), dwq / dwk and the workspace poisoned (0xFF), the kernel run through the public
// API's launcher (cuda::run_qk_norm_rope_backward), every dq / dk element and both weight gradients
// compared with the float64 oracle (qk_norm_rope_grad_row_ref with the c_i, s_i the kernel reads)
// under the one tolerance table, and every byte outside the written views checked untouched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/host_tensor.h"
#include "reference/tolerance.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "verify/rope_case.h"

namespace ropenorm::verify {

struct QkNormRopeBackwardCase {
  /// Geometry, dtype, style, cos/sin source, positions, layout (kSeparate or kPackedQkv: q and k
  /// are views of one packed buffer, and so are dq_out / dk_out and dq / dk), in_place (dq is
  /// dq_out). q is [T, Hq, D] or [B, S, Hq, D], k is required, rope.inverse false.
  RopeCase rope;
  DType w_dtype = DType::kFloat32;  ///< wq, wk, dwq and dwk dtype (wk, dwk: see wk_f32)
  float eps = 1e-6f;
  float weight_offset = 0.0f;
  bool with_rstd = true;           ///< pass q_rstd / k_rstd (fp32 of the exact r), else recomputed
  bool rstd_from_forward = false;  ///< with_rstd: the library forward's saved r instead
  bool want_dw = true;             ///< pass dwq / dwk and a workspace
  bool short_workspace = false;    ///< one element less than the query says: the call must fail
  bool wk_f32 = false;  ///< wk and dwk in f32 whatever w_dtype (dwq and dwk then differ in dtype)
  bool allow_lean = true;  ///< false: the general kernel where the planner would pick the lean one
};

struct QkNormRopeBackwardInputs {
  RopeInputs rope;            ///< q, k (the forward's inputs), positions, cos/sin
  HostTensor dq_out, dk_out;  ///< logical [T, H, D] incoming gradients, q's dtype
  HostTensor wq, wk;
};

struct QkNormRopeBackwardOutcome {
  Status status;
  ref::ErrorStats dq, dk;           ///< output ulps beyond the fp32 allowance
  double dwq_err = 0, dwk_err = 0;  ///< output ulps of max|dw| beyond the fp32 allowance
  double tol_dq = 0, tol_dk = 0, tol_dw = 0;
  int64_t pad_written = 0;    ///< output / dw / workspace-slack bytes outside the views changed
  int64_t input_changed = 0;  ///< input bytes (q, k, gradients when out of place) changed
  HostTensor dq_val, dk_val;  ///< logical [T, H, D]
  HostTensor dwq, dwk;        ///< [D] (empty without dw)
  bool passed = false;
  std::string summary;
};

/// Fresh inputs (seeded by c.rope.seed).
QkNormRopeBackwardInputs make_inputs(const QkNormRopeBackwardCase& c);

/// Runs the case on the current CUDA device and compares with the oracle. With
/// short_workspace, passes when the call fails naming the workspace and wrote nothing.
QkNormRopeBackwardOutcome run_case(const QkNormRopeBackwardCase& c,
                                   const QkNormRopeBackwardInputs& in);

std::string describe(const QkNormRopeBackwardCase& c);

}  // namespace ropenorm::verify
