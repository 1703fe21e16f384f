// The PyTorch operators of ropenorm: torch tensors -> ropenorm::TensorRef -> the core call.
//
// Thin on purpose: the core validates every argument and names it in its error; this file only
// maps types (dtype, sizes, strides, device), allocates the outputs the schema returns (and the
// backward passes' workspace, with torch's caching allocator), picks the tensor's device and that
// device's current CUDA stream, and turns a failed Status into the Python exception its code
// stands for:
//   invalid_argument                      -> ValueError          (TORCH_CHECK_VALUE)
//   unsupported, about a dtype            -> TypeError           (TORCH_CHECK_TYPE)
//   unsupported, anything else            -> NotImplementedError (a RuntimeError subclass)
//   device_error                          -> RuntimeError        (TORCH_CHECK)
//
// The library is loaded with torch.ops.load_library (python/ropenorm/_ops.py); it defines no
// Python module of its own. Schemas and their meaning: docs/python.md.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/qk_norm_rope_backward.h"
#include "ropenorm/rms_norm.h"
#include "ropenorm/rms_norm_backward.h"
#include "ropenorm/rope.h"
#include "ropenorm/rope_cache.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace {

using at::Tensor;
using OptTensor = std::optional<at::Tensor>;

std::string torch_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "torch.float32";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kDouble:
      return "torch.float64";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    default:
      return std::string("torch.") + c10::toString(t);
  }
}

// Throws the Python exception that matches a failed Status; a no-op on success.
void check_status(const ropenorm::Status& s) {
  if (s.ok()) return;
  const std::string& msg = s.message();
  switch (s.code()) {
    case ropenorm::StatusCode::kOk:
      return;
    case ropenorm::StatusCode::kInvalidArgument:
      TORCH_CHECK_VALUE(false, msg);
      break;
    case ropenorm::StatusCode::kUnsupported:
      // The core words dtype errors "expected dtype ..." (or names the argument 'dtype').
      if (msg.find("expected dtype") != std::string::npos ||
          msg.find("argument 'dtype'") != std::string::npos) {
        TORCH_CHECK_TYPE(false, msg);
      }
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
      break;
    case ropenorm::StatusCode::kDeviceError:
      break;
  }
  TORCH_CHECK(false, msg);
}

ropenorm::DType to_dtype(at::ScalarType type, const char* op, const char* arg) {
  switch (type) {
    case at::kFloat:
      return ropenorm::DType::kFloat32;
    case at::kHalf:
      return ropenorm::DType::kFloat16;
    case at::kBFloat16:
      return ropenorm::DType::kBFloat16;
    case at::kInt:
      return ropenorm::DType::kInt32;
    case at::kLong:
      return ropenorm::DType::kInt64;
    default:
      TORCH_CHECK_TYPE(false, op, ": argument '", arg,
                       "': expected dtype torch.float32, torch.float16, torch.bfloat16, "
                       "torch.int32 or torch.int64, received ",
                       torch_dtype_name(type));
  }
  return ropenorm::DType::kFloat32;  // unreachable
}

// A view of t for the core; an undefined tensor is the absent view.
ropenorm::TensorRef to_ref(const Tensor& t, const char* op, const char* arg) {
  if (!t.defined()) return ropenorm::TensorRef();
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, op, ": argument '", arg,
                    "': expected a strided (dense) tensor, received layout ", t.layout());
  TORCH_CHECK_VALUE(t.dim() <= ropenorm::kMaxDims, op, ": argument '", arg, "': expected at most ",
                    ropenorm::kMaxDims, " dims, received ", t.dim());
  TORCH_CHECK_VALUE(t.is_cuda() || t.is_cpu(), op, ": argument '", arg,
                    "': expected a CUDA tensor, received one on ", t.device());
  const ropenorm::DType dtype = to_dtype(t.scalar_type(), op, arg);
  const ropenorm::Device device = t.is_cuda()
                                      ? ropenorm::Device::cuda(static_cast<int>(t.get_device()))
                                      : ropenorm::Device::cpu();
  return ropenorm::TensorRef::from_arrays(t.data_ptr(), dtype, static_cast<int>(t.dim()),
                                          t.sizes().data(), t.strides().data(), device);
}

ropenorm::TensorRef to_ref(const OptTensor& t, const char* op, const char* arg) {
  return t.has_value() ? to_ref(*t, op, arg) : ropenorm::TensorRef();
}

// The tensor that fixes the device of a call: a CUDA tensor, named in the error otherwise.
void check_cuda(const Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK_VALUE(t.is_cuda(), op, ": argument '", arg,
                    "': expected a CUDA tensor, received one on ", t.device());
}

