// The tolerance table and the ulp error measure (see tolerance.h).
#include "reference/tolerance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/host_float.h"

namespace ropenorm::ref {

namespace {

constexpr Rounding kE = Rounding::kExact;
constexpr Rounding kH = Rounding::kHfLlama;

// 16-bit exact outputs: the fp32 computation is ~1e-6 relative, far inside half a bf16/f16 ulp,
// so one rounding lands on the correctly rounded value or, at a near-tie, its neighbour: 1 ulp.
// f32 outputs: the fp32 sum of squares carries a few ulps of rounding per level of the reduction
// tree and per sequential term (up to a few hundred terms per thread on the widest rows): 64.
// hf_llama: the intermediate rounding to the norm input's dtype can land one ulp apart at a tie,
// which the weight multiply carries into the output: 2 ulps, measured in ulps of the coarser of
// the output's and the norm input's dtype (an f32 output of a bf16 norm carries bf16 steps).
// residual_out: the add is reproduced bit for bit (fp32 sum, one rounding): 0.
// rope (q_out, k_out): the oracle takes the c_i, s_i the kernel reads (the cache's or Hugging
// Face's stored values, rounded as stored; for the in-kernel inv_freq source, the exact cos/sin
// of the same fp32 angle fl(fl(p) * inv_freq[i])). Each output a c - b s is evaluated by Kahan's
// difference of products, within 2 fp32 ulps of the exact value even under cancellation:
// 16-bit outputs round that once, so they are correctly rounded except next to a tie: 1 ulp;
// f32 outputs: 2 ulps plus the reference's own rounding: 3.
// rope, inv_freq_pair_term (f32): the in-kernel sincosf (2 fp32 ulps) and the fp32 scaling
// multiply (half an ulp) perturb c_i and s_i by up to 1.25 * 2^-22 relative, which moves a
// rotated pair by up to 1.25 * 2^-22 * r * |scaling| (r = the pair's norm), at most 5 fp32 ulps
// of r * |scaling| and not bounded by the output's own ulp when a c - b s cancels. For that
// source the checks add this many fp32 ulps of r * |scaling| (8, with margin) to the allowance.
const ToleranceEntry kTable[] = {
    {"rms_norm", "y", DType::kBFloat16, kE, 1.0, "one rounding of an fp32 result"},
    {"rms_norm", "y", DType::kFloat16, kE, 1.0, "one rounding of an fp32 result"},
    {"rms_norm", "y", DType::kFloat32, kE, 64.0, "fp32 reduction error"},
    {"rms_norm", "y", DType::kBFloat16, kH, 2.0, "intermediate rounding to x's dtype at ties"},
    {"rms_norm", "y", DType::kFloat16, kH, 2.0, "intermediate rounding to x's dtype at ties"},
    {"rms_norm", "y", DType::kFloat32, kH, 64.0, "fp32 reduction error"},
    {"rms_norm", "rstd", DType::kFloat32, kE, 64.0, "fp32 reduction error"},
    {"rms_norm", "rstd", DType::kFloat32, kH, 64.0, "fp32 reduction error"},
    {"add_rms_norm", "residual_out", DType::kBFloat16, kE, 0.0, "bitwise: fp32 add, one rounding"},
    {"add_rms_norm", "residual_out", DType::kFloat16, kE, 0.0, "bitwise: fp32 add, one rounding"},
    {"add_rms_norm", "residual_out", DType::kFloat32, kE, 0.0, "bitwise: fp32 add"},
    {"add_rms_norm", "residual_out", DType::kBFloat16, kH, 0.0, "bitwise: fp32 add, one rounding"},
    {"add_rms_norm", "residual_out", DType::kFloat16, kH, 0.0, "bitwise: fp32 add, one rounding"},
    {"add_rms_norm", "residual_out", DType::kFloat32, kH, 0.0, "bitwise: fp32 add"},
    {"rope", "q_out", DType::kBFloat16, kE, 1.0, "fp32 difference of products, one rounding"},
    {"rope", "q_out", DType::kFloat16, kE, 1.0, "fp32 difference of products, one rounding"},
    {"rope", "q_out", DType::kFloat32, kE, 3.0, "Kahan difference of products (2 ulps)"},
    {"rope", "k_out", DType::kBFloat16, kE, 1.0, "fp32 difference of products, one rounding"},
    {"rope", "k_out", DType::kFloat16, kE, 1.0, "fp32 difference of products, one rounding"},
    {"rope", "k_out", DType::kFloat32, kE, 3.0, "Kahan difference of products (2 ulps)"},
    {"rope", "inv_freq_pair_term", DType::kFloat32, kE, 8.0,
     "added for the inv_freq source: fp32 ulps of |pair| * |scaling| (sincosf error)"},
    {"rope_unfused_baseline", "q_out", DType::kBFloat16, kE, 1.0,
     "beyond product_term: the reference's own rounding to the output dtype"},
    {"rope_unfused_baseline", "q_out", DType::kFloat16, kE, 1.0,
     "beyond product_term: the reference's own rounding to the output dtype"},
    {"rope_unfused_baseline", "q_out", DType::kFloat32, kE, 1.0,
     "beyond product_term: the reference's own rounding to the output dtype"},
    {"rope_unfused_baseline", "k_out", DType::kBFloat16, kE, 1.0,
     "beyond product_term: the reference's own rounding to the output dtype"},
    {"rope_unfused_baseline", "k_out", DType::kFloat16, kE, 1.0,
     "beyond product_term: the reference's own rounding to the output dtype"},
    {"rope_unfused_baseline", "k_out", DType::kFloat32, kE, 1.0,
     "beyond product_term: the reference's own rounding to the output dtype"},
    {"rope_unfused_baseline", "product_term", DType::kBFloat16, kE, 1.5,
     "output-dtype ulps of |x*cos| + |rot*sin|: each product rounded (1/2), then their sum (1)"},
    {"rope_unfused_baseline", "product_term", DType::kFloat16, kE, 1.5,
     "output-dtype ulps of |x*cos| + |rot*sin|: each product rounded (1/2), then their sum (1)"},
    {"rope_unfused_baseline", "product_term", DType::kFloat32, kE, 1.5,
     "output-dtype ulps of |x*cos| + |rot*sin|: each product rounded (1/2), then their sum (1)"},
    // qk_norm_rope: the oracle normalises each head vector in float64 (no rounding of the
    // normalised value) and rotates it with the c_i, s_i the kernel reads. The kernel's fp32
    // normalised value n = x * r * (w + o) carries the sum of squares' and rsqrt's rounding (a
    // few fp32 ulps relative), and the Kahan rotation adds 2 fp32 ulps: 16-bit outputs round a
    // value that is ~1e-6 relative from the exact one, so at most one step beyond a near-tie of
    // each of the two fp32 stages before the single final rounding: 2 ulps. f32 outputs: the
    // reduction error, as for rms_norm: 64. Under cancellation in a c - b s the fp32 error of n
    // is relative to the pair's norm |(n_a, n_b)|, not to the output: pair_term adds that many
    // fp32 ulps of |pair| (the norm's rounding, up to ~6 ulps at D = 512, plus the rotation's 2;
    // 16 with margin; for the inv_freq source, rope's inv_freq_pair_term is added as well).
    {"qk_norm_rope", "q_out", DType::kBFloat16, kE, 2.0,
     "fp32 norm then fp32 rotation, one rounding"},
    {"qk_norm_rope", "q_out", DType::kFloat16, kE, 2.0,
     "fp32 norm then fp32 rotation, one rounding"},
    {"qk_norm_rope", "q_out", DType::kFloat32, kE, 64.0, "fp32 reduction error"},
    {"qk_norm_rope", "k_out", DType::kBFloat16, kE, 2.0,
     "fp32 norm then fp32 rotation, one rounding"},
    {"qk_norm_rope", "k_out", DType::kFloat16, kE, 2.0,
     "fp32 norm then fp32 rotation, one rounding"},
    {"qk_norm_rope", "k_out", DType::kFloat32, kE, 64.0, "fp32 reduction error"},
    {"qk_norm_rope", "rstd", DType::kFloat32, kE, 64.0, "fp32 reduction error"},
    {"qk_norm_rope", "pair_term", DType::kFloat32, kE, 16.0,
     "added: fp32 ulps of the normalised pair's norm (norm rounding under cancellation)"},
    // rms_norm_backward (and add_rms_norm_backward, whose dx and dresidual use the dx rows): the
    // oracle takes the kernel's inputs as stored and the r it reads (the saved fp32 rstd; when r
    // is recomputed, the float64 r). First-order bound of the fp32 dx = r * (g - xh * c), in
    // u = 2^-24 (one fp32 ulp of S is >= u * S): with S = r * (|g| + |xh| * (|c| + r * mean|g x|))
    // (+ |ds| for the fused add), the roundings of w + o, g, xh, the product, the difference and
    // the final multiply cost ~6 u S; c = r * sum(g * x) / N errs relative to r * mean|g x| by the
    // sum's (k + L + 3) u, k the terms one thread adds in sequence and L the levels of the
    // reduction tree (ring paths: k <= 33, L <= 10; two-pass rows up to 65536 columns: k <= 128,
    // L <= 9); a recomputed r carries e_r <= (k + L) u / 2 + 3 u into r, xh and c: 3 e_r. Worst
    // case for the tested widths: 140 + 6 + 216 < 256: dx_scale_term allows 256 fp32 ulps of S
    // (under cancellation, g close to xh * c, dx's own ulp is no bound); beyond it dx is rounded
    // once and the reference once: 1 ulp.
    {"rms_norm_backward", "dx", DType::kBFloat16, kE, 1.0,
     "one rounding of the fp32 result, beyond dx_scale_term"},
    {"rms_norm_backward", "dx", DType::kFloat16, kE, 1.0,
     "one rounding of the fp32 result, beyond dx_scale_term"},
    {"rms_norm_backward", "dx", DType::kFloat32, kE, 1.0,
     "the reference's own rounding, beyond dx_scale_term"},
    {"rms_norm_backward", "dx_scale_term", DType::kFloat32, kE, 256.0,
     "added: fp32 ulps of r * (|g| + |xh| * (|c| + r * mean|g * x|)) + |ds| (cancellation)"},
    // dw[n] = sum over M rows of dy * xh in fp32, in a fixed order (each block's K ~ M / G rows
    // in sequence, then the G block partials in sequence). With random signs each addition errs
    // by ~u * |partial sum| and the partial sums grow like a random walk, so the error's spread
    // is ~u * sigma * sqrt(M * (K + G) / 6) (sigma = |dy * xh|) against max|dw| ~ 3 sqrt(M)
    // sigma: a few u of max|dw| for G <= 528, times ~4.5 for the largest of N columns; the
    // per-row rounding of r and xh adds ~1 u of max|dw| per u of their error. 32 + 2 * sqrt(M)
    // fp32 ulps of max_n |dw[n]| are allowed (subtracted before dw is measured in its own ulps);
    // beyond that dw is rounded once to its dtype and the reference once: 1 ulp (for 16-bit dw
    // far tighter than a few 16-bit ulps of max|dw|).
    {"rms_norm_backward", "dw", DType::kBFloat16, kE, 1.0,
     "one rounding of the fp32 sum, beyond the dw allowance"},
    {"rms_norm_backward", "dw", DType::kFloat16, kE, 1.0,
     "one rounding of the fp32 sum, beyond the dw allowance"},
    {"rms_norm_backward", "dw", DType::kFloat32, kE, 1.0,
     "the reference's own rounding, beyond the dw allowance"},
    {"rms_norm_backward", "dw_scale_term", DType::kFloat32, kE, 32.0,
     "added: fp32 ulps of max|dw| (constant part of the summation allowance)"},
    {"rms_norm_backward", "dw_per_sqrt_rows", DType::kFloat32, kE, 2.0,
     "added: fp32 ulps of max|dw| per sqrt(M) (random-walk growth of the fp32 sum's error)"},
    // qk_norm_rope_backward, dq / dk: dx = r (g - xh m) cancels (g nearly parallel to xh), so
    // its fp32 error is bounded relative to the scale S_j = r (P_j |w_j + o| + |xh_j| M), with
    // P_j the norm of the g_n pair holding j and M = sum_i P_i |w_i + o| |xh_i| / D, not relative
    // to dx itself. First-order bound in units of u = 2^-24 (one fp32 ulp of S is >= u S): r
    // recomputed, up to ~15 u (a sum of squares of <= 16 terms per lane plus a 5-level
    // butterfly, then /D, +eps, sqrt, 1/x), entering dx up to three times (r, xh, m): 45; the
    // inverse rotation (Kahan, 2 ulps of the pair) and the (w + o) and g roundings: 6; xh: 1;
    // m = sum(g xh) / D, relative to sum |g xh| / D: 21 accumulation steps plus the terms' own
    // 7 + 15, plus the division: 44; the fma g - xh m and the final multiply by r: 2. About 100:
    // dx_term allows 128 fp32 ulps of S_j (for the inv_freq source rope's inv_freq_pair_term is
    // added, as P_j carries the sincosf error). Beyond that allowance the result is one
    // rounding of the fp32 value: 1 ulp for 16-bit outputs, 2 for f32 (the reference's own
    // rounding as well).
    // dw = sum over the N head vectors of g_n xh, in fp32 (per lane, then per block, then the
    // column sum over the blocks, all in fixed order): measured in ulps of max|dw|. The
    // per-term errors (rstd, rotation, product; ~20 u each) add up like a random walk and the
    // accumulation error of a sum of N terms grows like sqrt(N) relative to a sum whose size
    // itself grows like sqrt(N): dw_term (32) + dw_sum_term (4) * sqrt(N) fp32 ulps of max|dw|
    // are allowed, then one rounding to the weight's dtype: 1 ulp of max|dw|.
    {"qk_norm_rope_backward", "dq", DType::kBFloat16, kE, 1.0,
     "beyond dx_term: one rounding of the fp32 result"},
    {"qk_norm_rope_backward", "dq", DType::kFloat16, kE, 1.0,
     "beyond dx_term: one rounding of the fp32 result"},
    {"qk_norm_rope_backward", "dq", DType::kFloat32, kE, 2.0,
     "beyond dx_term: the result's and the reference's rounding"},
    {"qk_norm_rope_backward", "dk", DType::kBFloat16, kE, 1.0,
     "beyond dx_term: one rounding of the fp32 result"},
    {"qk_norm_rope_backward", "dk", DType::kFloat16, kE, 1.0,
     "beyond dx_term: one rounding of the fp32 result"},
    {"qk_norm_rope_backward", "dk", DType::kFloat32, kE, 2.0,
     "beyond dx_term: the result's and the reference's rounding"},
    {"qk_norm_rope_backward", "dx_term", DType::kFloat32, kE, 128.0,
     "allowed: fp32 ulps of r (P |w + o| + |xh| M) (cancellation in g - xh m)"},
    {"qk_norm_rope_backward", "dw", DType::kBFloat16, kE, 1.0,
     "ulps of max|dw| beyond the fp32 terms: one rounding"},
    {"qk_norm_rope_backward", "dw", DType::kFloat16, kE, 1.0,
     "ulps of max|dw| beyond the fp32 terms: one rounding"},
    {"qk_norm_rope_backward", "dw", DType::kFloat32, kE, 1.0,
     "ulps of max|dw| beyond the fp32 terms: one rounding"},
    {"qk_norm_rope_backward", "dw_term", DType::kFloat32, kE, 32.0,
     "allowed: fp32 ulps of max|dw| (per-term rounding of g_n * xh)"},
    {"qk_norm_rope_backward", "dw_sum_term", DType::kFloat32, kE, 4.0,
     "allowed: fp32 ulps of max|dw| per sqrt(head vectors) (fp32 accumulation)"},
};

}  // namespace

double tolerance_ulp(const std::string& op, const std::string& output, DType dtype,
                     Rounding rounding) {
  // The fused op's y and rstd follow rms_norm's rows.
  const std::string base = (op == "add_rms_norm" && output != "residual_out") ? "rms_norm" : op;
  for (const ToleranceEntry& e : kTable) {
    if (base == e.op && output == e.output && dtype == e.dtype && rounding == e.rounding) {
      return e.max_ulp;
    }
  }
  return -1.0;
}

const ToleranceEntry* tolerance_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}

