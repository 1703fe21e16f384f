// One RMSNorm verification case (see rms_norm_case.h).
#include "verify/rms_norm_case.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "cuda/rms_norm/rms_norm_run.h"
#include "reference/rms_norm_ref.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/row_placement.h"

namespace ropenorm::verify {

using namespace row_placement;

namespace {

// Largest magnitudes whose squares, summed over the widest rows tested (262144 elements), stay
// finite in fp32: 65504 for f16; 1e16 for f32/bf16 (the fp32 sum of squares is the limit, as in
// every fp32-accumulating RMSNorm).
double top_value(DType dt) { return dt == DType::kFloat16 ? 65504.0 : 1e16; }

double tiny_value(DType dt) {
  switch (dt) {
    case DType::kFloat16:
      return 6.103515625e-05;  // smallest normal f16
    case DType::kBFloat16:
    case DType::kFloat32:
    default:
      return 1.1754943508222875e-38;  // smallest normal f32/bf16
  }
}

// Row r draws from its own generator (seed, salt, r), so rows can be filled in parallel and a
// row's values do not depend on how many rows there are.
void fill_row(HostTensor& t, int64_t r, int64_t n, Fill fill, uint64_t seed, uint64_t salt) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + salt * 0xD1B54A32D192ED03ull +
                      static_cast<uint64_t>(r) * 0x94D049BB133111EBull + 12345);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.25, 4.0);
  std::uniform_real_distribution<double> near(0.9, 1.0);
  const double top = top_value(t.dtype);
  const double a = ud(rng) * (nd(rng) < 0 ? -1.0 : 1.0);
  const int64_t hot = n > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(n)) : 0;
  for (int64_t j = 0; j < n; ++j) {
    double v = 0.0;
    switch (fill) {
      case Fill::kNormal:
        v = nd(rng);
        break;
      case Fill::kZero:
        v = 0.0;
        break;
      case Fill::kConstant:
        v = a;
        break;
      case Fill::kAlternating:
        v = (j % 2 == 0) ? a : -a;
        break;
      case Fill::kExtreme:
        v = (j == hot) ? top * (a < 0 ? -1.0 : 1.0) : nd(rng);
        break;
      case Fill::kNearMax:
        v = top * near(rng) * ((rng() & 1) ? 1.0 : -1.0);
        break;
      case Fill::kSubnormal:
        v = tiny_value(t.dtype) * nd(rng) * 4.0;
        break;
    }
    t.set(r * n + j, v);
  }
}

}  // namespace

std::string describe(const RmsNormCase& c) {
  std::ostringstream os;
  os << (c.fused ? "add_rms_norm " : "rms_norm ") << dtype_name(c.x_dtype) << " M=" << c.m
     << " N=" << c.n << " w=" << (c.has_weight ? dtype_name(c.w_dtype) : "none")
     << " y=" << dtype_name(c.y_dtype);
  if (c.fused) os << " res=" << dtype_name(c.res_dtype);
  os << " " << rounding_name(c.params.rounding) << " eps=" << c.params.eps;
  if (c.params.weight_offset != 0.0f) os << " offset=" << c.params.weight_offset;
  if (c.pitch_pad) os << " pad=" << c.pitch_pad;
  if (c.storage_offset) os << " off=" << c.storage_offset;
  if (c.residual_offset >= 0) os << " res_off=" << c.residual_offset;
  if (c.y_offset >= 0) os << " y_off=" << c.y_offset;
  if (c.y_pitch_pad >= 0) os << " y_pad=" << c.y_pitch_pad;
  if (c.batch) os << " batch=" << c.batch;
  if (c.in_place) os << " in-place";
  if (c.plan_rows) os << " planned-for=" << c.plan_rows;
  return os.str();
}

RmsNormInputs make_inputs(const RmsNormCase& c) {
  RmsNormInputs in;
  in.x = HostTensor(c.x_dtype, c.m * c.n);
  if (c.fused) in.residual = HostTensor(c.res_dtype, c.m * c.n);
  const Fill res_fill = c.fill == Fill::kZero ? Fill::kZero : Fill::kNormal;
  parallel_rows(c.m, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      fill_row(in.x, r, c.n, c.fill, c.seed, 1);
      if (c.fused) fill_row(in.residual, r, c.n, res_fill, c.seed, 2);
    }
  });
  if (c.has_weight) {
    // Asymmetric weights (never all ones) so a dropped weight cannot pass.
    std::mt19937_64 rng(c.seed + 7);
    in.weight = HostTensor(c.w_dtype, c.n);
    std::uniform_real_distribution<double> wd(-2.0, 2.0);
    for (int64_t j = 0; j < c.n; ++j) in.weight.set(j, wd(rng));
  }
  return in;
}

