// Validation of RoPE calls: every check runs on the host before anything is launched, so a failed
// call writes nothing. The geometry the launcher needs (B, S, heads, R, P) is derived here too.
#pragma once

#include <cstdint>

#include "ropenorm/rope.h"

namespace ropenorm::core {

/// The arguments of one rope call.
struct RopeCall {
  TensorRef q, k, q_out, k_out;
  RopePositions positions;
  RopeCosSin cos_sin;
  RopeParams params;
};

/// Sizes of a validated call.
struct RopeGeometry {
  int64_t batch = 1;   ///< B (1 for a 3-D q)
  int64_t seq = 0;     ///< S (T for a 3-D q)
  int64_t tokens = 0;  ///< T = B * S
  int64_t hq = 0, hk = 0;
  int64_t head_dim = 0;    ///< D
  int64_t rotary_dim = 0;  ///< R (params.rotary_dim, or D when 0)
  int64_t table_rows = 0;  ///< P for kCache / kHfCosSin, else 0
};

/// Largest head_dim and largest Hq + Hk served (the kernels index them with 32-bit integers).
constexpr int64_t kRopeMaxHeadDim = int64_t{1} << 20;
constexpr int64_t kRopeMaxHeads = int64_t{1} << 20;

/// Checks shapes, dtypes, strides, values and overlaps; then, when device >= 0, that every
/// tensor is on cuda:device. Returns the first problem found. Fills *geometry when given and ok.
Status validate_rope(const RopeCall& call, int device, RopeGeometry* geometry = nullptr);

/// Only the device part of validate_rope: every present tensor is on cuda:device.
Status validate_rope_devices(const RopeCall& call, int device);

/// Checked mode on host copies: `pos` holds the T positions, token order (b, s) row-major, as
/// resolved from the call's positions / offset / seq_offsets. Every value must be in
/// [0, table_rows) (table_rows > 0), or >= 0 when table_rows == 0 (kInvFreq). The error names
/// 'positions' (or 'seq_offsets' / 'offset' for implicit positions, per `arg`) and the first
/// bad token with its (b, s) index.
Status check_position_values(const char* arg, const int64_t* pos, int64_t tokens, int64_t seq,
                             int64_t table_rows);

/// Element offset of the last addressed element of a view, + 1 (its span in elements from the
/// base), 0 when the view is empty: what a host copy of the view must cover.
int64_t span_elements(const TensorRef& t);

}  // namespace ropenorm::core
