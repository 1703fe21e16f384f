// One RMSNorm backward verification case: inputs drawn fresh, outputs (dx, dresidual, dw) and
// the workspace poisoned, the kernels run through the public API, and every output element
// compared with the float64 oracle under the one tolerance table. Used by the GPU tests and by
// the command-line verifier.
#pragma once

#include <cstdint>
#include <string>

#include "reference/host_tensor.h"
#include "reference/tolerance.h"
#include "ropenorm/rms_norm_backward.h"
#include "verify/rms_norm_case.h"

namespace ropenorm::verify {

struct RmsNormBackwardCase {
  int64_t m = 1, n = 1;
  DType x_dtype = DType::kBFloat16;     ///< x, or s for the fused op (and ds)
  DType dy_dtype = DType::kBFloat16;    ///< dy
  DType w_dtype = DType::kBFloat16;     ///< weight and dw
  DType dx_dtype = DType::kBFloat16;    ///< dx
  DType dres_dtype = DType::kBFloat16;  ///< dresidual (fused only)
  bool fused = false;                   ///< add_rms_norm_backward
  bool has_ds = false;                  ///< fused: a gradient arrives through s
  bool want_dres = true;                ///< fused: dresidual requested (else dx alone is written)
  bool has_weight = true;
  bool want_dw = true;    ///< dw requested (needs has_weight)
  bool give_rstd = true;  ///< pass the saved r (the oracle's r rounded to fp32); else recomputed
  bool in_place = false;  ///< dx aliases dy (and, fused with ds, dresidual aliases ds)
  RmsNormBackwardParams params{};
  int64_t pitch_pad = 0;          ///< extra elements between rows (row stride n + pitch_pad)
  int64_t storage_offset = 0;     ///< elements before the first row in each buffer (misalignment)
  int64_t weight_offset = -1;     ///< elements before the weight and dw (-1: storage_offset)
  int64_t workspace_offset = -1;  ///< floats before the workspace (-1: storage_offset)
  int64_t dx_offset = -1;         ///< elements before dx's first row (-1: storage_offset; out of
                                  ///< place)
  int64_t batch = 0;              ///< > 0: view the rows as [batch, m / batch, n] stored seq-major
  Fill fill = Fill::kNormal;      ///< x's rows: kNormal, kZero or kConstant (dy, ds always normal)
  int64_t plan_rows = 0;  ///< > 0: the kernel (lean or ring) picked for this many rows, not m
  uint64_t seed = 1;
};

/// Host copies of the inputs (logical [m, n] row-major, [n], [m]).
struct RmsNormBackwardInputs {
  HostTensor dy, x, ds, weight, rstd;
};

struct RmsNormBackwardOutcome {
  Status status;
  ErrorStats dx, dresidual, dw;
  double tol_dx = 0, tol_dw = 0;
  int64_t pad_written = 0;   ///< bytes outside the logical elements that changed (must be 0)
  bool lean_kernel = false;  ///< plan_rows > 0: the lean kernel ran (else not recorded)
  HostTensor dx_out, dres_out, dw_out;  ///< logical [m, n] row-major / [n]
  bool passed = false;
  std::string summary;  ///< one line: errors, tolerances, first failure
};

/// Fresh random inputs for the case (seeded by c.seed; a row's values do not depend on m).
RmsNormBackwardInputs make_backward_inputs(const RmsNormBackwardCase& c);

/// Runs the case on the current CUDA device and compares with the oracle.
RmsNormBackwardOutcome run_backward_case(const RmsNormBackwardCase& c,
                                         const RmsNormBackwardInputs& in);

/// Compares outputs already in `out` (dx_out, dres_out, dw_out; status ok) with the oracle and
/// fills the statistics, tolerances, `passed` and `summary` (any implementation's outputs).
void check_backward_outputs(const RmsNormBackwardCase& c, const RmsNormBackwardInputs& in,
                            RmsNormBackwardOutcome* out);

/// Whether the case writes dresidual (the fused op with dresidual requested).
inline bool writes_dresidual(const RmsNormBackwardCase& c) { return c.fused && c.want_dres; }

/// Short description: "add_rms_norm_backward bf16 M=7 N=4095 dy=bf16 w=f32 dx=bf16 ds ...".
std::string describe(const RmsNormBackwardCase& c);

}  // namespace ropenorm::verify