RmsNormOutcome run_case(const RmsNormCase& c, const RmsNormInputs& in) {
  RmsNormOutcome out;
  const RowPlacement L{c.m, c.n, c.n + c.pitch_pad, c.storage_offset, c.batch};
  const RowPlacement RL = L.at_offset(c.residual_offset);  // residual and residual_out
  // y (x when in place).
  const int64_t y_pitch = c.y_pitch_pad < 0 ? -1 : c.n + c.y_pitch_pad;
  const RowPlacement YL = c.in_place ? L : L.at_offset(c.y_offset).with_pitch(y_pitch);
  const DType y_dtype = c.in_place ? c.x_dtype : c.y_dtype;

  DeviceBuffer xb(place(in.x, L).size());
  {
    auto img = place(in.x, L);
    if (!img.empty()) xb.upload(img.data(), img.size());
  }
  DeviceBuffer rb, rob, yb, wb, sb;
  if (c.fused) {
    auto img = place(in.residual, RL);
    rb = DeviceBuffer(img.size());
    if (!img.empty()) rb.upload(img.data(), img.size());
    if (!c.in_place) {
      rob = DeviceBuffer(img.size());
      rob.poison();
    }
  }
  if (!c.in_place) {
    yb = DeviceBuffer(static_cast<size_t>(YL.elems()) * dtype_size(y_dtype));
    yb.poison();
  }
  if (c.has_weight) {
    // Weight sits after `storage_offset` elements too, so misalignment reaches every pointer.
    std::vector<unsigned char> img(
        static_cast<size_t>(c.storage_offset + c.n) * dtype_size(c.w_dtype), 0xFF);
    std::memcpy(img.data() + c.storage_offset * dtype_size(c.w_dtype), in.weight.bytes.data(),
                in.weight.bytes.size());
    wb = DeviceBuffer(img.size());
    wb.upload(img.data(), img.size());
  }
  if (c.save_rstd) {
    sb = DeviceBuffer(static_cast<size_t>(c.m) * 4);
    sb.poison();
  }

  const TensorRef x = L.view(xb.get(), c.x_dtype);
  const TensorRef y = c.in_place ? x : YL.view(yb.get(), y_dtype);
  const TensorRef w = c.has_weight ? TensorRef(wb.at(c.storage_offset, c.w_dtype), c.w_dtype, {c.n},
                                               {1}, Device::cuda(0))
                                   : TensorRef();
  const TensorRef rstd =
      c.save_rstd ? TensorRef(sb.get(), DType::kFloat32, {c.m}, {1}, Device::cuda(0)) : TensorRef();
  TensorRef res, res_out;
  if (c.fused) {
    res = RL.view(rb.get(), c.res_dtype);
    res_out = c.in_place ? res : RL.view(rob.get(), c.res_dtype);
  }
  if (c.plan_rows > 0) {
    const core::RmsNormCall call{x, res, w, y, res_out, rstd, c.params, c.fused};
    out.status = cuda::run_rms_norm(call, c.plan_rows, Stream{});
  } else if (c.fused) {
    out.status = add_rms_norm(x, res, w, y, res_out, rstd, c.params);
  } else {
    out.status = rms_norm(x, w, y, rstd, c.params);
  }
  if (out.status.ok()) out.status = sync_device();
  if (!out.status.ok()) {
    out.summary = describe(c) + ": call failed: " + out.status.message();
    return out;
  }

  // Read back.
  out.y_out = gather(download_all(c.in_place ? xb : yb), y_dtype, YL, &out.pad_written);
  if (c.fused) {
    out.residual_out_host =
        gather(download_all(c.in_place ? rb : rob), c.res_dtype, RL, &out.pad_written);
  }
  if (c.save_rstd) out.rstd_out = HostTensor(DType::kFloat32, c.m);
  if (c.save_rstd && c.m > 0) sb.download(out.rstd_out.bytes.data(), out.rstd_out.bytes.size());

  check_outputs(c, in, &out);
  return out;
}