ropenorm::Stream current_stream(const Tensor& t) {
  return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

ropenorm::Rounding to_rounding(int64_t rounding, const char* op) {
  TORCH_CHECK_VALUE(rounding == 0 || rounding == 1, op,
                    ": argument 'rounding': expected 0 (exact) or 1 (hf_llama), received ",
                    rounding);
  return static_cast<ropenorm::Rounding>(rounding);
}

ropenorm::RmsNormParams norm_params(double eps, double weight_offset, int64_t rounding,
                                    const char* op) {
  ropenorm::RmsNormParams p;
  p.eps = static_cast<float>(eps);
  p.weight_offset = static_cast<float>(weight_offset);
  p.rounding = to_rounding(rounding, op);
  return p;
}

// x's shape without its last dim: the shape of a per-row (or per-head) rstd.
std::vector<int64_t> row_shape(const Tensor& x, const char* op, const char* arg) {
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": argument '", arg,
                    "': expected at least 1 dim ([..., N]), received a 0-dim tensor");
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().end() - 1);
}

// A new contiguous tensor of t's shape (and t's dtype, or `dtype`), on t's device.
Tensor empty_contiguous(const Tensor& t, std::optional<at::ScalarType> dtype = std::nullopt) {
  at::TensorOptions o = t.options().memory_format(at::MemoryFormat::Contiguous);
  if (dtype.has_value()) o = o.dtype(*dtype);
  return at::empty(t.sizes(), o);
}

// A weight gradient: weight's shape and dtype when wanted, else a 0-element placeholder (a
// schema cannot return an optional tensor).
Tensor weight_grad_output(const OptTensor& weight, bool wanted, const Tensor& like) {
  if (wanted && weight.has_value()) return empty_contiguous(*weight);
  return at::empty({0}, like.options());
}

// Scratch memory for a core call, from torch's caching allocator (stream ordered, so it is
// capturable in CUDA graphs): float32 elements covering `bytes` on like's device.
Tensor workspace(size_t bytes, const Tensor& like) {
  return at::empty({static_cast<int64_t>((bytes + 3) / 4)}, like.options().dtype(at::kFloat));
}

// The view of an optional output or workspace: absent when it holds no elements.
ropenorm::TensorRef to_ref_if_used(const Tensor& t, const char* op, const char* arg) {
  return t.numel() > 0 ? to_ref(t, op, arg) : ropenorm::TensorRef();
}

int64_t leading_product(const Tensor& t, int64_t trailing) {
  int64_t n = 1;
  for (int64_t d = 0; d + trailing < t.dim(); ++d) n *= t.size(d);
  return n;
}

// The core names qk_norm_rope's weights wq and wk (and their gradients dwq and dwk); the torch
// operators call them q_weight and k_weight, and an error should name the argument the caller
// passed.
ropenorm::Status rename_qk_weights(const ropenorm::Status& s) {
  if (s.ok()) return s;
  static const std::pair<const char*, const char*> kNames[] = {{"'wq'", "'q_weight'"},
                                                               {"'wk'", "'k_weight'"},
                                                               {"'dwq'", "'dq_weight'"},
                                                               {"'dwk'", "'dk_weight'"}};
  std::string msg = s.message();
  for (const auto& [from, to] : kNames) {
    const std::string f(from);
    for (size_t at = msg.find(f); at != std::string::npos; at = msg.find(f, at + 1)) {
      msg.replace(at, f.size(), to);
    }
  }
  return ropenorm::Status(s.code(), msg);
}

// Every call below converts its tensors to views in argument order, inputs before outputs,
// each in a statement of its own: a bad argument is then reported under its own name (the
// order in which a call's arguments are evaluated is unspecified in C++).

// ---------------------------------------------------------------------------------------------
// RMSNorm

std::tuple<Tensor, Tensor> rms_norm(const Tensor& x, const OptTensor& weight, double eps,
                                    double weight_offset, int64_t rounding) {
  constexpr const char* op = "ropenorm.rms_norm";
  check_cuda(x, op, "x");
  const c10::cuda::CUDAGuard device_guard(x.device());
  const ropenorm::TensorRef xr = to_ref(x, op, "x");
  const ropenorm::TensorRef wr = to_ref(weight, op, "weight");
  const ropenorm::RmsNormParams p = norm_params(eps, weight_offset, rounding, op);
  const std::vector<int64_t> rows = row_shape(x, op, "x");
  Tensor y = empty_contiguous(x);
  Tensor rstd = at::empty(rows, x.options().dtype(at::kFloat));
  const ropenorm::TensorRef yr = to_ref(y, op, "y");
  // The core wants one contiguous element per row; a flat view says so for any rank.
  const Tensor rstd_flat = rstd.view({rstd.numel()});
  const ropenorm::TensorRef rr = to_ref(rstd_flat, op, "rstd");
  check_status(ropenorm::rms_norm(xr, wr, yr, rr, p, current_stream(x)));
  return {y, rstd};
}

