// One fused QK-norm + RoPE verification case: inputs drawn fresh (the RoPE case's q, k,
// positions and cos/sin, plus weights), outputs and rstd poisoned (0xFF), the kernel run
// through the public API's launcher (cuda::run_qk_norm_rope), every output compared with the
// float64 oracle (per head vector: rms_norm_row_ref with no intermediate rounding, then
// rope_rotate_ref with the c_i, s_i the kernel reads) under the one tolerance table, and every byte
// outside the views checked untouched.
#pragma once

#include <cstdint>
#include <string>

#include "reference/host_tensor.h"
#include "reference/tolerance.h"
#include "ropenorm/qk_norm_rope.h"
#include "verify/rope_case.h"

namespace ropenorm::verify {

struct QkNormRopeCase {
  /// Geometry, dtype, style, cos/sin source, positions, layout (kSeparate or kPackedQkv),
  /// in place. q is [T, Hq, D] or [B, S, Hq, D] and k is required (rope.has_k).
  RopeCase rope;
  DType w_dtype = DType::kFloat32;  ///< wq and wk dtype
  float eps = 1e-6f;
  float weight_offset = 0.0f;
  bool with_rstd = true;
  bool allow_lean = true;  ///< false: the pair kernel where the planner would pick the lean one
};

struct QkNormRopeInputs {
  RopeInputs rope;  ///< q, k, positions, cos/sin (editable before run)
  HostTensor wq, wk;
};

struct QkNormRopeOutcome {
  Status status;
  ref::ErrorStats q, k, rstd;
  double tol_q = 0, tol_k = 0, tol_rstd = 0, tol_pair = 0;
  int64_t pad_written = 0;    ///< output / rstd bytes outside the views that changed
  int64_t input_changed = 0;  ///< input bytes changed (out of place only)
  HostTensor q_out, k_out;    ///< logical [T, H, D]
  std::vector<float> q_rstd, k_rstd;
  bool passed = false;
  std::string summary;
};

/// Fresh inputs (seeded by c.rope.seed): the RoPE case's inputs and N(0, 1) weights.
QkNormRopeInputs make_inputs(const QkNormRopeCase& c);

/// Runs the case on the current CUDA device and compares with the oracle.
QkNormRopeOutcome run_case(const QkNormRopeCase& c, const QkNormRopeInputs& in);

std::string describe(const QkNormRopeCase& c);

}  // namespace ropenorm::verify
