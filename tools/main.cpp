// ropenorm command-line program.
//   ropenorm info                 device, driver, CUDA runtime
//   ropenorm verify [--quick]     every kernel against the float64 oracle on the standard shapes
//   ropenorm bench  [--quick]     verify, then time against the unfused baseline; copy-bandwidth
//                                 ceiling measured in the same run; JSON + CSV receipts
//   ropenorm profile --op OP --m M --n N [--reps R]
//                                 launch one kernel R times on random bf16 data (for ncu)
// Without a GPU, verify and bench say so, run the oracle's self-checks, and exit 0.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "bench_backward.h"
#include "bench_qk_norm_rope.h"
#include "bench_qk_norm_rope_backward.h"
#include "bench_rms_norm.h"
#include "bench_rope.h"
#include "bench_rope_backward.h"
#include "bench_timing.h"
#include "device_info.h"
#include "receipt.h"
#include "reference/rms_norm_ref.h"
#include "ropenorm/version.h"
#include "verify/device_buffer.h"
#include "verify/rms_norm_case.h"

namespace {

using namespace ropenorm;

// Hand-computable oracle cases (the seed notebook's smoke test and a row with r = 1/sqrt(8)).
int oracle_self_checks() {
  int failures = 0;
  std::vector<double> x(8, 3.0), w(8), y(8);
  for (int i = 0; i < 8; ++i) w[i] = 0.5 + i / 7.0;
  ref::rms_norm_row_ref(x.data(), w.data(), 8, 1e-12, 0.0, Rounding::kExact, DType::kFloat32,
                        y.data(), nullptr);
  double err = 0;
  for (int i = 0; i < 8; ++i) err = std::fmax(err, std::fabs(y[i] - w[i]));
  std::printf("  oracle: constant row 3.0 gives the weight: max |y - w| = %.3g  %s\n", err,
              err < 1e-12 ? "PASS" : "FAIL");
  failures += err < 1e-12 ? 0 : 1;
  std::vector<double> x2 = {1, 2, 3, 4}, y2(4);
  double r = 0;
  ref::rms_norm_row_ref(x2.data(), nullptr, 4, 0.5, 0.0, Rounding::kExact, DType::kFloat32,
                        y2.data(), &r);
  const double want = 1.0 / std::sqrt(8.0);
  std::printf("  oracle: x=[1,2,3,4], eps=0.5 gives r = 1/sqrt(8): |r - 1/sqrt(8)| = %.3g  %s\n",
              std::fabs(r - want), std::fabs(r - want) < 1e-15 ? "PASS" : "FAIL");
  failures += std::fabs(r - want) < 1e-15 ? 0 : 1;
  return failures;
}

std::string slug(std::string s) {
  for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? std::tolower(c) : '-';
  return s;
}

int run_main_job(bool timing, bool quick, const std::string& out_dir,
                 const std::set<std::string>& ops) {
  const auto want = [&](const char* family) { return ops.empty() || ops.count(family) > 0; };
  const bench::DeviceInfo dev = bench::query_device();
  std::printf("ropenorm %s: CUDA runtime %s, commit %s\n", timing ? "bench" : "verify",
              dev.cuda.c_str(), bench::source_commit().c_str());
  if (!dev.available) {
    std::printf(
        "no usable CUDA device (%s): GPU verification and timing skipped; "
        "running the oracle self-checks only\n",
        dev.reason.c_str());
    const int f = oracle_self_checks();
    std::printf("%d passed, %d failed, %d skipped\n", 2 - f, f, 1);
    return f == 0 ? 0 : 1;
  }
  std::printf("device: %s (sm_%d%d, %d SMs, L2 %d MiB), driver %s\n", dev.name.c_str(),
              dev.cc_major, dev.cc_minor, dev.sm_count, dev.l2_bytes >> 20, dev.driver.c_str());
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);