DType coarser_dtype(DType a, DType b) {
  auto rank = [](DType d) { return d == DType::kBFloat16 ? 2 : d == DType::kFloat16 ? 1 : 0; };
  return rank(a) >= rank(b) ? a : b;
}

void ErrorStats::add(double got, double ref, DType dtype, int64_t index) {
  add(got, ref, dtype, index, dtype);
}

void ErrorStats::add(double got, double ref, DType dtype, int64_t index, DType unit) {
  add_allowing(got, ref, dtype, index, unit, 0.0);
}

void ErrorStats::add_allowing(double got, double ref, DType dtype, int64_t index, DType unit,
                              double allow) {
  ++count;
  const double rounded = round_to_dtype(ref, dtype);
  double err;
  if (std::isnan(rounded) || std::isnan(got)) {
    err = (std::isnan(rounded) && std::isnan(got)) ? 0.0 : std::numeric_limits<double>::infinity();
  } else if (std::isinf(rounded) || std::isinf(got)) {
    err = (got == rounded) ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    err = std::max(0.0, std::fabs(got - rounded) - allow) / ulp_of(rounded, unit);
  }
  if (got == rounded || (std::isnan(got) && std::isnan(rounded))) ++exact;
  if (worst_index < 0 || err > max_ulp) {
    max_ulp = err;
    worst_index = index;
    worst_got = got;
    worst_ref = ref;
  }
}

void ErrorStats::merge(const ErrorStats& o) {
  if (o.worst_index >= 0 && (worst_index < 0 || o.max_ulp > max_ulp)) {
    max_ulp = o.max_ulp;
    worst_index = o.worst_index;
    worst_got = o.worst_got;
    worst_ref = o.worst_ref;
  }
  count += o.count;
  exact += o.exact;
}

}  // namespace ropenorm::ref
