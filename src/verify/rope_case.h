// One RoPE verification case: inputs drawn fresh, outputs poisoned (0xFF), the kernel run
// through the public API, every output element compared with the float64 oracle under the one
// tolerance table, pass-through channels compared bit for bit, and every byte outside the views
// checked untouched. Used by the GPU tests and the command-line verifier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rope_plan.h"
#include "reference/host_tensor.h"
#include "reference/tolerance.h"
#include "ropenorm/rope.h"

namespace ropenorm::verify {

using ref::HostTensor;

/// How q and k (and their outputs) sit in memory.
enum class RopeLayout {
  kSeparate,   ///< q and k each contiguous in their own buffer
  kPackedQkv,  ///< views into one [T, (Hq + 2 * Hk) * D] buffer (q, then k, then v)
  kHfBhsd,     ///< Hugging Face [B, H, S, D] buffers, passed as [B, S, H, D] views by strides
};

/// How positions are given.
enum class RopePosKind {
  kI32,            ///< explicit int32
  kI64,            ///< explicit int64
  kArange,         ///< implicit s + offset
  kArangeSeqOffs,  ///< implicit s + offset + seq_offsets[b] (seq_offsets int32 or int64)
};

struct RopeCase {
  int64_t batch = 0;  ///< 0: q is [T, Hq, D] with T = seq; > 0: q is [B, S, Hq, D]
  int64_t seq = 1;    ///< S (or T)
  int64_t hq = 8, hk = 1;
  bool has_k = true;
  int64_t head_dim = 128;
  int64_t rotary_dim = 0;  ///< 0: head_dim (passed to the API as 0)
  RopeStyle style = RopeStyle::kNeox;
  DType dtype = DType::kBFloat16;  ///< q, k and outputs
  CosSinKind source = CosSinKind::kCache;
  DType cs_dtype = DType::kFloat32;  ///< cache / cos / sin dtype (inv_freq is always f32)
  RopeLayout layout = RopeLayout::kSeparate;
  int64_t storage_offset = 0;  ///< elements before every tensor's first element (misalignment)
  RopePosKind pos_kind = RopePosKind::kI64;
  bool pos_flat = false;      ///< 4-D q with explicit positions: [B * S] instead of [B, S]
  bool seq_offs_i64 = true;   ///< kArangeSeqOffs: seq_offsets dtype
  int64_t table_rows = 4096;  ///< P of the cache / Hugging Face tables; positions in [0, P)
  /// kHfCosSinGathered with B > 0: one [S, R] table viewed as [B, S, R] with batch stride 0 (a
  /// [1, S, R] table broadcast over the batch, as Hugging Face models pass it), its rows those
  /// of the first sequence's positions.
  bool gathered_broadcast = false;
  bool in_place = false;
  bool inverse = false;
  bool check_positions = false;
  bool allow_lean = true;  ///< false: the general kernel where the planner would pick the lean one
  int64_t bad_token = -1;  ///< >= 0: this token's position is set to P (out of range)
  double theta = 10000.0;
  float attention_scaling = 1.0f;  ///< kInvFreq only
  uint64_t seed = 1;

  int64_t tokens() const { return (batch > 0 ? batch : 1) * seq; }
  int64_t rot() const { return rotary_dim == 0 ? head_dim : rotary_dim; }
  /// Rows of a gathered case's tables: one per sequence index when broadcast over B > 0, else
  /// one per token.
  int64_t gathered_rows() const { return gathered_broadcast && batch > 0 ? seq : tokens(); }
  /// The table row of token tok = b * S + s of a gathered case.
  int64_t gathered_row(int64_t tok) const {
    return gathered_broadcast && batch > 0 ? tok % seq : tok;
  }
};

/// Host copies of a case's inputs (drawn by make_inputs, editable before run_case).
struct RopeInputs {
  HostTensor q, k;                   ///< logical [T, Hq, D], [T, Hk, D], token-major (b * S + s)
  std::vector<int64_t> positions;    ///< each token's position (what the oracle uses)
  std::vector<int64_t> seq_offsets;  ///< [B] (kArangeSeqOffs)
  int64_t offset = 0;                ///< arange offset
  HostTensor cache;                  ///< [P, R] (kCache; rows nobody reads may be NaN)
  HostTensor cos, sin;          ///< [P, R] (kHfCosSin) or [gathered_rows(), R] (kHfCosSinGathered)
  std::vector<float> inv_freq;  ///< [R / 2] (kInvFreq)
};

/// The device view of a gathered case's cos or sin table at p (c.cs_dtype, R = c.rot()): [B, S, R]
/// for B > 0 (batch stride 0 when c.gathered_broadcast), else [T, R].
TensorRef gathered_table_view(const RopeCase& c, void* p);

/// Largest error of a set of elements, in output ulps, after the source's fp32 allowance.
/// Error statistics of one output against the oracle (the shared measure of the tolerance table).
using RopeErrorStats = ref::ErrorStats;

struct RopeOutcome {
  Status status;
  RopeErrorStats q, k;
  double tol_q = 0, tol_k = 0, tol_term = 0;
  int64_t tail_mismatch = 0;  ///< pass-through elements not bitwise equal to the input
  int64_t pad_written = 0;    ///< output-buffer bytes outside the views that changed
  int64_t input_changed = 0;  ///< input bytes changed (out of place only)
  HostTensor q_out, k_out;    ///< logical, like the inputs
  core::RopePlan plan;        ///< the launch cuda::run_rope planned (when the call got that far)
  bool passed = false;
  std::string summary;
};

/// Fresh random inputs for the case (seeded by c.seed). Positions are random and non-monotone
/// (explicit kinds) in [0, P).
RopeInputs make_inputs(const RopeCase& c);

/// Runs the case on the current CUDA device and compares with the oracle. A failed call leaves
/// status not ok and counts, in pad_written, any output byte it changed.
RopeOutcome run_case(const RopeCase& c, const RopeInputs& in);

/// "rope bf16 B=2 S=7 Hq=8 Hk=1 D=128 R=64 neox cache:f32 packed i64 off=1 in-place".
std::string describe(const RopeCase& c);

}  // namespace ropenorm::verify
