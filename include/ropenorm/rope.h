/// @file
/// ropenorm rotary position embedding (RoPE) forward, and its backward through `inverse`.
///
/// Shapes: q is [T, Hq, D] or [B, S, Hq, D]; k is [T, Hk, D] / [B, S, Hk, D] (same leading dims
/// and head_dim as q) or absent. Any stride on the token, batch and head dims, stride 1 on the
/// last: q and k may be views into one packed QKV buffer [T, (Hq + 2 * Hk) * D], and Hugging
/// Face's [B, H, S, D] tensors are served as [B, S, H, D] views with permuted strides.
///
/// Notation: R = rotary_dim (even, 0 < R <= D), h = R / 2 pairs, 0 <= i < h. Token t of a 4-D
/// call is (b, s) = (t / S, t % S); a 3-D call is one sequence (B = 1, S = T).
///
///     pair i:   (a, b) = (x[i], x[i + h])      neox (Hugging Face rotate_half, GPT-NeoX)
///               (a, b) = (x[2i], x[2i + 1])    gptj (interleaved, GPT-J, Meta's Llama)
///     forward:  (a, b) -> (a * c_i - b * s_i,  a * s_i + b * c_i)
///     inverse:  (a, b) -> (a * c_i + b * s_i, -a * s_i + b * c_i)   (rotation by -angle: the
///               backward pass of RoPE, dq = rope(dq_out, inverse = true))
///     channels R .. D-1 pass through unchanged (copied bit for bit when out of place).
///
/// where c_i = cos(p * inv_freq[i]) * scaling and s_i = sin(p * inv_freq[i]) * scaling come from
/// one of the sources of RopeCosSin, and p is the token's position (RopePositions).
///
/// Arithmetic is fp32: each output is a * c - b * s (or a * s + b * c) evaluated with an fma
/// and the exact rounding error of the second product (Kahan's difference of products), so the
/// fp32 result is within 2 fp32 ulps of the exact value for the given c and s even under
/// cancellation, then rounded once to the output dtype.
#pragma once

#include <cstdint>

#include "ropenorm/rope_cache.h"
#include "ropenorm/status.h"
#include "ropenorm/stream.h"
#include "ropenorm/tensor.h"

