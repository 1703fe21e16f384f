// The C++ snippets of README.md, compiled: each block there appears here verbatim (its #include
// lines at the top of this file, its other lines as one run inside a function whose parameters
// stand for the buffers and sizes the snippet takes as given). Built with the examples, never
// run; tests/python/test_readme_snippets.py checks that every README block is here, so the
// README's code compiles against the current headers.
#include <ropenorm/qk_norm_rope.h>
#include <ropenorm/qk_norm_rope_backward.h>
#include <ropenorm/rms_norm.h>
#include <ropenorm/rms_norm_backward.h>
#include <ropenorm/rope.h>

#include <cstdint>
#include <cstdio>

namespace snippets {

using ropenorm::RopeCosSin;
using ropenorm::RopeParams;
using ropenorm::RopePositions;
using ropenorm::Stream;
using ropenorm::TensorRef;

void readme_rms_norm(void* x_ptr, void* w_ptr, void* y_ptr, void* rstd_ptr, int64_t tokens,
                     const TensorRef& residual, Stream stream) {
  // clang-format off
using namespace ropenorm;
// x: [tokens, 4096] bf16 on cuda:0 (any row stride), w: [4096] (bf16 or f32), y like x.
TensorRef x = TensorRef::contiguous(x_ptr, DType::kBFloat16, {tokens, 4096}, Device::cuda(0));
TensorRef w = TensorRef::contiguous(w_ptr, DType::kBFloat16, {4096}, Device::cuda(0));
TensorRef y = TensorRef::contiguous(y_ptr, DType::kBFloat16, {tokens, 4096}, Device::cuda(0));
TensorRef rstd = TensorRef::contiguous(rstd_ptr, DType::kFloat32, {tokens}, Device::cuda(0));

RmsNormParams p;
p.eps = 1e-6f;              // finite, in [1e-12, 1e-2]
p.weight_offset = 0.0f;     // 1.0f for Gemma's (1 + w)
p.rounding = Rounding::kExact;
Status st = rms_norm(x, w, y, rstd, p, stream);   // rstd may be TensorRef() (not saved)
if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());

// Fused residual add, in place: residual <- x + residual, y <- rms_norm(x + residual).
st = add_rms_norm(x, residual, w, y, /*residual_out=*/residual, TensorRef(), p, stream);
  // clang-format on
}

void readme_rope(int64_t max_positions, void* host_cache, void* cache_ptr, void* pos_ptr, int64_t T,
                 const TensorRef& q, const TensorRef& k, Stream stream) {
  // clang-format off
using namespace ropenorm;
// q: [T, 32, 128], k: [T, 8, 128] views of a packed [T, 48 * 128] QKV buffer (bf16).
RopeConfig cfg;            // Hugging Face rope parameters: type, theta, factor, ...
cfg.theta = 500000.0;
cfg.rotary_dim = 128;
build_rope_cache(cfg, max_positions, DType::kFloat32, host_cache);  // [P, R]: cos half | sin half
// ... copy host_cache to the device as `cache` ...
RopeCosSin cs;
cs.kind = CosSinKind::kCache;
cs.cache = TensorRef::contiguous(cache_ptr, DType::kFloat32, {max_positions, 128}, Device::cuda(0));
RopePositions pos;
pos.positions = TensorRef::contiguous(pos_ptr, DType::kInt64, {T}, Device::cuda(0));
RopeParams rp;              // style neox (rotate_half) or gptj (interleaved), rotary_dim, inverse
Status st = rope(q, k, /*q_out=*/q, /*k_out=*/k, pos, cs, rp, stream);   // in place
(void)st;
  // clang-format on
}

void readme_rms_norm_backward(int64_t tokens, void* ws_ptr, const TensorRef& dy, const TensorRef& x,
                              const TensorRef& w, const TensorRef& rstd, const TensorRef& dw,
                              const TensorRef& ds, const TensorRef& s, const TensorRef& dx,
                              const TensorRef& dresidual, Stream stream) {
  // clang-format off
using namespace ropenorm;
// dy, x: [tokens, 4096] bf16; rstd: the forward's [tokens] f32; dx may be exactly dy.
size_t bytes = rms_norm_backward_workspace_size(tokens, 4096);   // depends on N and the device
TensorRef ws = TensorRef::contiguous(ws_ptr, DType::kFloat32, {int64_t(bytes / 4)}, Device::cuda(0));
RmsNormBackwardParams bp;   // eps (used only without rstd), weight_offset
Status st = rms_norm_backward(dy, x, w, rstd, /*dx=*/dy, dw, ws, bp, stream);
st = add_rms_norm_backward(dy, ds, s, w, rstd, dx, dresidual, dw, ws, bp, stream);
  // clang-format on
}

void readme_qk_norm_rope(uint16_t* qkv_ptr, int64_t T, int64_t Hq, int64_t Hk, int64_t D,
                         const TensorRef& wq, const TensorRef& wk, const TensorRef& q_rot,
                         const TensorRef& k_rot, const TensorRef& q_rstd, const TensorRef& k_rstd,
                         const RopePositions& pos, const RopeCosSin& cs, const RopeParams& rp,
                         void* ws_ptr, const TensorRef& dq_rot, const TensorRef& dk_rot,
                         const TensorRef& dq, const TensorRef& dk, const TensorRef& dwq,
                         const TensorRef& dwk, Stream stream) {
  // clang-format off
using namespace ropenorm;
// qkv: the packed projection output [T, (Hq + 2 * Hk) * D] (an element pointer, e.g.
// __nv_bfloat16*); q and k are views into it.
const int64_t row = (Hq + 2 * Hk) * D;
TensorRef q(qkv_ptr, DType::kBFloat16, {T, Hq, D}, {row, D, 1}, Device::cuda(0));
TensorRef k(qkv_ptr + Hq * D, DType::kBFloat16, {T, Hk, D}, {row, D, 1}, Device::cuda(0));
QkNormParams np;            // eps, weight_offset (1 for Gemma's 1 + w)
// Forward, out of place (the backward reads q and k), r saved per head ([T, Hq], [T, Hk] f32).
Status st = qk_norm_rope(q, k, wq, wk, q_rot, k_rot, q_rstd, k_rstd, pos, cs, rp, np, stream);
// Backward: dq and dk may be views of the packed gradient of qkv.
size_t bytes = qk_norm_rope_backward_workspace_size(T, Hq, Hk, D);
TensorRef ws = TensorRef::contiguous(ws_ptr, DType::kFloat32, {int64_t(bytes / 4)}, Device::cuda(0));
st = qk_norm_rope_backward(dq_rot, dk_rot, q, k, wq, wk, q_rstd, k_rstd, dq, dk, dwq, dwk, ws,
                           pos, cs, rp, np, stream);
  // clang-format on
}

}  // namespace snippets
