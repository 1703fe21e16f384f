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

/// Largest head_dim the fused kernel serves (a head vector is held in one warp's registers).
constexpr int64_t kQkNormRopeMaxHeadDim = 512;

/// Checks everything; when device >= 0 also that every tensor is on cuda:device. Fills
/// *geometry (validate_rope's) when given and ok.
Status validate_qk_norm_rope(const QkNormRopeCall& call, int device,
                             RopeGeometry* geometry = nullptr);

/// Only the device part of validate_qk_norm_rope: every present tensor is on cuda:device.
Status validate_qk_norm_rope_devices(const QkNormRopeCall& call, int device);

}  // namespace ropenorm::core