namespace ropenorm {

/// Where the cos and sin values of a token come from.
enum class CosSinKind : int {
  /// `cache` [P, R]: row p holds c_0 .. c_{h-1}, then s_0 .. s_{h-1} (the layout vLLM and
  /// FlashInfer use, built by build_rope_cache), f32, bf16 or f16; indexed by position.
  kCache = 0,
  /// Hugging Face tables `cos` and `sin`, each [P, R] with duplicated halves (column i + h equals
  /// column i; only columns 0 .. h-1 are read), f32, bf16 or f16 (the same for both); indexed by
  /// position.
  kHfCosSin = 1,
  /// Hugging Face `cos` and `sin` already gathered per token: [T, R] for a 3-D q, [B, S, R] for a
  /// 4-D q (the position_embeddings a Hugging Face model passes to its attention layers; a
  /// [1, S, R] tensor broadcast over B is passed as a [B, S, R] view with batch stride 0).
  /// Duplicated halves as for kHfCosSin. Positions are not used and must be absent.
  kHfCosSinGathered = 2,
  /// Computed in the kernel from `inv_freq` [h] (f32, contiguous) and `attention_scaling`:
  ///
  ///     angle_i = fl32(fl32(p) * inv_freq[i]),  sincosf(angle_i)
  ///
  /// (sincosf: the accurate library function, not the __sincosf intrinsic), c_i and s_i
  /// multiplied by attention_scaling in fp32. This is how Hugging Face forms the angle, and it
  /// loses accuracy at large positions: the fp32
  /// product keeps 24 bits, so past about 1e5 the angle's absolute error (up to half an fp32 ulp
  /// of p * inv_freq[i], 2^-7 rad at p * inv_freq = 2^17) is visible in cos and sin. The kCache
  /// source built by build_rope_cache takes the exact angle in float64 and has no such loss.
  kInvFreq = 3,
};

/// "cache", "hf_cos_sin", "hf_cos_sin_gathered" or "inv_freq".
const char* cos_sin_kind_name(CosSinKind kind);

/// The cos/sin source: fill the tensors `kind` names, leave the others absent.
struct RopeCosSin {
  /// Which source the call reads.
  CosSinKind kind = CosSinKind::kCache;
  TensorRef cache;     ///< kCache: [P, R], last dim contiguous, any row stride.
  TensorRef cos;       ///< kHfCosSin: [P, R]; kHfCosSinGathered: [T, R] or [B, S, R].
  TensorRef sin;       ///< Same shape as cos.
  TensorRef inv_freq;  ///< kInvFreq: [R / 2] f32, contiguous.
  /// kInvFreq only (finite): multiplies c_i and s_i. The other sources carry their scaling in
  /// their values, so it must be 1 for them.
  float attention_scaling = 1.0f;
};

/// The position p of each token.
///
/// Explicit: `positions` int32 or int64, [T] (3-D q) or [B, S] or [B * S] (4-D q), any strides;
/// then `offset` must be 0 and `seq_offsets` absent.
/// Implicit (positions absent): p(b, s) = s + offset + seq_offsets[b], with seq_offsets an
/// optional int32/int64 [B] tensor (any stride; B = 1 for a 3-D q), e.g. the cached length of
/// each sequence during decode.
struct RopePositions {
  /// Explicit positions, int32 or int64; absent for implicit ones.
  TensorRef positions;
  /// Implicit positions: added to every sequence index s.
  int64_t offset = 0;
  /// Implicit positions: int32/int64 [B], added per sequence; or absent.
  TensorRef seq_offsets;
};

/// The rotation's parameters.
struct RopeParams {
  /// How channels pair up: kNeox (i, i + R/2) or kGptj (2i, 2i + 1).
  RopeStyle style = RopeStyle::kNeox;
  /// R; 0 means D (full rotary). Even, 0 < R <= D.
  int64_t rotary_dim = 0;
  /// Rotate by -angle (the backward pass).
  bool inverse = false;
  /// Checked mode: for the table sources (kCache, kHfCosSin) every token's position is verified
  /// to lie in [0, P) before anything is launched; explicit positions and seq_offsets are copied
  /// to the host on `stream` for that, which SYNCHRONISES the stream (and cannot be captured in
  /// a CUDA graph). For kInvFreq the check is p >= 0. A bad position fails the call with an error
  /// naming the first bad token; nothing is written.
  /// Unchecked (default): a position outside [0, P) reads outside the table, which is undefined
  /// behaviour, as in every other RoPE library. Implicit positions without seq_offsets are checked
  /// against P in both modes (that costs no synchronisation).
  bool check_positions = false;
};

/// Rotary position embedding of q and (optionally) k, out of place or in place.
///
///     out[t, head, pair i] = rotate(x[t, head, pair i], c_i(p_t), s_i(p_t))  (file comment)
///     out[t, head, j] = x[t, head, j]  for R <= j < D
///
/// @param q          [T, Hq, D] or [B, S, Hq, D], f32/f16/bf16, last dim contiguous.
/// @param k          same leading dims and D as q, q's dtype, any Hk; or absent.
/// @param q_out      q's shape and dtype; exactly q (same view) for in place, else memory shared
///                   with no input (it may interleave with k's rows in one packed buffer).
/// @param k_out      as q_out for k; present exactly when k is.
/// @param positions  per-token positions or arange (see RopePositions).
/// @param cos_sin    the cos/sin source (see RopeCosSin).
/// @param params     style, rotary_dim, inverse, checked mode.
/// @param stream     the caller's CUDA stream; nothing is allocated, and nothing is synchronised
///                   except in checked mode.
/// @return ok, or an error naming the argument, what was expected and what was received; on
///         error nothing was written. Zero tokens or zero heads is a valid no-op.
Status rope(const TensorRef& q, const TensorRef& k, const TensorRef& q_out, const TensorRef& k_out,
            const RopePositions& positions, const RopeCosSin& cos_sin, const RopeParams& params,
            Stream stream = nullptr);

}  // namespace ropenorm
