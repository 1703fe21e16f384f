// Public entry points rms_norm_backward, add_rms_norm_backward and the workspace query:
// validate, plan, dispatch, launch the row kernel, then the fixed-order column sum of the dw
// partials. Nothing is allocated or synchronised; every launch goes on the caller's stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/dispatch.h"
#include "core/rms_norm_backward_plan.h"
#include "core/rms_norm_backward_validate.h"
#include "core/rms_norm_plan.h"
#include "core/row_layout.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/launch.h"
#include "cuda/rms_norm_backward/rms_norm_backward_run.h"
#include "cuda/rms_norm_backward/rms_norm_backward_typed.h"
#include "ropenorm/rms_norm_backward.h"

namespace ropenorm {

namespace {

int elem(const TensorRef& t) { return static_cast<int>(dtype_size(t.dtype)); }

// Every row of t starts at the same 16-byte phase.
bool uniform_phase(const core::RowLayout& rows, int elem_size) {
  for (int d = 0; d < rows.nd; ++d) {
    if ((rows.strides[d] * elem_size) % 16 != 0) return false;
  }
  return true;
}

Status device_error(const char* op, const char* what, cudaError_t e) {
  return Status(StatusCode::kDeviceError,
                std::string(op) + ": " + what + " failed: " + cudaGetErrorString(e));
}

}  // namespace

namespace cuda {

Status run_rms_norm_backward(const core::RmsNormBackwardCall& c, int64_t plan_rows, Stream stream,
                             bool* lean_launched) {
  const char* op = core::rms_norm_backward_op(c);
  const char* x_arg = c.fused ? "s" : "x";
  if (lean_launched != nullptr) *lean_launched = false;
  ROPENORM_TRY(core::validate_rms_norm_backward(c, -1));
  int device = 0;
  ROPENORM_TRY(core::current_device(op, &device));
  ROPENORM_TRY(core::validate_rms_norm_backward_devices(c, device));
  const int64_t n = c.dy.sizes[c.dy.ndim - 1];
  const int64_t m = core::row_count(c.dy);
  const int sms = cuda::device_sm_count();
  ROPENORM_TRY(core::validate_rms_norm_backward_workspace(c, core::bwd_workspace_bytes(m, n, sms)));
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (n == 0) return Status::Ok();
  if (m == 0) {
    // No rows: dw is the empty sum.
    if (!c.dw.defined()) return Status::Ok();
    const cudaError_t e =
        cudaMemsetAsync(c.dw.data, 0, static_cast<size_t>(n) * dtype_size(c.dw.dtype), s);
    return e == cudaSuccess ? Status::Ok() : device_error(op, "dw zero fill", e);
  }

  cuda::RmsNormBwdKernelArgs a{};
  a.dy = c.dy.data;
  a.x = c.x.data;
  a.ds = c.ds.defined() ? c.ds.data : nullptr;
  a.weight = c.weight.defined() ? c.weight.data : nullptr;
  a.rstd = c.rstd.defined() ? static_cast<const float*>(c.rstd.data) : nullptr;
  a.dx = c.dx.data;
  a.dres = c.dresidual.defined() ? c.dresidual.data : nullptr;
  a.partials = c.dw.defined() ? static_cast<float*>(c.workspace.data) : nullptr;
  a.dy_rows = core::make_row_layout(c.dy);
  a.x_rows = core::make_row_layout(c.x);
  if (c.ds.defined()) a.ds_rows = core::make_row_layout(c.ds);
  a.dx_rows = core::make_row_layout(c.dx);
  if (c.dresidual.defined()) a.dres_rows = core::make_row_layout(c.dresidual);
  a.m = m;
  a.n = n;
  a.w_dtype = c.weight.defined() ? c.weight.dtype : DType::kFloat32;
  a.dx_dtype = c.dx.dtype;
  a.dres_dtype = c.dresidual.defined() ? c.dresidual.dtype : DType::kFloat32;
  a.eps = c.params.eps;
  a.w_offset = c.params.weight_offset;

  // The input with the smaller elements (x on a tie) sets the vector width and the phase.
  const bool dy_ref = elem(c.dy) < elem(c.x);
  const core::AccessFacts dy_f{a.dy, elem(c.dy), a.dy_rows}, x_f{a.x, elem(c.x), a.x_rows};
  const core::AccessFacts ds_f{a.ds, elem(c.x), a.ds_rows};
  const core::AccessFacts dx_f{a.dx, elem(c.dx), a.dx_rows};
  const core::AccessFacts dres_f{a.dres, c.dresidual.defined() ? elem(c.dresidual) : 1,
                                 a.dres_rows};
  const int vec = dy_ref ? core::rms_norm_vector_width(dy_f, {x_f, ds_f, dx_f, dres_f})
                         : core::rms_norm_vector_width(x_f, {dy_f, ds_f, dx_f, dres_f});
  const core::AccessFacts& ref = dy_ref ? dy_f : x_f;
  core::RmsNormBwdPlan plan = core::plan_rms_norm_backward_ds(
      n, vec, uniform_phase(ref.rows, ref.elem_size), core::bwd_ring_kernels(c.x.dtype, c.dy.dtype),
      elem(c.dy) + elem(c.x), c.ds.defined() ? elem(c.x) : 0, c.dresidual.defined(),
      c.weight.defined());
  core::BwdLeanFacts lean;
  // Absent ds and dresidual: x stands in for them.
  lean.rows = core::lean_row_layout(
      x_f, n, vec, {dy_f, dx_f, c.ds.defined() ? ds_f : x_f, c.dresidual.defined() ? dres_f : x_f});
  lean.same_dtype = c.dy.dtype == c.x.dtype && c.dx.dtype == c.x.dtype &&
                    (!c.dresidual.defined() || c.dresidual.dtype == c.x.dtype) &&
                    c.weight.defined() && c.weight.dtype == c.x.dtype;
  lean.weight_aligned = c.weight.defined() && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  lean.dw = c.dw.defined();
  plan.lean = core::bwd_lean_call(plan, lean, plan_rows, sms);
  a.lanes = core::bwd_table_lanes(n, plan.vec);
  a.w_table = plan.stage_weights;

  int64_t grid = 0;
  auto launch = [&](auto xtag) -> Status {
    using Tin = typename decltype(xtag)::type;
    return core::dispatch_float_dtype<cuda::f16, cuda::bf16>(
        c.dy.dtype, op, "dy", [&](auto dytag) -> Status {
          using Tdy = typename decltype(dytag)::type;
          return cuda::launch_rms_norm_backward_typed<Tin, Tdy>(op, a, plan, s, &grid);
        });
  };
  const Status st = core::dispatch_float_dtype<cuda::f16, cuda::bf16>(c.x.dtype, op, x_arg, launch);
  if (!st.ok()) return st;
  // The typed launcher launched the lean kernel when the plan asked for it (it fails where no
  // instance is built; it never falls back to the ring).
  if (lean_launched != nullptr) *lean_launched = plan.lean;
  if (!c.dw.defined()) return Status::Ok();
  return cuda::launch_column_sum(op, a.partials, grid, n, c.dw.dtype, c.dw.data, s);
}

}  // namespace cuda

size_t rms_norm_backward_workspace_size(int64_t rows, int64_t n, int device) {
  if (rows <= 0 || n <= 0) return 0;
  int current = 0;
  if (!core::current_device("rms_norm_backward_workspace_size", &current).ok()) return 0;
  int sms = 0;
  if (device < 0 || device == current) {
    sms = cuda::device_sm_count();
  } else if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
             sms < 1) {
    cudaGetLastError();
    return 0;
  }
  return core::bwd_workspace_bytes(rows, n, sms);
}

