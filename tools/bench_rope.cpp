// RoPE rows of the main job (see bench_rope.h).
#include "bench_rope.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>

#include "baseline_rope.h"
#include "bench_common.h"
#include "bench_rms_norm.h"
#include "bench_rope_shared.h"
#include "bench_timing.h"
#include "core/checks.h"
#include "ropenorm/rope.h"
#include "verify/device_buffer.h"
#include "verify/rope_case.h"

namespace ropenorm::bench {

void print_rope_row(std::ostream& os, const ResultRow& r) {
  std::ostringstream line;
  print_row(line, r);
  std::string s = line.str();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  os << s << "  " << r.note.substr(0, r.note.find_first_of(",;")) << "\n";
  os.flush();
}

Status bench_rope(const BenchOptions& o, std::vector<ResultRow>* rows, std::ostream& log) {
  uint64_t seed = 4096;
  for (int64_t d : o.rope_ds) {
    for (int64_t t : o.rope_ts) {
      std::vector<RopeStyle> styles = {RopeStyle::kNeox};
      if (d == 128) styles.push_back(RopeStyle::kGptj);
      for (RopeStyle style : styles) {
        const verify::RopeCase c = standard_rope_case(t, o.rope_hq, o.rope_hk, d, style, seed++);
        const auto in = verify::make_inputs(c);
        const int64_t bytes = rope_case_bytes(c);
        const auto shape = rope_case_shape(c);
        const DType dt = c.dtype;
        const std::string sname = rope_style_name(style);

        // ropenorm: verified through the public API on poisoned outputs.
        ResultRow ours{"rope", "ropenorm", dtype_name(dt), shape};
        ours.bytes = bytes;
        ours.note = sname + "; cos/sin cache f32 [P=T R=D]; random int64 positions";
        fill_rope_errors(verify::run_case(c, in), &ours);

        // The unfused baseline, verified on the same inputs.
        RopeShapeBuffers b = upload_rope_shape(c, in);
        b.q_out.poison();
        b.k_out.poison();
        const RopeBaselineBuffers bv = rope_baseline_view(c, b);
        ROPENORM_TRY(baseline_rope(bv, dt, style, false, t, c.hq, c.hk, d, nullptr));
        ROPENORM_TRY(verify::sync_device());
        ResultRow base{"rope", "unfused", dtype_name(dt), shape};
        base.bytes = bytes;
        base.note =
            sname + "; 5 launches; cos/sin cache f32 gathered to " + std::string(dtype_name(dt));
        check_rope_baseline(c, in, verify::from_device(b.q_out, dt, t * c.hq * d),
                            verify::from_device(b.k_out, dt, t * c.hk * d), false, &base);

        // ropenorm on Hugging Face's tables gathered per token (the transformers integration's
        // source), verified the same way.
        const verify::RopeCase g = gathered_rope_case(c);
        const auto gin = verify::make_inputs(g);
        ResultRow gathered{"rope_gathered", "ropenorm", dtype_name(dt), shape};
        gathered.bytes = rope_case_bytes(g);
        gathered.note = sname + "; Hugging Face cos/sin " + std::string(dtype_name(g.cs_dtype)) +
                        " gathered per token [T R=D]";
        fill_rope_errors(verify::run_case(g, gin), &gathered);

        if (o.timing) {
          const TensorRef q = rope_heads_view(c, b.q, c.hq), k = rope_heads_view(c, b.k, c.hk);
          const TensorRef q_out = rope_heads_view(c, b.q_out, c.hq);
          const TensorRef k_out = rope_heads_view(c, b.k_out, c.hk);
          const RopePositions pos = rope_case_positions(c, b.pos);
          const RopeCosSin cs = rope_case_cache(c, b.cache);
          RopeParams p;
          p.style = style;
          const Launch ours_launch = [&](cudaStream_t st) {
            return rope(q, k, q_out, k_out, pos, cs, p, st);
          };
          const Launch base_launch = [&](cudaStream_t st) {
            return baseline_rope(bv, dt, style, false, t, c.hq, c.hk, d, st);
          };
          const verify::DeviceBuffer gcos = verify::to_device(gin.cos);
          const verify::DeviceBuffer gsin = verify::to_device(gin.sin);
          const RopeCosSin gcs = rope_case_gathered(g, gcos, gsin);
          const Launch gathered_launch = [&](cudaStream_t st) {
            return rope(q, k, q_out, k_out, RopePositions{}, gcs, p, st);
          };
          const bool graph = t <= o.rope_graph_max_t;
          ROPENORM_TRY(time_launch(o, graph, ours_launch, &ours));
          ROPENORM_TRY(time_launch(o, graph, base_launch, &base));
          ROPENORM_TRY(time_launch(o, graph, gathered_launch, &gathered));
        }
        print_rope_row(log, ours);
        print_rope_row(log, base);
        print_rope_row(log, gathered);
        rows->push_back(ours);
        rows->push_back(base);
        rows->push_back(gathered);
      }
    }
  }
  return Status::Ok();
}

}  // namespace ropenorm::bench