std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual,
                                        const OptTensor& weight, double eps, double weight_offset,
                                        int64_t rounding) {
  constexpr const char* op = "ropenorm.add_rms_norm";
  check_cuda(x, op, "x");
  const c10::cuda::CUDAGuard device_guard(x.device());
  const ropenorm::TensorRef xr = to_ref(x, op, "x");
  const ropenorm::TensorRef res = to_ref(residual, op, "residual");
  const ropenorm::TensorRef wr = to_ref(weight, op, "weight");
  const ropenorm::RmsNormParams p = norm_params(eps, weight_offset, rounding, op);
  Tensor y = empty_contiguous(x);
  Tensor residual_out = empty_contiguous(residual);
  const ropenorm::TensorRef yr = to_ref(y, op, "y");
  const ropenorm::TensorRef res_out = to_ref(residual_out, op, "residual_out");
  check_status(ropenorm::add_rms_norm(xr, res, wr, yr, res_out, ropenorm::TensorRef(), p,
                                      current_stream(x)));
  return {y, residual_out};
}

Tensor add_rms_norm_(const Tensor& x, const Tensor& residual, const OptTensor& weight, double eps,
                     double weight_offset, int64_t rounding) {
  constexpr const char* op = "ropenorm.add_rms_norm_";
  check_cuda(x, op, "x");
  const c10::cuda::CUDAGuard device_guard(x.device());
  const ropenorm::TensorRef xr = to_ref(x, op, "x");
  const ropenorm::TensorRef res = to_ref(residual, op, "residual");
  const ropenorm::TensorRef wr = to_ref(weight, op, "weight");
  const ropenorm::RmsNormParams p = norm_params(eps, weight_offset, rounding, op);
  Tensor y = empty_contiguous(x);
  const ropenorm::TensorRef yr = to_ref(y, op, "y");
  check_status(
      ropenorm::add_rms_norm(xr, res, wr, yr, res, ropenorm::TensorRef(), p, current_stream(x)));
  return y;
}

// A saved rstd (x.shape[:-1]) as the core reads it: one element per row, flat (a copy when it
// is not contiguous; hold the result while its view is in use).
OptTensor flat(const OptTensor& rstd) {
  return rstd.has_value() ? OptTensor(rstd->reshape({rstd->numel()})) : std::nullopt;
}

ropenorm::RmsNormBackwardParams backward_params(double eps, double weight_offset) {
  ropenorm::RmsNormBackwardParams p;
  p.eps = static_cast<float>(eps);
  p.weight_offset = static_cast<float>(weight_offset);
  return p;
}

std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x,
                                             const OptTensor& weight, const OptTensor& rstd,
                                             double eps, double weight_offset, bool weight_grad) {
  constexpr const char* op = "ropenorm.rms_norm_backward";
  check_cuda(dy, op, "dy");
  const ropenorm::RmsNormBackwardParams p = backward_params(eps, weight_offset);
  const c10::cuda::CUDAGuard device_guard(dy.device());
  const ropenorm::TensorRef dyr = to_ref(dy, op, "dy");
  const ropenorm::TensorRef xr = to_ref(x, op, "x");
  const ropenorm::TensorRef wr = to_ref(weight, op, "weight");
  const OptTensor rstd_flat = flat(rstd);
  const ropenorm::TensorRef rr = to_ref(rstd_flat, op, "rstd");
  Tensor dx = empty_contiguous(x);
  Tensor dweight = weight_grad_output(weight, weight_grad, x);
  const int64_t n = x.dim() > 0 ? x.size(-1) : 0;
  Tensor ws = workspace(dweight.numel() > 0 ? ropenorm::rms_norm_backward_workspace_size(
                                                  leading_product(x, 1), n, dy.get_device())
                                            : 0,
                        dy);
  const ropenorm::TensorRef dxr = to_ref(dx, op, "dx");
  const ropenorm::TensorRef dwr = to_ref_if_used(dweight, op, "dweight");
  const ropenorm::TensorRef wsr = to_ref_if_used(ws, op, "workspace");
  check_status(ropenorm::rms_norm_backward(dyr, xr, wr, rr, dxr, dwr, wsr, p, current_stream(dy)));
  return {dx, dweight};
}

