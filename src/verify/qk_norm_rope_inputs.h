// Device copies of the inputs the fused QK-norm + RoPE forward and backward cases share: the
// weights wq and wk, the positions (explicit int32 / int64, or arange + offset) and the cos/sin
// source, each uploaded at offset 0 with its [T, H, D]-case view.
#pragma once

#include "reference/host_tensor.h"
#include "ropenorm/rope.h"
#include "ropenorm/tensor.h"
#include "verify/device_buffer.h"
#include "verify/rope_case.h"

namespace ropenorm::verify {

/// The buffers (owned) and the views of them that the public API receives.
struct QkNormRopeDeviceInputs {
  DeviceBuffer wq_buf, wk_buf, pos_buf, seq_buf, cache_buf, cos_buf, sin_buf, inv_buf;
  TensorRef wq, wk;  ///< [D] each, of the weights' dtype
  RopePositions pos;
  RopeCosSin cs;
};

/// An fp32 rstd view at p for `heads` heads per token: [T, heads], or [B, S, heads] when
/// c.batch > 0 (the leading dims of q and k), contiguous.
TensorRef rstd_view(const RopeCase& c, void* p, int64_t heads);

/// Uploads wq and wk (each in its host tensor's dtype) and the case's positions and cos/sin
/// source, shaped by the case's leading dims ([T], or [B, S] when c.batch > 0: explicit
/// positions, per-token gathered cos/sin; per-sequence offsets [B]).
QkNormRopeDeviceInputs upload_qk_norm_rope_inputs(const RopeCase& c, const RopeInputs& in,
                                                  const HostTensor& wq, const HostTensor& wk);

}  // namespace ropenorm::verify