Status rms_norm_backward(const TensorRef& dy, const TensorRef& x, const TensorRef& weight,
                         const TensorRef& rstd, const TensorRef& dx, const TensorRef& dw,
                         const TensorRef& workspace, const RmsNormBackwardParams& params,
                         Stream stream) {
  core::RmsNormBackwardCall c;
  c.dy = dy;
  c.x = x;
  c.weight = weight;
  c.rstd = rstd;
  c.dx = dx;
  c.dw = dw;
  c.workspace = workspace;
  c.params = params;
  c.fused = false;
  return cuda::run_rms_norm_backward(c, core::row_count(dy), stream);
}

Status add_rms_norm_backward(const TensorRef& dy, const TensorRef& ds, const TensorRef& s,
                             const TensorRef& weight, const TensorRef& rstd, const TensorRef& dx,
                             const TensorRef& dresidual, const TensorRef& dw,
                             const TensorRef& workspace, const RmsNormBackwardParams& params,
                             Stream stream) {
  core::RmsNormBackwardCall c;
  c.dy = dy;
  c.ds = ds;
  c.x = s;
  c.weight = weight;
  c.rstd = rstd;
  c.dx = dx;
  c.dresidual = dresidual;
  c.dw = dw;
  c.workspace = workspace;
  c.params = params;
  c.fused = true;
  return cuda::run_rms_norm_backward(c, core::row_count(dy), stream);
}

}  // namespace ropenorm
