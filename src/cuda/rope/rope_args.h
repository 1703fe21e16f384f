// The plain-data argument block the RoPE kernel receives, built by the launcher after validation
// (the kernel trusts it). Strides and offsets are in elements, all 64-bit.
#pragma once

#include <cstdint>

#include "core/rope_plan.h"
#include "ropenorm/rope.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

/// One head-vector operand (q, k, q_out or k_out): element (b, s, head, d) lives at
/// data + b * sb + s * ss + head * sh + d.
struct RopeOperand {
  void* data;
  int64_t sb, ss, sh;
};

/// Where a token's cos/sin values come from. Mirrors CosSinKind.
enum class RopeSource : int { kCache = 0, kTable = 1, kGathered = 2, kInvFreq = 3 };

struct RopeKernelArgs {
  RopeOperand q, q_out, k, k_out;  // k / k_out data nullptr when k is absent
  int64_t seq;                     // S: token t is (b, s) = (t / S, t % S)
  int64_t tokens;                  // T = B * S
  int64_t batch;                   // B
  int hq, hk;                      // heads of q and k
  int head_dim;                    // D
  int half;                        // h = R / 2
  bool gptj;                       // pair (2i, 2i + 1) instead of (i, i + h)
  bool inverse;                    // rotate by -angle
  bool copy_q_tail, copy_k_tail;   // copy channels R .. D - 1 (out of place only)

  // Positions: explicit (pos != nullptr): p = pos[b * pos_sb + s * pos_ss];
  // implicit: p = s + offset + (seq_off ? seq_off[b * seq_off_stride] : 0).
  const void* pos;
  bool pos_i64;
  int64_t pos_sb, pos_ss;
  int64_t offset;
  const void* seq_off;
  bool seq_off_i64;
  int64_t seq_off_stride;

  // cos/sin: c_i at cos[row + i], s_i at sin[row + i], where row = p * *_row (kCache / kTable)
  // or b * *_sb + s * *_ss (kGathered); for kCache, sin = cos + h (one table).
  RopeSource source;
  const void* cos;
  const void* sin;
  DType cs_dtype;
  bool tables_flat;  // rows by position within the flat walk's 32-bit bounds (rope_tables_flat)
  int64_t cos_row, sin_row;
  int64_t cos_sb, cos_ss, sin_sb, sin_ss;
  const float* inv_freq;  // kInvFreq
  float scaling;          // kInvFreq: multiplies c and s
};

/// The cos/sin rows are indexed by position (kCache or kTable: the lean kernels' LeanRows and
/// decode instances apply).
inline bool rope_rows_by_position(const RopeKernelArgs& a) {
  return a.source == RopeSource::kCache || a.source == RopeSource::kTable;
}

/// Tables of P rows indexed by position (row strides cos_row and sin_row elements of cs_dtype)
/// are within the flat walk's 32-bit bounds: at most core::kFlatMaxTokens rows (so a position in
/// [0, P) fits in 32 bits) of at most core::kFlatMaxStrideBytes.
inline bool rope_tables_flat(int64_t table_rows, int64_t cos_row, int64_t sin_row, DType cs_dtype) {
  const auto cs = static_cast<int64_t>(dtype_size(cs_dtype));
  const core::TokenStrides rows[2] = {{0, cos_row, cs}, {0, sin_row, cs}};
  return core::flat_tokens(1, table_rows, rows, 2);
}

/// Token t of q, k, their outputs, the explicit positions and tables gathered per token sits at
/// t times the operand's token stride (core::flat_tokens; elem_size: the q/k dtype's size), and
/// tables indexed by position are within 32-bit rows and row strides (tables_flat): the lean
/// runs' flat walk applies (it addresses a table row from the position's low 32 bits, or a
/// gathered table's from t).
inline bool rope_flat_tokens(const RopeKernelArgs& a, int64_t elem_size) {
  if (rope_rows_by_position(a) && !a.tables_flat) return false;
  core::TokenStrides ops[7];
  int n = 0;
  for (const RopeOperand* o : {&a.q, &a.q_out, &a.k, &a.k_out}) {
    if (o->data != nullptr) ops[n++] = core::TokenStrides{o->sb, o->ss, elem_size};
  }
  if (a.pos != nullptr) ops[n++] = core::TokenStrides{a.pos_sb, a.pos_ss, a.pos_i64 ? 8 : 4};
  if (a.source == RopeSource::kGathered) {
    const auto cs = static_cast<int64_t>(dtype_size(a.cs_dtype));
    ops[n++] = core::TokenStrides{a.cos_sb, a.cos_ss, cs};
    ops[n++] = core::TokenStrides{a.sin_sb, a.sin_ss, cs};
  }
  return core::flat_tokens(a.batch, a.seq, ops, n);
}

/// The explicit positions' width in bits (64 or 32), 0 for implicit positions.
inline int rope_explicit_position_bits(const RopeKernelArgs& a) {
  return a.pos == nullptr ? 0 : a.pos_i64 ? 64 : 32;
}

}  // namespace ropenorm::cuda
