// Validation of qk_norm_rope calls: the RoPE part is validate_rope's (its messages re-labelled
// with this op's name), plus the weights, eps, the weight offset and the rstd outputs. Every
// check runs on the host before anything is launched.
#pragma once

#include <cstdint>

#include "core/rope_validate.h"
#include "ropenorm/qk_norm_rope.h"

namespace ropenorm::core {

/// The arguments of one qk_norm_rope call.
struct QkNormRopeCall {
  RopeCall rope;  ///< q, k, q_out, k_out, positions, cos/sin, rope params
  TensorRef wq, wk, q_rstd, k_rstd;
  QkNormParams norm;
};

/// The call record of qk_norm_rope's arguments (the public entry point's order).
QkNormRopeCall qk_norm_rope_call(const TensorRef& q, const TensorRef& k, const TensorRef& wq,
                                 const TensorRef& wk, const TensorRef& q_out,
                                 const TensorRef& k_out, const TensorRef& q_rstd,
                                 const TensorRef& k_rstd, const RopePositions& positions,
                                 const RopeCosSin& cos_sin, const RopeParams& rope_params,
                                 const QkNormParams& norm_params);

/// Largest head_dim the fused kernel serves (a head vector is held in one warp's registers).
constexpr int64_t kQkNormRopeMaxHeadDim = 512;

/// Checks everything; when device >= 0 also that every tensor is on cuda:device. Fills
/// *geometry (validate_rope's) when given and ok.
Status validate_qk_norm_rope(const QkNormRopeCall& call, int device,
                             RopeGeometry* geometry = nullptr);

/// Only the device part of validate_qk_norm_rope: every present tensor is on cuda:device.
Status validate_qk_norm_rope_devices(const QkNormRopeCall& call, int device);

/// The arguments of one qk_norm_rope_backward call. `fwd` describes the forward it differentiates,
/// with the results in the output slots: fwd.rope.q / k are the forward's inputs, fwd.rope.q_out /
/// k_out are dq / dk, fwd.wq, wk, q_rstd, k_rstd, norm and the RoPE parameters the forward's.
struct QkNormRopeBackwardCall {
  QkNormRopeCall fwd;
  TensorRef dq_out, dk_out;  ///< incoming gradients (read)
  TensorRef dwq, dwk;        ///< weight gradients (written), or absent
  TensorRef workspace;       ///< fp32 dw partials (written), or absent
};

/// The call record of qk_norm_rope_backward's arguments (the public entry point's order).
QkNormRopeBackwardCall qk_norm_rope_backward_call(
    const TensorRef& dq_out, const TensorRef& dk_out, const TensorRef& q, const TensorRef& k,
    const TensorRef& wq, const TensorRef& wk, const TensorRef& q_rstd, const TensorRef& k_rstd,
    const TensorRef& dq, const TensorRef& dk, const TensorRef& dwq, const TensorRef& dwk,
    const TensorRef& workspace, const RopePositions& positions, const RopeCosSin& cos_sin,
    const RopeParams& rope_params, const QkNormParams& norm_params);

/// Everything validate_qk_norm_rope checks on fwd (messages naming this op, dq and dk), plus:
/// rope params' inverse false, dq / dk not the forward's inputs, dq_out / dk_out shapes and
/// dtypes, dq / dk exactly dq_out / dk_out or sharing no memory with them, dwq / dwk ([D], the
/// weight's dtype), the workspace (f32, contiguous, present when a dw is wanted) and that no
/// written tensor overlaps another argument. When sm_count > 0, also that the workspace holds
/// the bytes a launch planned for that many multiprocessors needs; when device >= 0, that every
/// tensor is on cuda:device. Fills *geometry when given and ok.
Status validate_qk_norm_rope_backward(const QkNormRopeBackwardCall& call, int device, int sm_count,
                                      RopeGeometry* geometry = nullptr);

/// Only the device part of validate_qk_norm_rope_backward.
Status validate_qk_norm_rope_backward_devices(const QkNormRopeBackwardCall& call, int device);

/// Only the workspace size part of validate_qk_norm_rope_backward, for a launch planned for
/// sm_count multiprocessors (geometry: the validated call's).
Status validate_qk_norm_rope_backward_workspace(const QkNormRopeBackwardCall& call,
                                                const RopeGeometry& geometry, int sm_count);

}  // namespace ropenorm::core