  bench::BenchOptions o;
  o.timing = timing;
  o.stream = stream;
  if (quick) {
    o.ms = {1, 512, 4096};
    o.ns = {4096, 4095};
    o.rope_ts = {1, 1024, 16384};
  }
  if (timing) {
    o.copy_gbps = bench::measure_copy_gbps(size_t{1} << 30, 20, stream);
    std::printf("copy bandwidth (device-to-device, read + write): %.1f GB/s\n", o.copy_gbps);
    const Status fl =
        bench::measure_launch_floor_us(o.graph_launches, o.graph_reps, stream, &o.launch_floor_us);
    if (!fl.ok()) {
      std::fprintf(stderr, "error: launch floor: %s\n", fl.message().c_str());
      return 2;
    }
    std::printf("launch floor (one warp, 16-byte read and write, CUDA-graph replay): %.2f us\n",
                o.launch_floor_us);
  }
  // Receipts are (re)written after every op family, so a run cut short keeps what it measured.
  // A run of some op families only is named after them, so it never replaces the full receipt.
  std::string families;
  for (const auto& f : ops) families += "-" + f;
  const std::string stem =
      out_dir + "/bench-" + slug(dev.name) + (quick ? "-quick" : "") + families;
  std::vector<bench::ResultRow> rows;
  const auto write_receipt = [&]() -> Status {
    if (!timing) return Status::Ok();
    bench::Receipt rc;
    rc.device = dev.name;
    rc.driver = dev.driver;
    rc.cuda = dev.cuda;
    rc.commit = bench::source_commit();
    rc.date = bench::utc_now();
    rc.copy_bandwidth_gbps = o.copy_gbps;
    rc.launch_floor_us = o.launch_floor_us;
    rc.results = rows;
    std::filesystem::create_directories(out_dir);
    return bench::write_and_check_receipt(rc, stem);
  };
  bench::print_header(std::cout);
  Status st = Status::Ok();
  // name: the --ops family; what: the part of it that run measures (the timing line's label).
  const auto family = [&](const char* name, const char* what, auto&& run) {
    if (!st.ok() || !want(name)) return;
    const auto t0 = std::chrono::steady_clock::now();
    st = run();
    if (st.ok()) st = write_receipt();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("(%s: %.0f s, %s%s)\n", what, secs, timing ? "checks and timing" : "checks",
                timing && st.ok() ? "; receipts rewritten" : "");
    std::fflush(stdout);
  };
  family("rms_norm", "rms_norm", [&] { return bench::bench_rms_norm(o, &rows, std::cout); });
  family("rope", "rope", [&] { return bench::bench_rope(o, &rows, std::cout); });
  family("rope", "rope backward", [&] { return bench::bench_rope_backward(o, &rows, std::cout); });
  family("backward", "backward", [&] { return bench::bench_backward(o, &rows, std::cout); });
  family("qk_norm_rope", "qk_norm_rope forward",
         [&] { return bench::bench_qk_norm_rope(o, &rows, std::cout); });
  family("qk_norm_rope", "qk_norm_rope backward",
         [&] { return bench::bench_qk_norm_rope_backward(o, &rows, std::cout); });
  cudaStreamDestroy(stream);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }

  // ropenorm's rows decide the exit status; a baseline outside its tolerance is flagged in its
  // row (passed = false, with the reason in the note) but is not this library's failure.
  int passed = 0, failed = 0, peers_flagged = 0;
  for (const auto& r : rows) {
    if (r.impl == "ropenorm") {
      (r.passed ? passed : failed)++;
    } else if (!r.passed) {
      ++peers_flagged;
    }
  }
  if (timing) {
    std::printf("receipts: %s.json, %s.csv (re-read and checked)\n", stem.c_str(), stem.c_str());
    std::printf("\nsummary (bf16; ropenorm vs unfused baseline):\n");
    bench::print_header(std::cout);
    for (const auto& r : rows) {
      if (r.op == "rope" || r.op == "rope_gathered") {
        bench::print_rope_row(std::cout, r);
      } else {
        bench::print_row(std::cout, r);
      }
    }
  }
  if (peers_flagged > 0) {
    std::printf("%d baseline rows outside their tolerance against the oracle (see their notes)\n",
                peers_flagged);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

int run_profile(const std::string& op, int64_t m, int64_t n, int reps) {
  std::string reason;
  if (!verify::gpu_available(&reason)) {
    std::printf("no usable CUDA device: %s\n", reason.c_str());
    return 0;
  }
  const bool fused = op == "add_rms_norm";
  if (!fused && op != "rms_norm") {
    std::fprintf(stderr, "profile: --op must be rms_norm or add_rms_norm, received %s\n",
                 op.c_str());
    return 2;
  }
  verify::RmsNormCase c;
  c.m = m;
  c.n = n;
  c.fused = fused;
  c.save_rstd = false;
  const auto in = verify::make_inputs(c);
  auto x = verify::to_device(in.x), w = verify::to_device(in.weight);
  auto r = fused ? verify::to_device(in.residual) : verify::DeviceBuffer();
  verify::DeviceBuffer y(in.x.bytes.size()), s(fused ? in.x.bytes.size() : 0);
  const Device d = Device::cuda(0);
  const DType dt = c.x_dtype;
  const auto xv = TensorRef::contiguous(x.get(), dt, {m, n}, d);
  const auto wv = TensorRef::contiguous(w.get(), dt, {n}, d);
  const auto yv = TensorRef::contiguous(y.get(), dt, {m, n}, d);
  for (int i = 0; i < reps; ++i) {
    const Status st =
        fused ? add_rms_norm(xv, TensorRef::contiguous(r.get(), dt, {m, n}, d), wv, yv,
                             TensorRef::contiguous(s.get(), dt, {m, n}, d), TensorRef(), c.params)
              : rms_norm(xv, wv, yv, TensorRef(), c.params);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 2;
    }
  }
  const Status st = verify::sync_device();
  std::printf("profile: %s M=%lld N=%lld x%d: %s\n", op.c_str(), static_cast<long long>(m),
              static_cast<long long>(n), reps, st.ok() ? "ok" : st.message().c_str());
  return st.ok() ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ropenorm: RMSNorm, RoPE and fused QK-norm + RoPE kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ropenorm ") + ropenorm::version());
  auto* info = app.add_subcommand("info", "Show the device, driver and CUDA runtime");
  auto* verify = app.add_subcommand("verify", "Check every kernel against the float64 oracle");
  auto* bench = app.add_subcommand("bench", "Verify, then time the kernels and write receipts");
  bool quick = false;
  std::string out_dir = "bench/results";
  for (auto* sc : {verify, bench}) sc->add_flag("--quick", quick, "A few shapes only");
  bench->add_option("--out-dir", out_dir, "Folder for the JSON and CSV receipts")
      ->capture_default_str();
  std::set<std::string> ops;
  for (auto* sc : {verify, bench}) {
    sc->add_option("--ops", ops, "Op families to run (default all)")
        ->delimiter(',')
        ->check(CLI::IsMember({"rms_norm", "rope", "qk_norm_rope", "backward"}));
  }
  auto* profile = app.add_subcommand("profile", "Launch one kernel repeatedly (for profilers)");
  std::string prof_op = "rms_norm";
  int64_t prof_m = 4096, prof_n = 4096;
  int prof_reps = 3;
  profile->add_option("--op", prof_op, "rms_norm or add_rms_norm")->capture_default_str();
  profile->add_option("--m", prof_m, "Rows")->capture_default_str();
  profile->add_option("--n", prof_n, "Row width")->capture_default_str();
  profile->add_option("--reps", prof_reps, "Launches")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (profile->parsed()) return run_profile(prof_op, prof_m, prof_n, prof_reps);

  if (info->parsed()) {
    const auto d = bench::query_device();
    std::printf("CUDA runtime %s\n", d.cuda.c_str());
    if (!d.available) {
      std::printf("no usable CUDA device: %s\n", d.reason.c_str());
      return 0;
    }
    std::printf("device %s, sm_%d%d, %d SMs, L2 %d bytes, driver %s\n", d.name.c_str(), d.cc_major,
                d.cc_minor, d.sm_count, d.l2_bytes, d.driver.c_str());
    return 0;
  }
  return run_main_job(bench->parsed(), quick, out_dir, ops);
}