std::tuple<Tensor, Tensor, Tensor> add_rms_norm_backward(const Tensor& dy, const OptTensor& ds,
                                                         const Tensor& s, const OptTensor& weight,
                                                         const OptTensor& rstd, double eps,
                                                         double weight_offset, bool weight_grad,
                                                         bool residual_grad) {
  constexpr const char* op = "ropenorm.add_rms_norm_backward";
  check_cuda(dy, op, "dy");
  const ropenorm::RmsNormBackwardParams p = backward_params(eps, weight_offset);
  const c10::cuda::CUDAGuard device_guard(dy.device());
  const ropenorm::TensorRef dyr = to_ref(dy, op, "dy");
  const ropenorm::TensorRef dsr = to_ref(ds, op, "ds");
  const ropenorm::TensorRef sr = to_ref(s, op, "s");
  const ropenorm::TensorRef wr = to_ref(weight, op, "weight");
  const OptTensor rstd_flat = flat(rstd);
  const ropenorm::TensorRef rr = to_ref(rstd_flat, op, "rstd");
  // dx in dy's dtype (y had x's dtype), dresidual in s's (the residual's) dtype; without
  // residual_grad a 0-element placeholder, not written (dx is then the caller's gradient of both).
  Tensor dx = empty_contiguous(s, dy.scalar_type());
  Tensor dresidual = residual_grad ? empty_contiguous(s) : at::empty({0}, s.options());
  Tensor dweight = weight_grad_output(weight, weight_grad, s);
  const int64_t n = s.dim() > 0 ? s.size(-1) : 0;
  Tensor ws = workspace(dweight.numel() > 0 ? ropenorm::rms_norm_backward_workspace_size(
                                                  leading_product(s, 1), n, dy.get_device())
                                            : 0,
                        dy);
  const ropenorm::TensorRef dxr = to_ref(dx, op, "dx");
  const ropenorm::TensorRef dresr =
      residual_grad ? to_ref(dresidual, op, "dresidual") : ropenorm::TensorRef();
  const ropenorm::TensorRef dwr = to_ref_if_used(dweight, op, "dweight");
  const ropenorm::TensorRef wsr = to_ref_if_used(ws, op, "workspace");
  check_status(ropenorm::add_rms_norm_backward(dyr, dsr, sr, wr, rr, dxr, dresr, dwr, wsr, p,
                                               current_stream(dy)));
  return {dx, dresidual, dweight};
}

// ---------------------------------------------------------------------------------------------
// RoPE

struct RopeArgs {
  ropenorm::RopePositions positions;
  ropenorm::RopeCosSin cos_sin;
  ropenorm::RopeParams params;
};

RopeArgs rope_args(const char* op, const OptTensor& positions, int64_t cos_sin_kind,
                   const OptTensor& cos_sin_cache, const OptTensor& cos, const OptTensor& sin,
                   const OptTensor& inv_freq, double attention_scaling, int64_t offset,
                   const OptTensor& seq_offsets, int64_t style, int64_t rotary_dim, bool inverse,
                   bool check_positions) {
  TORCH_CHECK_VALUE(cos_sin_kind >= 0 && cos_sin_kind <= 3, op,
                    ": argument 'cos_sin_kind': expected 0 (cache), 1 (hf_cos_sin), "
                    "2 (hf_cos_sin_gathered) or 3 (inv_freq), received ",
                    cos_sin_kind);
  TORCH_CHECK_VALUE(style == 0 || style == 1, op,
                    ": argument 'style': expected 0 (neox) or 1 (gptj), received ", style);
  RopeArgs a;
  a.positions.positions = to_ref(positions, op, "positions");
  a.positions.offset = offset;
  a.positions.seq_offsets = to_ref(seq_offsets, op, "seq_offsets");
  a.cos_sin.kind = static_cast<ropenorm::CosSinKind>(cos_sin_kind);
  a.cos_sin.cache = to_ref(cos_sin_cache, op, "cos_sin_cache");
  a.cos_sin.cos = to_ref(cos, op, "cos");
  a.cos_sin.sin = to_ref(sin, op, "sin");
  a.cos_sin.inv_freq = to_ref(inv_freq, op, "inv_freq");
  a.cos_sin.attention_scaling = static_cast<float>(attention_scaling);
  a.params.style = static_cast<ropenorm::RopeStyle>(style);
  a.params.rotary_dim = rotary_dim;
  a.params.inverse = inverse;
  a.params.check_positions = check_positions;
  return a;
}

#define ROPENORM_ROPE_ARGS                                                                   \
  const OptTensor &positions, int64_t cos_sin_kind, const OptTensor &cos_sin_cache,          \
      const OptTensor &cos, const OptTensor &sin, const OptTensor &inv_freq,                 \
      double attention_scaling, int64_t offset, const OptTensor &seq_offsets, int64_t style, \
      int64_t rotary_dim, bool inverse, bool check_positions
#define ROPENORM_ROPE_PASS                                                               \
  positions, cos_sin_kind, cos_sin_cache, cos, sin, inv_freq, attention_scaling, offset, \
      seq_offsets, style, rotary_dim, inverse, check_positions

Tensor rope(const Tensor& q, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope";
  check_cuda(q, op, "q");
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  Tensor q_out = empty_contiguous(q);
  const ropenorm::TensorRef q_outr = to_ref(q_out, op, "q_out");
  check_status(ropenorm::rope(qr, ropenorm::TensorRef(), q_outr, ropenorm::TensorRef(), a.positions,
                              a.cos_sin, a.params, current_stream(q)));
  return q_out;
}

std::tuple<Tensor, Tensor> rope_qk(const Tensor& q, const Tensor& k, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope_qk";
  check_cuda(q, op, "q");
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const ropenorm::TensorRef kr = to_ref(k, op, "k");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  Tensor q_out = empty_contiguous(q);
  Tensor k_out = empty_contiguous(k);
  const ropenorm::TensorRef q_outr = to_ref(q_out, op, "q_out");
  const ropenorm::TensorRef k_outr = to_ref(k_out, op, "k_out");
  check_status(
      ropenorm::rope(qr, kr, q_outr, k_outr, a.positions, a.cos_sin, a.params, current_stream(q)));
  return {q_out, k_out};
}