void check_outputs(const RmsNormCase& c, const RmsNormInputs& in, RmsNormOutcome* outp) {
  RmsNormOutcome& out = *outp;
  const DType y_dtype = c.in_place ? c.x_dtype : c.y_dtype;
  // Oracle, row by row; rows split across host threads, each with its own statistics.
  const char* op = c.fused ? "add_rms_norm" : "rms_norm";
  const DType norm_dtype = c.fused ? c.res_dtype : c.x_dtype;
  // hf_llama rounds the normalised value to the norm input's dtype first: errors are measured in
  // ulps of the coarser of that dtype and y's.
  const DType y_unit =
      c.params.rounding == Rounding::kHfLlama ? ref::coarser_dtype(y_dtype, norm_dtype) : y_dtype;
  out.tol_y = ref::tolerance_ulp(op, "y", y_unit, c.params.rounding);
  out.tol_rstd = ref::tolerance_ulp(op, "rstd", DType::kFloat32, c.params.rounding);
  out.tol_residual = ref::tolerance_ulp(op, "residual_out", c.res_dtype, c.params.rounding);
  std::vector<double> wr(c.n);
  for (int64_t j = 0; c.has_weight && j < c.n; ++j) wr[j] = in.weight.get(j);
  std::mutex mu;
  parallel_rows(c.m, [&](int64_t r0, int64_t r1) {
    ErrorStats ey, er, es;
    std::vector<double> xr(c.n), rr(c.n), sr(c.n), yr(c.n);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < c.n; ++j) xr[j] = in.x.get(r * c.n + j);
      const double* norm_in = xr.data();
      if (c.fused) {
        for (int64_t j = 0; j < c.n; ++j) rr[j] = in.residual.get(r * c.n + j);
        ref::add_row_ref(xr.data(), rr.data(), c.n, c.res_dtype, sr.data());
        for (int64_t j = 0; j < c.n; ++j) {
          es.add(out.residual_out_host.get(r * c.n + j), sr[j], c.res_dtype, r * c.n + j);
        }
        norm_in = sr.data();
      }
      double rstd_ref = 0;
      ref::rms_norm_row_ref(norm_in, c.has_weight ? wr.data() : nullptr, c.n,
                            static_cast<double>(c.params.eps),
                            static_cast<double>(c.params.weight_offset), c.params.rounding,
                            norm_dtype, yr.data(), &rstd_ref);
      for (int64_t j = 0; j < c.n; ++j) {
        ey.add(out.y_out.get(r * c.n + j), yr[j], y_dtype, r * c.n + j, y_unit);
      }
      if (c.save_rstd) er.add(out.rstd_out.get(r), rstd_ref, DType::kFloat32, r);
    }
    std::lock_guard<std::mutex> lock(mu);
    out.y.merge(ey);
    out.rstd.merge(er);
    out.residual_out.merge(es);
  });

  std::ostringstream os;
  os << describe(c) << ": y max " << out.y.max_ulp << " ulp (tol " << out.tol_y << ", exact "
     << out.y.frac_exact() * 100.0 << "%)";
  bool ok = out.tol_y >= 0 && out.y.max_ulp <= out.tol_y;
  if (c.save_rstd) {
    os << ", rstd max " << out.rstd.max_ulp << " ulp (tol " << out.tol_rstd << ")";
    ok = ok && out.tol_rstd >= 0 && out.rstd.max_ulp <= out.tol_rstd;
  }
  if (c.fused) {
    os << ", residual_out max " << out.residual_out.max_ulp << " ulp (tol " << out.tol_residual
       << ")";
    ok = ok && out.tol_residual >= 0 && out.residual_out.max_ulp <= out.tol_residual;
  }
  if (out.pad_written) os << ", " << out.pad_written << " bytes written outside the rows";
  ok = ok && out.pad_written == 0;
  if (!ok && out.y.worst_index >= 0 && out.y.max_ulp > out.tol_y) {
    os << " [worst y at " << out.y.worst_index << ": got " << out.y.worst_got << " ref "
       << out.y.worst_ref << "]";
  }
  out.passed = ok;
  out.summary = os.str();
}

}  // namespace ropenorm::verify
