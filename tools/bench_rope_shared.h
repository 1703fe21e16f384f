// Pieces the RoPE forward and backward rows of the main job share: the device buffers of one
// shape, the baseline's view of them, and the checks of ropenorm's and the baseline's outputs
// against the float64 oracle (forward, or the inverse rotation of the backward).
//
// The baseline's check: it rounds cos and sin to q's dtype (Hugging Face's cos.to(x.dtype)), so
// its oracle rotates with those rounded values; it then rounds x * cos and rot * sin separately
// and their sum once more, so under cancellation (a c close to b s) its error is bounded by the
// products' magnitudes, not by the output's ulp. Each element is therefore allowed
// product_term * (ulp(|x * cos|) + ulp(|rot * sin|)) (output-dtype ulps at the exact products)
// before its error is measured in output ulps against the q_out / k_out rows of
// "rope_unfused_baseline" in the tolerance table. The error without that allowance is reported in
// the row's note ("raw").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "baseline_rope.h"
#include "receipt.h"
#include "reference/host_tensor.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/rope_case.h"

namespace ropenorm::bench {

/// The main job's standard RoPE case: bf16 q (hq heads) and k (hk heads) of head_dim d at t
/// tokens as separate tensors, an f32 cos/sin cache of t rows, random int64 positions.
verify::RopeCase standard_rope_case(int64_t t, int64_t hq, int64_t hk, int64_t d, RopeStyle style,
                                    uint64_t seed);

/// Bytes one rotation of the case moves: q and k read and written, the cache rows (or, for
/// tables gathered per token, the halves of cos and sin it reads) and the positions (none for
/// gathered tables).
int64_t rope_case_bytes(const verify::RopeCase& c);

/// The case with Hugging Face's cos/sin gathered per token ([T, R], in q's dtype, as a model in
/// that dtype passes its position_embeddings) instead of the cache at the positions.
verify::RopeCase gathered_rope_case(const verify::RopeCase& c);

/// The gathered case's tables (its inputs' cos and sin on the device) as the public calls take
/// them.
RopeCosSin rope_case_gathered(const verify::RopeCase& g, const verify::DeviceBuffer& cos,
                              const verify::DeviceBuffer& sin);

/// The receipt's shape of the case: T, Hq, Hk, D.
std::vector<std::pair<std::string, int64_t>> rope_case_shape(const verify::RopeCase& c);

/// Device copies of a case's q, k, cache and positions, and output and baseline scratch buffers.
struct RopeShapeBuffers {
  verify::DeviceBuffer q, k, q_out, k_out, cache, pos, cos, sin, rot;
};

/// Uploads the case's inputs; allocates q_out, k_out and the baseline's scratch (not poisoned).
RopeShapeBuffers upload_rope_shape(const verify::RopeCase& c, const verify::RopeInputs& in);

/// The [T, nh, D] view of one of the buffers (in the case's dtype) on device 0.
TensorRef rope_heads_view(const verify::RopeCase& c, const verify::DeviceBuffer& buf, int64_t nh);

/// The case's positions (int64 [T] in pos) and cos/sin cache ([table_rows, D] in cache), as
/// the public rope-family calls take them.
RopePositions rope_case_positions(const verify::RopeCase& c, const verify::DeviceBuffer& pos);
RopeCosSin rope_case_cache(const verify::RopeCase& c, const verify::DeviceBuffer& cache);

/// The baseline's view of the buffers (reading q, k; writing q_out, k_out).
RopeBaselineBuffers rope_baseline_view(const verify::RopeCase& c, const RopeShapeBuffers& b);

/// ropenorm's errors from a verify outcome into the row (max ulps, tolerance, exact share, pass).
void fill_rope_errors(const verify::RopeOutcome& out, ResultRow* row);

/// The baseline's outputs against the oracle (see the file comment): the forward rotation, or
/// with `inverse` the backward's; fills the row's errors and appends to its note.
void check_rope_baseline(const verify::RopeCase& c, const verify::RopeInputs& in,
                         const ref::HostTensor& q_out, const ref::HostTensor& k_out, bool inverse,
                         ResultRow* row);

}  // namespace ropenorm::bench