void rope_(const Tensor& q, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope_";
  check_cuda(q, op, "q");
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  check_status(ropenorm::rope(qr, ropenorm::TensorRef(), qr, ropenorm::TensorRef(), a.positions,
                              a.cos_sin, a.params, current_stream(q)));
}

void rope_qk_(const Tensor& q, const Tensor& k, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope_qk_";
  check_cuda(q, op, "q");
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const ropenorm::TensorRef kr = to_ref(k, op, "k");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  check_status(ropenorm::rope(qr, kr, qr, kr, a.positions, a.cos_sin, a.params, current_stream(q)));
}

#undef ROPENORM_ROPE_ARGS
#undef ROPENORM_ROPE_PASS

// ---------------------------------------------------------------------------------------------
// Fused QK-norm + RoPE. The rope arguments are rope's without `inverse`: the operators describe
// the forward rotation, and the backward operator applies the inverse one itself.

#define ROPENORM_QK_ROPE_ARGS                                                                \
  const OptTensor &positions, int64_t cos_sin_kind, const OptTensor &cos_sin_cache,          \
      const OptTensor &cos, const OptTensor &sin, const OptTensor &inv_freq,                 \
      double attention_scaling, int64_t offset, const OptTensor &seq_offsets, int64_t style, \
      int64_t rotary_dim, bool check_positions
#define ROPENORM_QK_ROPE_PASS                                                            \
  positions, cos_sin_kind, cos_sin_cache, cos, sin, inv_freq, attention_scaling, offset, \
      seq_offsets, style, rotary_dim, /*inverse=*/false, check_positions

