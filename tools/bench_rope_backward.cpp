// RoPE backward rows of the main job (see bench_rope_backward.h).
#include "bench_rope_backward.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "baseline_rope.h"
#include "bench_common.h"
#include "bench_rope.h"
#include "bench_rope_shared.h"
#include "bench_timing.h"
#include "core/checks.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/rope_case.h"

namespace ropenorm::bench {

namespace {

/// The forward + backward row's errors: the worse half's (both must pass).
void combine_errors(const ResultRow& fwd, const ResultRow& bwd, ResultRow* row) {
  row->max_err_ulp = std::max(fwd.max_err_ulp, bwd.max_err_ulp);
  row->tol_ulp = std::max(fwd.tol_ulp, bwd.tol_ulp);
  row->frac_exact = std::min(fwd.frac_exact, bwd.frac_exact);
  row->passed = fwd.passed && bwd.passed;
  if (!fwd.passed) row->note += "; forward failed";
  if (!bwd.passed) row->note += "; backward failed";
}

}  // namespace

Status bench_rope_backward(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log) {
  const int64_t d = 128;
  const RopeStyle style = RopeStyle::kNeox;
  uint64_t seed = 7301;
  for (int64_t t : {int64_t{1}, int64_t{1024}, int64_t{32768}}) {
    // The backward's case (its q and k stand for dq' and dk'), and the forward of the same shape.
    verify::RopeCase cb = standard_rope_case(t, o.rope_hq, o.rope_hk, d, style, seed++);
    cb.inverse = true;
    verify::RopeCase cf = cb;
    cf.inverse = false;
    const auto in = verify::make_inputs(cb);
    const int64_t one_way = rope_case_bytes(cb);
    const auto shape = rope_case_shape(cb);
    const DType dt = cb.dtype;
    const std::string note = "neox; cos/sin cache f32 [P=T R=D]; random int64 positions";

    // ropenorm, verified through the public API on poisoned outputs (both directions).
    ResultRow fwd_check{"rope", "ropenorm", dtype_name(dt), shape};
    fill_rope_errors(verify::run_case(cf, in), &fwd_check);
    ResultRow ours_bwd{"rope_backward", "ropenorm", dtype_name(dt), shape};
    ours_bwd.bytes = one_way;
    ours_bwd.note = note + "; rope with inverse = true, one launch";
    fill_rope_errors(verify::run_case(cb, in), &ours_bwd);
    ResultRow ours_fb{"rope_fwd_bwd", "ropenorm", dtype_name(dt), shape};
    ours_fb.bytes = 2 * one_way;
    ours_fb.note = note + "; forward then backward, one launch each";
    combine_errors(fwd_check, ours_bwd, &ours_fb);

    // The unfused baseline, verified on the same inputs in both directions. bf: q, k -> q_out,
    // k_out (forward); bg: dq', dk' (the same values, other buffers) -> dq, dk (backward).
    RopeShapeBuffers bf = upload_rope_shape(cf, in), bg = upload_rope_shape(cb, in);
    const RopeBaselineBuffers vf = rope_baseline_view(cf, bf), vg = rope_baseline_view(cb, bg);
    ResultRow base_fwd_check{"rope", "unfused", dtype_name(dt), shape};
    ResultRow base_bwd{"rope_backward", "unfused", dtype_name(dt), shape};
    base_bwd.bytes = one_way;
    base_bwd.note = "neox; 5 launches (the forward's with the gathered sin negated)";
    ResultRow base_fb{"rope_fwd_bwd", "unfused", dtype_name(dt), shape};
    base_fb.bytes = 2 * one_way;
    base_fb.note = "neox; 5 + 5 launches";
    for (bool inverse : {false, true}) {
      RopeShapeBuffers& b = inverse ? bg : bf;
      b.q_out.poison();
      b.k_out.poison();
      ROPENORM_TRY(
          baseline_rope(inverse ? vg : vf, dt, style, inverse, t, cb.hq, cb.hk, d, nullptr));
      ROPENORM_TRY(verify::sync_device());
      check_rope_baseline(inverse ? cb : cf, in, verify::from_device(b.q_out, dt, t * cb.hq * d),
                          verify::from_device(b.k_out, dt, t * cb.hk * d), inverse,
                          inverse ? &base_bwd : &base_fwd_check);
    }
    combine_errors(base_fwd_check, base_bwd, &base_fb);

    if (o.timing) {
      const TensorRef q = rope_heads_view(cb, bf.q, cb.hq), k = rope_heads_view(cb, bf.k, cb.hk);
      const TensorRef q_out = rope_heads_view(cb, bf.q_out, cb.hq),
                      k_out = rope_heads_view(cb, bf.k_out, cb.hk);
      const TensorRef gq = rope_heads_view(cb, bg.q, cb.hq), gk = rope_heads_view(cb, bg.k, cb.hk);
      const TensorRef dq = rope_heads_view(cb, bg.q_out, cb.hq),
                      dk = rope_heads_view(cb, bg.k_out, cb.hk);
      const RopePositions pos = rope_case_positions(cb, bf.pos);
      const RopeCosSin cs = rope_case_cache(cb, bf.cache);
      RopeParams pf;
      pf.style = style;
      RopeParams pb = pf;
      pb.inverse = true;
      const Launch ours_b = [&](cudaStream_t st) { return rope(gq, gk, dq, dk, pos, cs, pb, st); };
      const Launch ours_f_b = [&](cudaStream_t st) {
        ROPENORM_TRY(rope(q, k, q_out, k_out, pos, cs, pf, st));
        return ours_b(st);
      };
      const Launch base_b = [&](cudaStream_t st) {
        return baseline_rope(vg, dt, style, true, t, cb.hq, cb.hk, d, st);
      };
      const Launch base_f_b = [&](cudaStream_t st) {
        ROPENORM_TRY(baseline_rope(vf, dt, style, false, t, cb.hq, cb.hk, d, st));
        return base_b(st);
      };
      const bool graph = t <= o.rope_graph_max_t;
      ROPENORM_TRY(time_launch(o, graph, ours_b, &ours_bwd));
      ROPENORM_TRY(time_launch(o, graph, base_b, &base_bwd));
      ROPENORM_TRY(time_launch(o, graph, ours_f_b, &ours_fb));
      ROPENORM_TRY(time_launch(o, graph, base_f_b, &base_fb));
    }
    for (ResultRow* r : {&ours_bwd, &base_bwd, &ours_fb, &base_fb}) {
      print_rope_row(log, *r);
      rows->push_back(*r);
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
