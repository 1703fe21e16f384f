// The PyTorch operators of ropenorm: torch tensors -> ropenorm::TensorRef -> the core call.
//
// Thin on purpose: the core validates every argument and names it in its error; this file only
// maps types (dtype, sizes, strides, device), allocates the outputs the schema returns, picks the
// tensor's device and that device's current CUDA stream, and turns a failed Status into the
// Python exception its code stands for:
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
#include <vector>

#include "ropenorm/rms_norm.h"
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

// x's shape without its last dim: the shape of rstd.
std::vector<int64_t> row_shape(const Tensor& x, const char* op) {
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": argument 'x': expected at least 1 dim ([..., N]), ",
                    "received a 0-dim tensor");
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().end() - 1);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

std::tuple<Tensor, Tensor> rms_norm(const Tensor& x, const OptTensor& weight, double eps,
                                    double weight_offset, int64_t rounding) {
  constexpr const char* op = "ropenorm.rms_norm";
  check_cuda(x, op, "x");
  const ropenorm::RmsNormParams p = norm_params(eps, weight_offset, rounding, op);
  const std::vector<int64_t> rows = row_shape(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  Tensor rstd = at::empty(rows, x.options().dtype(at::kFloat));
  // The core wants one contiguous element per row; a flat view says so for any rank.
  const Tensor rstd_flat = rstd.view({rstd.numel()});
  check_status(ropenorm::rms_norm(to_ref(x, op, "x"), to_ref(weight, op, "weight"),
                                  to_ref(y, op, "y"), to_ref(rstd_flat, op, "rstd"), p,
                                  current_stream(x)));
  return {y, rstd};
}

std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual,
                                        const OptTensor& weight, double eps, double weight_offset,
                                        int64_t rounding) {
  constexpr const char* op = "ropenorm.add_rms_norm";
  check_cuda(x, op, "x");
  const ropenorm::RmsNormParams p = norm_params(eps, weight_offset, rounding, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  Tensor residual_out =
      at::empty(residual.sizes(), residual.options().memory_format(at::MemoryFormat::Contiguous));
  check_status(ropenorm::add_rms_norm(
      to_ref(x, op, "x"), to_ref(residual, op, "residual"), to_ref(weight, op, "weight"),
      to_ref(y, op, "y"), to_ref(residual_out, op, "residual_out"), ropenorm::TensorRef(), p,
      current_stream(x)));
  return {y, residual_out};
}

Tensor add_rms_norm_(const Tensor& x, const Tensor& residual, const OptTensor& weight, double eps,
                     double weight_offset, int64_t rounding) {
  constexpr const char* op = "ropenorm.add_rms_norm_";
  check_cuda(x, op, "x");
  const ropenorm::RmsNormParams p = norm_params(eps, weight_offset, rounding, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const ropenorm::TensorRef res = to_ref(residual, op, "residual");
  check_status(ropenorm::add_rms_norm(to_ref(x, op, "x"), res, to_ref(weight, op, "weight"),
                                      to_ref(y, op, "y"), res, ropenorm::TensorRef(), p,
                                      current_stream(x)));
  return y;
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

#define ROPENORM_ROPE_ARGS                                                                  \
  const OptTensor &positions, int64_t cos_sin_kind, const OptTensor &cos_sin_cache,         \
      const OptTensor &cos, const OptTensor &sin, const OptTensor &inv_freq,                \
      double attention_scaling, int64_t offset, const OptTensor &seq_offsets, int64_t style, \
      int64_t rotary_dim, bool inverse, bool check_positions
#define ROPENORM_ROPE_PASS                                                                 \
  positions, cos_sin_kind, cos_sin_cache, cos, sin, inv_freq, attention_scaling, offset,   \
      seq_offsets, style, rotary_dim, inverse, check_positions

Tensor rope(const Tensor& q, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope";
  check_cuda(q, op, "q");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  const c10::cuda::CUDAGuard device_guard(q.device());
  Tensor q_out = at::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  check_status(ropenorm::rope(to_ref(q, op, "q"), ropenorm::TensorRef(), to_ref(q_out, op, "q_out"),
                              ropenorm::TensorRef(), a.positions, a.cos_sin, a.params,
                              current_stream(q)));
  return q_out;
}

std::tuple<Tensor, Tensor> rope_qk(const Tensor& q, const Tensor& k, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope_qk";
  check_cuda(q, op, "q");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  const c10::cuda::CUDAGuard device_guard(q.device());
  Tensor q_out = at::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  Tensor k_out = at::empty(k.sizes(), k.options().memory_format(at::MemoryFormat::Contiguous));
  check_status(ropenorm::rope(to_ref(q, op, "q"), to_ref(k, op, "k"), to_ref(q_out, op, "q_out"),
                              to_ref(k_out, op, "k_out"), a.positions, a.cos_sin, a.params,
                              current_stream(q)));
  return {q_out, k_out};
}

void rope_(const Tensor& q, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope_";
  check_cuda(q, op, "q");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  check_status(ropenorm::rope(qr, ropenorm::TensorRef(), qr, ropenorm::TensorRef(), a.positions,
                              a.cos_sin, a.params, current_stream(q)));
}

void rope_qk_(const Tensor& q, const Tensor& k, ROPENORM_ROPE_ARGS) {
  constexpr const char* op = "ropenorm.rope_qk_";
  check_cuda(q, op, "q");
  const RopeArgs a = rope_args(op, ROPENORM_ROPE_PASS);
  const c10::cuda::CUDAGuard device_guard(q.device());
  const ropenorm::TensorRef qr = to_ref(q, op, "q");
  const ropenorm::TensorRef kr = to_ref(k, op, "k");
  check_status(
      ropenorm::rope(qr, kr, qr, kr, a.positions, a.cos_sin, a.params, current_stream(q)));
}

#undef ROPENORM_ROPE_ARGS
#undef ROPENORM_ROPE_PASS

// ---------------------------------------------------------------------------------------------
// Host-side rope parameters (CPU, no device involved).

#define ROPENORM_CONFIG_ARGS                                                                \
  c10::string_view rope_type, double rope_theta, int64_t rotary_dim, double factor,         \
      int64_t max_position_embeddings, int64_t original_max_position_embeddings,            \
      double low_freq_factor, double high_freq_factor, double beta_fast, double beta_slow,  \
      double mscale, double mscale_all_dim, double attention_factor, bool truncate,         \
      int64_t seq_len
#define ROPENORM_CONFIG_PASS                                                                 \
  rope_type, rope_theta, rotary_dim, factor, max_position_embeddings,                        \
      original_max_position_embeddings, low_freq_factor, high_freq_factor, beta_fast,        \
      beta_slow, mscale, mscale_all_dim, attention_factor, truncate, seq_len

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
  TORCH_CHECK_VALUE(max_positions >= 0, op,
                    ": argument 'max_positions': expected >= 0, received ", max_positions);
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, op,
                   ": argument 'dtype': expected torch.float32, torch.float16 or torch.bfloat16, "
                   "received ",
                   torch_dtype_name(dtype));
  TORCH_CHECK_VALUE(rotary_dim > 0, op, ": argument 'rotary_dim': expected > 0, received ",
                    rotary_dim);
  Tensor out = at::empty({max_positions, rotary_dim}, at::TensorOptions().dtype(dtype));
  check_status(ropenorm::build_rope_cache_range(c, first_position, max_positions,
                                                to_dtype(dtype, op, "dtype"), out.data_ptr()));
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
#define ROPENORM_ROPE_SCHEMA                                                                    \
  "Tensor? positions=None, int cos_sin_kind=0, Tensor? cos_sin_cache=None, Tensor? cos=None, " \
  "Tensor? sin=None, Tensor? inv_freq=None, float attention_scaling=1., int offset=0, "       \
  "Tensor? seq_offsets=None, int style=0, int rotary_dim=0, bool inverse=False, "             \
  "bool check_positions=False"
  m.def("rope(Tensor q, " ROPENORM_ROPE_SCHEMA ") -> Tensor q_out");
  m.def("rope_qk(Tensor q, Tensor k, " ROPENORM_ROPE_SCHEMA ") -> (Tensor q_out, Tensor k_out)");
  m.def("rope_(Tensor(a!) q, " ROPENORM_ROPE_SCHEMA ") -> ()");
  m.def("rope_qk_(Tensor(a!) q, Tensor(b!) k, " ROPENORM_ROPE_SCHEMA ") -> ()");
#undef ROPENORM_ROPE_SCHEMA
#define ROPENORM_CONFIG_SCHEMA                                                               \
  "str rope_type, float rope_theta, int rotary_dim, float factor=1., "                      \
  "int max_position_embeddings=0, int original_max_position_embeddings=0, "                 \
  "float low_freq_factor=1., float high_freq_factor=4., float beta_fast=32., "              \
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
}

// No tensor arguments: the dispatcher sends these to the CompositeExplicitAutograd kernel.
TORCH_LIBRARY_IMPL(ropenorm, CompositeExplicitAutograd, m) {
  m.impl("rope_inv_freq", &rope_inv_freq);
  m.impl("build_rope_cache", &build_rope_cache);
}