ropenorm::QkNormParams qk_norm_params(double eps, double weight_offset) {
  ropenorm::QkNormParams p;
  p.eps = static_cast<float>(eps);
  p.weight_offset = static_cast<float>(weight_offset);
  return p;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> qk_norm_rope(const Tensor& q, const Tensor& k,
                                                        const Tensor& q_weight,
                                                        const Tensor& k_weight, double eps,
                                                        double weight_offset,
                                                        ROPENORM_QK_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.qk_norm_rope";
  check_cuda(q, op, "q");
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const ropenorm::TensorRef kr = to_ref(k, op, "k");
  const ropenorm::TensorRef qwr = to_ref(q_weight, op, "q_weight");
  const ropenorm::TensorRef kwr = to_ref(k_weight, op, "k_weight");
  const RopeArgs a = rope_args(op, ROPENORM_QK_ROPE_PASS);
  const std::vector<int64_t> q_heads = row_shape(q, op, "q");
  const std::vector<int64_t> k_heads = row_shape(k, op, "k");
  Tensor q_out = empty_contiguous(q);
  Tensor k_out = empty_contiguous(k);
  Tensor q_rstd = at::empty(q_heads, q.options().dtype(at::kFloat));
  Tensor k_rstd = at::empty(k_heads, k.options().dtype(at::kFloat));
  const ropenorm::TensorRef q_outr = to_ref(q_out, op, "q_out");
  const ropenorm::TensorRef k_outr = to_ref(k_out, op, "k_out");
  const ropenorm::TensorRef q_rstdr = to_ref(q_rstd, op, "q_rstd");
  const ropenorm::TensorRef k_rstdr = to_ref(k_rstd, op, "k_rstd");
  check_status(rename_qk_weights(ropenorm::qk_norm_rope(
      qr, kr, qwr, kwr, q_outr, k_outr, q_rstdr, k_rstdr, a.positions, a.cos_sin, a.params,
      qk_norm_params(eps, weight_offset), current_stream(q))));
  return {q_out, k_out, q_rstd, k_rstd};
}

std::tuple<Tensor, Tensor> qk_norm_rope_(const Tensor& q, const Tensor& k, const Tensor& q_weight,
                                         const Tensor& k_weight, double eps, double weight_offset,
                                         ROPENORM_QK_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.qk_norm_rope_";
  check_cuda(q, op, "q");
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const ropenorm::TensorRef kr = to_ref(k, op, "k");
  const ropenorm::TensorRef qwr = to_ref(q_weight, op, "q_weight");
  const ropenorm::TensorRef kwr = to_ref(k_weight, op, "k_weight");
  const RopeArgs a = rope_args(op, ROPENORM_QK_ROPE_PASS);
  const std::vector<int64_t> q_heads = row_shape(q, op, "q");
  const std::vector<int64_t> k_heads = row_shape(k, op, "k");
  Tensor q_rstd = at::empty(q_heads, q.options().dtype(at::kFloat));
  Tensor k_rstd = at::empty(k_heads, k.options().dtype(at::kFloat));
  const ropenorm::TensorRef q_rstdr = to_ref(q_rstd, op, "q_rstd");
  const ropenorm::TensorRef k_rstdr = to_ref(k_rstd, op, "k_rstd");
  check_status(rename_qk_weights(
      ropenorm::qk_norm_rope(qr, kr, qwr, kwr, qr, kr, q_rstdr, k_rstdr, a.positions, a.cos_sin,
                             a.params, qk_norm_params(eps, weight_offset), current_stream(q))));
  return {q_rstd, k_rstd};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> qk_norm_rope_backward(
    const Tensor& dq_out, const Tensor& dk_out, const Tensor& q, const Tensor& k,
    const Tensor& q_weight, const Tensor& k_weight, const OptTensor& q_rstd,
    const OptTensor& k_rstd, double eps, double weight_offset, ROPENORM_QK_ROPE_ARGS,
    bool weight_grad) {
  constexpr const char* op = "ropenorm.qk_norm_rope_backward";
  check_cuda(dq_out, op, "dq_out");
  const c10::cuda::CUDAGuard device_guard(dq_out.device());
  const ropenorm::TensorRef dq_outr = to_ref(dq_out, op, "dq_out");
  const ropenorm::TensorRef dk_outr = to_ref(dk_out, op, "dk_out");
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const ropenorm::TensorRef kr = to_ref(k, op, "k");
  const ropenorm::TensorRef qwr = to_ref(q_weight, op, "q_weight");
  const ropenorm::TensorRef kwr = to_ref(k_weight, op, "k_weight");
  const ropenorm::TensorRef q_rstdr = to_ref(q_rstd, op, "q_rstd");
  const ropenorm::TensorRef k_rstdr = to_ref(k_rstd, op, "k_rstd");
  const RopeArgs a = rope_args(op, ROPENORM_QK_ROPE_PASS);
  Tensor dq = empty_contiguous(q);
  Tensor dk = empty_contiguous(k);
  Tensor dq_weight = weight_grad_output(q_weight, weight_grad, q);
  Tensor dk_weight = weight_grad_output(k_weight, weight_grad, k);
  // Sizes for the workspace bound only; the core validates the shapes themselves.
  const int64_t hq = q.dim() >= 2 ? q.size(-2) : 0;
  const int64_t hk = k.dim() >= 2 ? k.size(-2) : 0;
  const int64_t head_dim = q.dim() >= 1 ? q.size(-1) : 0;
  Tensor ws =
      workspace(weight_grad ? ropenorm::qk_norm_rope_backward_workspace_size(
                                  leading_product(q, 2), hq, hk, head_dim, dq_out.get_device())
                            : 0,
                dq_out);
  const ropenorm::TensorRef dqr = to_ref(dq, op, "dq");
  const ropenorm::TensorRef dkr = to_ref(dk, op, "dk");
  const ropenorm::TensorRef dqwr = to_ref_if_used(dq_weight, op, "dq_weight");
  const ropenorm::TensorRef dkwr = to_ref_if_used(dk_weight, op, "dk_weight");
  const ropenorm::TensorRef wsr = to_ref_if_used(ws, op, "workspace");
  check_status(rename_qk_weights(ropenorm::qk_norm_rope_backward(
      dq_outr, dk_outr, qr, kr, qwr, kwr, q_rstdr, k_rstdr, dqr, dkr, dqwr, dkwr, wsr, a.positions,
      a.cos_sin, a.params, qk_norm_params(eps, weight_offset), current_stream(dq_out))));
  return {dq, dk, dq_weight, dk_weight};
}

#undef ROPENORM_QK_ROPE_ARGS
#undef ROPENORM_QK_ROPE_PASS

// ---------------------------------------------------------------------------------------------
// Host-side rope parameters (CPU, no device involved).

#define ROPENORM_CONFIG_ARGS                                                               \
  c10::string_view rope_type, double rope_theta, int64_t rotary_dim, double factor,        \
      int64_t max_position_embeddings, int64_t original_max_position_embeddings,           \
      double low_freq_factor, double high_freq_factor, double beta_fast, double beta_slow, \
      double mscale, double mscale_all_dim, double attention_factor, bool truncate,        \
      int64_t seq_len
#define ROPENORM_CONFIG_PASS                                                                     \
  rope_type, rope_theta, rotary_dim, factor, max_position_embeddings,                            \
      original_max_position_embeddings, low_freq_factor, high_freq_factor, beta_fast, beta_slow, \
      mscale, mscale_all_dim, attention_factor, truncate, seq_len

ropenorm::RopeConfig rope_config(ROPENORM_CONFIG_ARGS) {
  ropenorm::RopeConfig c;
  check_status(ropenorm::parse_rope_type(std::string(rope_type.data(), rope_type.size()), &c.type));
  c.theta = rope_theta;
  c.rotary_dim = rotary_dim;
  c.factor = factor;
  c.max_position_embeddings = max_position_embeddings;
  c.original_max_position_embeddings = original_max_position_embeddings;
  c.low_freq_factor = low_freq_factor;
  c.high_freq_factor = high_freq_factor;
  c.beta_fast = beta_fast;
  c.beta_slow = beta_slow;
  c.mscale = mscale;
  c.mscale_all_dim = mscale_all_dim;
  c.attention_factor = attention_factor;
  c.truncate = truncate;
  c.seq_len = seq_len;
  return c;
}

std::tuple<Tensor, double> rope_inv_freq(ROPENORM_CONFIG_ARGS, bool hf_float32) {
  const ropenorm::RopeConfig c = rope_config(ROPENORM_CONFIG_PASS);
  double scaling = 1.0;
  if (hf_float32) {
    std::vector<float> f;
    check_status(ropenorm::rope_inv_freq_f32(c, &f, &scaling));
    Tensor t = at::empty({static_cast<int64_t>(f.size())}, at::TensorOptions().dtype(at::kFloat));
    std::copy(f.begin(), f.end(), t.data_ptr<float>());
    return {t, scaling};
  }
  std::vector<double> f;
  check_status(ropenorm::rope_inv_freq(c, &f, &scaling));
  Tensor t = at::empty({static_cast<int64_t>(f.size())}, at::TensorOptions().dtype(at::kDouble));
  std::copy(f.begin(), f.end(), t.data_ptr<double>());
  return {t, scaling};
}

Tensor build_rope_cache(int64_t max_positions, at::ScalarType dtype, ROPENORM_CONFIG_ARGS,
                        int64_t first_position) {
  constexpr const char* op = "ropenorm.build_rope_cache";
  const ropenorm::RopeConfig c = rope_config(ROPENORM_CONFIG_PASS);
  TORCH_CHECK_VALUE(max_positions >= 0, op, ": argument 'max_positions': expected >= 0, received ",
                    max_positions);
  // The library's range builder checks these too, under its own argument names.
  TORCH_CHECK_VALUE(first_position >= 0 && first_position <= ropenorm::kRopeCacheMaxPosition, op,
                    ": argument 'first_position': expected a value in [0, 2^53], received ",
                    first_position);
  TORCH_CHECK_VALUE(max_positions <= ropenorm::kRopeCacheMaxPosition - first_position, op,
                    ": argument 'max_positions': expected first_position + max_positions <= 2^53 "
                    "(first_position ",
                    first_position, "), received ", max_positions);
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, op,
                   ": argument 'dtype': expected torch.float32, torch.float16 or torch.bfloat16, "
                   "received ",
                   torch_dtype_name(dtype));
  TORCH_CHECK_VALUE(rotary_dim > 0, op, ": argument 'rotary_dim': expected > 0, received ",
                    rotary_dim);
  Tensor out = at::empty({max_positions, rotary_dim}, at::TensorOptions().dtype(dtype));
  const ropenorm::DType dt = to_dtype(dtype, op, "dtype");
  // The whole-cache builder when the rows start at 0 (its errors name build_rope_cache); a
  // configuration error of a range names build_rope_cache_range.
  check_status(
      first_position == 0
          ? ropenorm::build_rope_cache(c, max_positions, dt, out.data_ptr())
          : ropenorm::build_rope_cache_range(c, first_position, max_positions, dt, out.data_ptr()));
  return out;
}

#undef ROPENORM_CONFIG_ARGS
#undef ROPENORM_CONFIG_PASS

}  // namespace

