// Public entry points rms_norm and add_rms_norm and the launcher behind them (rms_norm_run.h):
// validate, plan, dispatch, launch.
// Nothing is allocated or synchronised; the launch goes on the caller's stream.
#include <cuda_runtime.h>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/rms_norm_plan.h"
#include "core/rms_norm_validate.h"
#include "core/row_layout.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/rms_norm/rms_norm_run.h"
#include "cuda/rms_norm/rms_norm_typed.h"

namespace ropenorm {

namespace cuda {

Status run_rms_norm(const core::RmsNormCall& c, int64_t plan_rows, Stream stream) {
  const char* op = c.fused ? "add_rms_norm" : "rms_norm";
  ROPENORM_TRY(core::validate_rms_norm(c, -1));
  int device = 0;
  ROPENORM_TRY(core::current_device(op, &device));
  ROPENORM_TRY(core::validate_rms_norm_devices(c, device));
  if (c.x.numel() == 0) return Status::Ok();

  cuda::RmsNormKernelArgs a{};
  a.x = c.x.data;
  a.weight = c.weight.defined() ? c.weight.data : nullptr;
  a.y = c.y.data;
  a.rstd = c.rstd.defined() ? static_cast<float*>(c.rstd.data) : nullptr;
  a.x_rows = core::make_row_layout(c.x);
  a.y_rows = core::make_row_layout(c.y);
  if (c.fused) {
    a.residual = c.residual.data;
    a.residual_out = c.residual_out.data;
    a.r_rows = core::make_row_layout(c.residual);
    a.ro_rows = core::make_row_layout(c.residual_out);
  }
  a.m = core::row_count(c.x);
  a.n = c.x.sizes[c.x.ndim - 1];
  a.w_dtype = c.weight.defined() ? c.weight.dtype : DType::kFloat32;
  a.y_dtype = c.y.dtype;
  a.eps = c.params.eps;
  a.w_offset = c.params.weight_offset;
  a.rounding = c.params.rounding;

  const int xs = static_cast<int>(dtype_size(c.x.dtype));
  const int rs = c.fused ? static_cast<int>(dtype_size(c.residual.dtype)) : 1;
  const core::AccessFacts x_f{a.x, xs, a.x_rows};
  const core::AccessFacts y_f{a.y, static_cast<int>(dtype_size(c.y.dtype)), a.y_rows};
  const core::AccessFacts r_f{a.residual, rs, a.r_rows}, ro_f{a.residual_out, rs, a.ro_rows};
  const int vec = core::rms_norm_vector_width(x_f, {y_f, r_f, ro_f});
  core::LeanRowFacts lean;
  lean.x = x_f;
  lean.y = y_f;
  lean.r = r_f;
  lean.ro = ro_f;
  lean.weight = a.weight;
  lean.same_dtype = c.y.dtype == c.x.dtype && c.weight.defined() && c.weight.dtype == c.x.dtype &&
                    (!c.fused || c.residual.dtype == c.x.dtype);
  lean.exact = c.params.rounding == Rounding::kExact;
  lean.fused = c.fused;
  lean.n = a.n;
  const core::RmsNormPlan plan = core::plan_rms_norm(
      a.n, vec, xs, c.fused ? rs : 0, c.weight.defined(), plan_rows, device_sm_count(),
      core::rms_norm_lean_rows(lean, vec), core::rms_norm_aligned_rows(x_f, a.n, vec));
  a.weight_in_smem = plan.weight_in_smem;
  a.weight_vec = a.weight != nullptr && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);

  return core::dispatch_float_dtype<cuda::f16, cuda::bf16>(
      c.x.dtype, op, "x", [&](auto xtag) -> Status {
        using Tx = typename decltype(xtag)::type;
        if (!c.fused) return cuda::launch_rms_norm_typed<Tx, cuda::NoResidual>(a, plan, s);
        if (c.residual.dtype == c.x.dtype) return cuda::launch_rms_norm_typed<Tx, Tx>(a, plan, s);
        if constexpr (!std::is_same_v<Tx, float>) {
          if (c.residual.dtype == DType::kFloat32) {
            return cuda::launch_rms_norm_typed<Tx, float>(a, plan, s);
          }
        }
        return core::invalid_arg(op, "residual", "dtype of x or f32", dtype_name(c.residual.dtype),
                                 StatusCode::kUnsupported);
      });
}

}  // namespace cuda

Status rms_norm(const TensorRef& x, const TensorRef& weight, const TensorRef& y,
                const TensorRef& rstd, const RmsNormParams& params, Stream stream) {
  core::RmsNormCall c;
  c.x = x;
  c.weight = weight;
  c.y = y;
  c.rstd = rstd;
  c.params = params;
  c.fused = false;
  return cuda::run_rms_norm(c, core::row_count(x), stream);
}

Status add_rms_norm(const TensorRef& x, const TensorRef& residual, const TensorRef& weight,
                    const TensorRef& y, const TensorRef& residual_out, const TensorRef& rstd,
                    const RmsNormParams& params, Stream stream) {
  core::RmsNormCall c;
  c.x = x;
  c.residual = residual;
  c.weight = weight;
  c.y = y;
  c.residual_out = residual_out;
  c.rstd = rstd;
  c.params = params;
  c.fused = true;
  return cuda::run_rms_norm(c, core::row_count(x), stream);
}

const char* rounding_name(Rounding rounding) {
  switch (rounding) {
    case Rounding::kExact:
      return "exact";
    case Rounding::kHfLlama:
      return "hf_llama";
  }
  return "unknown-rounding";
}

}  // namespace ropenorm