TORCH_LIBRARY(ropenorm, m) {
  // The fake (meta) implementations live in Python: a trace that meets these operators without
  // that module imported is told to import it.
  m.set_python_module("ropenorm._ops");
  m.def(
      "rms_norm(Tensor x, Tensor? weight=None, float eps=1e-06, float weight_offset=0., "
      "int rounding=0) -> (Tensor y, Tensor rstd)");
  m.def(
      "add_rms_norm(Tensor x, Tensor residual, Tensor? weight=None, float eps=1e-06, "
      "float weight_offset=0., int rounding=0) -> (Tensor y, Tensor residual_out)");
  m.def(
      "add_rms_norm_(Tensor x, Tensor(a!) residual, Tensor? weight=None, float eps=1e-06, "
      "float weight_offset=0., int rounding=0) -> Tensor y");
#define ROPENORM_ROPE_SCHEMA                                                                   \
  "Tensor? positions=None, int cos_sin_kind=0, Tensor? cos_sin_cache=None, Tensor? cos=None, " \
  "Tensor? sin=None, Tensor? inv_freq=None, float attention_scaling=1., int offset=0, "        \
  "Tensor? seq_offsets=None, int style=0, int rotary_dim=0, bool inverse=False, "              \
  "bool check_positions=False"
  m.def("rope(Tensor q, " ROPENORM_ROPE_SCHEMA ") -> Tensor q_out");
  m.def("rope_qk(Tensor q, Tensor k, " ROPENORM_ROPE_SCHEMA ") -> (Tensor q_out, Tensor k_out)");
  m.def("rope_(Tensor(a!) q, " ROPENORM_ROPE_SCHEMA ") -> ()");
  m.def("rope_qk_(Tensor(a!) q, Tensor(b!) k, " ROPENORM_ROPE_SCHEMA ") -> ()");
  m.def(
      "rms_norm_backward(Tensor dy, Tensor x, Tensor? weight=None, Tensor? rstd=None, "
      "float eps=1e-06, float weight_offset=0., bool weight_grad=True) -> "
      "(Tensor dx, Tensor dweight)");
  m.def(
      "add_rms_norm_backward(Tensor dy, Tensor? ds, Tensor s, Tensor? weight=None, "
      "Tensor? rstd=None, float eps=1e-06, float weight_offset=0., bool weight_grad=True, "
      "bool residual_grad=True) -> (Tensor dx, Tensor dresidual, Tensor dweight)");
#undef ROPENORM_ROPE_SCHEMA
#define ROPENORM_QK_ROPE_SCHEMA                                                                \
  "Tensor? positions=None, int cos_sin_kind=0, Tensor? cos_sin_cache=None, Tensor? cos=None, " \
  "Tensor? sin=None, Tensor? inv_freq=None, float attention_scaling=1., int offset=0, "        \
  "Tensor? seq_offsets=None, int style=0, int rotary_dim=0, bool check_positions=False"
  m.def(
      "qk_norm_rope(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, float eps=1e-06, "
      "float weight_offset=0., " ROPENORM_QK_ROPE_SCHEMA
      ") -> (Tensor q_out, Tensor k_out, Tensor q_rstd, Tensor k_rstd)");
  m.def(
      "qk_norm_rope_(Tensor(a!) q, Tensor(b!) k, Tensor q_weight, Tensor k_weight, "
      "float eps=1e-06, float weight_offset=0., " ROPENORM_QK_ROPE_SCHEMA
      ") -> (Tensor q_rstd, Tensor k_rstd)");
  m.def(
      "qk_norm_rope_backward(Tensor dq_out, Tensor dk_out, Tensor q, Tensor k, "
      "Tensor q_weight, Tensor k_weight, Tensor? q_rstd=None, Tensor? k_rstd=None, "
      "float eps=1e-06, float weight_offset=0., " ROPENORM_QK_ROPE_SCHEMA
      ", bool weight_grad=True) -> (Tensor dq, Tensor dk, Tensor dq_weight, Tensor dk_weight)");
#undef ROPENORM_QK_ROPE_SCHEMA
#define ROPENORM_CONFIG_SCHEMA                                                                \
  "str rope_type, float rope_theta, int rotary_dim, float factor=1., "                        \
  "int max_position_embeddings=0, int original_max_position_embeddings=0, "                   \
  "float low_freq_factor=1., float high_freq_factor=4., float beta_fast=32., "                \
  "float beta_slow=1., float mscale=0., float mscale_all_dim=0., float attention_factor=0., " \
  "bool truncate=True, int seq_len=0"
  m.def("rope_inv_freq(" ROPENORM_CONFIG_SCHEMA
        ", bool hf_float32=True) -> (Tensor inv_freq, float attention_scaling)");
  m.def("build_rope_cache(int max_positions, ScalarType dtype, " ROPENORM_CONFIG_SCHEMA
        ", int first_position=0) -> Tensor cache");
#undef ROPENORM_CONFIG_SCHEMA
}

TORCH_LIBRARY_IMPL(ropenorm, CUDA, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("add_rms_norm_", &add_rms_norm_);
  m.impl("rope", &rope);
  m.impl("rope_qk", &rope_qk);
  m.impl("rope_", &rope_);
  m.impl("rope_qk_", &rope_qk_);
  m.impl("rms_norm_backward", &rms_norm_backward);
  m.impl("add_rms_norm_backward", &add_rms_norm_backward);
  m.impl("qk_norm_rope", &qk_norm_rope);
  m.impl("qk_norm_rope_", &qk_norm_rope_);
  m.impl("qk_norm_rope_backward", &qk_norm_rope_backward);
}

// The CUDA kernels above check their first tensor and raise a ValueError naming it; a call whose
// tensors are all on the CPU reaches these instead, which do the same.
TORCH_LIBRARY_IMPL(ropenorm, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("add_rms_norm_", &add_rms_norm_);
  m.impl("rope", &rope);
  m.impl("rope_qk", &rope_qk);
  m.impl("rope_", &rope_);
  m.impl("rope_qk_", &rope_qk_);
  m.impl("rms_norm_backward", &rms_norm_backward);
  m.impl("add_rms_norm_backward", &add_rms_norm_backward);
  m.impl("qk_norm_rope", &qk_norm_rope);
  m.impl("qk_norm_rope_", &qk_norm_rope_);
  m.impl("qk_norm_rope_backward", &qk_norm_rope_backward);
}

// No tensor arguments: the dispatcher sends these to the CompositeExplicitAutograd kernel.
TORCH_LIBRARY_IMPL(ropenorm, CompositeExplicitAutograd, m) {
  m.impl("rope_inv_freq", &rope_inv_freq);
  m.impl("build_rope_cache", &build_rope_cache);
}
