// One RMSNorm backward verification case (see rms_norm_backward_case.h).
#include "verify/rms_norm_backward_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "cuda/rms_norm_backward/rms_norm_backward_run.h"
#include "reference/host_float.h"
#include "reference/rms_norm_grad_ref.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/row_placement.h"

namespace ropenorm::verify {

using namespace row_placement;

namespace {

constexpr const char* kTolOp = "rms_norm_backward";  // the fused op's rows are the same

DeviceBuffer upload_image(const std::vector<unsigned char>& img) {
  DeviceBuffer b(img.size());
  if (!img.empty()) b.upload(img.data(), img.size());
  return b;
}

// An [n] vector placed after `offset` elements of 0xFF (so misalignment reaches it too).
std::vector<unsigned char> place_vector(const HostTensor& t, int64_t offset) {
  const size_t es = dtype_size(t.dtype);
  std::vector<unsigned char> img(static_cast<size_t>(offset) * es + t.bytes.size(), 0xFF);
  std::memcpy(img.data() + static_cast<size_t>(offset) * es, t.bytes.data(), t.bytes.size());
  return img;
}

void fill_row(HostTensor& t, int64_t r, int64_t n, Fill fill, uint64_t seed, uint64_t salt) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + salt * 0xD1B54A32D192ED03ull +
                      static_cast<uint64_t>(r) * 0x94D049BB133111EBull + 777);
  std::normal_distribution<double> nd(0.0, 1.0);
  const double a = nd(rng) * 2.0;
  for (int64_t j = 0; j < n; ++j) {
    const double v = fill == Fill::kZero ? 0.0 : fill == Fill::kConstant ? a : nd(rng);
    t.set(r * n + j, v);
  }
}

}  // namespace

std::string describe(const RmsNormBackwardCase& c) {
  std::ostringstream os;
  os << (c.fused ? "add_rms_norm_backward " : "rms_norm_backward ") << dtype_name(c.x_dtype)
     << " M=" << c.m << " N=" << c.n << " dy=" << dtype_name(c.dy_dtype)
     << " w=" << (c.has_weight ? dtype_name(c.w_dtype) : "none")
     << " dx=" << dtype_name(c.in_place ? c.dy_dtype : c.dx_dtype);
  if (writes_dresidual(c)) {
    os << " dres=" << dtype_name(c.in_place && c.has_ds ? c.x_dtype : c.dres_dtype);
  } else if (c.fused) {
    os << " no-dres";
  }
  if (c.fused) os << (c.has_ds ? " ds" : " no-ds");
  if (!c.want_dw) os << " no-dw";
  os << (c.give_rstd ? " rstd" : " recompute eps=");
  if (!c.give_rstd) os << c.params.eps;
  if (c.params.weight_offset != 0.0f) os << " offset=" << c.params.weight_offset;
  if (c.pitch_pad) os << " pad=" << c.pitch_pad;
  if (c.storage_offset) os << " off=" << c.storage_offset;
  if (c.weight_offset >= 0) os << " w_off=" << c.weight_offset;
  if (c.workspace_offset >= 0) os << " ws_off=" << c.workspace_offset;
  if (c.dx_offset >= 0) os << " dx_off=" << c.dx_offset;
  if (c.batch) os << " batch=" << c.batch;
  if (c.in_place) os << " in-place";
  if (c.fill == Fill::kZero) os << " zero-rows";
  if (c.fill == Fill::kConstant) os << " constant-rows";
  if (c.plan_rows) os << " planned-for=" << c.plan_rows;
  return os.str();
}

RmsNormBackwardInputs make_backward_inputs(const RmsNormBackwardCase& c) {
  RmsNormBackwardInputs in;
  in.dy = HostTensor(c.dy_dtype, c.m * c.n);
  in.x = HostTensor(c.x_dtype, c.m * c.n);
  if (c.fused && c.has_ds) in.ds = HostTensor(c.x_dtype, c.m * c.n);
  parallel_rows(c.m, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      fill_row(in.x, r, c.n, c.fill, c.seed, 1);
      fill_row(in.dy, r, c.n, Fill::kNormal, c.seed, 2);
      if (c.fused && c.has_ds) fill_row(in.ds, r, c.n, Fill::kNormal, c.seed, 3);
    }
  });
  if (c.has_weight) {
    // Asymmetric weights (never all ones) so a dropped weight cannot pass.
    std::mt19937_64 rng(c.seed + 7);
    in.weight = HostTensor(c.w_dtype, c.n);
    std::uniform_real_distribution<double> wd(-2.0, 2.0);
    for (int64_t j = 0; j < c.n; ++j) in.weight.set(j, wd(rng));
  }
  if (c.give_rstd) {
    // The forward's saved r: the float64 r of each row, rounded to fp32.
    in.rstd = HostTensor(DType::kFloat32, c.m);
    for (int64_t r = 0; r < c.m; ++r) {
      double sum_sq = 0.0;
      for (int64_t j = 0; j < c.n; ++j) sum_sq += in.x.get(r * c.n + j) * in.x.get(r * c.n + j);
      in.rstd.set(r, 1.0 / std::sqrt(sum_sq / static_cast<double>(c.n) +
                                     static_cast<double>(c.params.eps)));
    }
  }
  return in;
}

namespace {

// What a case writes: dresidual or not, dresidual in ds's place (in place with ds), and the
// dtypes of dx (dy's when in place) and dresidual (x's when it is ds).
struct OutputForms {
  bool dres, dres_in_ds;
  DType dx_dtype, dres_dtype;
};

OutputForms output_forms(const RmsNormBackwardCase& c) {
  const bool dres = writes_dresidual(c);
  const bool dres_in_ds = dres && c.in_place && c.has_ds;
  return {dres, dres_in_ds, c.in_place ? c.dy_dtype : c.dx_dtype,
          dres_in_ds ? c.x_dtype : c.dres_dtype};
}

}  // namespace

RmsNormBackwardOutcome run_backward_case(const RmsNormBackwardCase& c,
                                         const RmsNormBackwardInputs& in) {
  RmsNormBackwardOutcome out;
  const RowPlacement L{c.m, c.n, c.n + c.pitch_pad, c.storage_offset, c.batch};
  const RowPlacement DL = L.at_offset(c.in_place ? -1 : c.dx_offset);  // dx (dy when in place)
  const OutputForms f = output_forms(c);
  const bool has_dres = f.dres, dres_in_ds = f.dres_in_ds;
  const DType dx_dtype = f.dx_dtype, dres_dtype = f.dres_dtype;
  const Device dev = Device::cuda(0);
  const int64_t woff = c.weight_offset >= 0 ? c.weight_offset : c.storage_offset;
  const int64_t wsoff = c.workspace_offset >= 0 ? c.workspace_offset : c.storage_offset;

  DeviceBuffer dyb = upload_image(place(in.dy, L));
  DeviceBuffer xb = upload_image(place(in.x, L));
  DeviceBuffer dsb, dxb, dresb, wb, dwb, rb, wsb;
  if (c.fused && c.has_ds) dsb = upload_image(place(in.ds, L));
  if (!c.in_place) {
    dxb = DeviceBuffer(static_cast<size_t>(DL.elems()) * dtype_size(dx_dtype));
    dxb.poison();
  }
  if (has_dres && !dres_in_ds) {
    dresb = DeviceBuffer(static_cast<size_t>(L.elems()) * dtype_size(dres_dtype));
    dresb.poison();
  }
  if (c.has_weight) wb = upload_image(place_vector(in.weight, woff));
  const bool want_dw = c.has_weight && c.want_dw;
  if (want_dw) {
    dwb = DeviceBuffer(static_cast<size_t>(woff + c.n) * dtype_size(c.w_dtype));
    dwb.poison();
    const size_t ws_bytes = rms_norm_backward_workspace_size(c.m, c.n);
    // At an offset in floats too: a workspace that need not be 16-byte aligned.
    wsb = DeviceBuffer(std::max<size_t>(ws_bytes, 4) + static_cast<size_t>(wsoff) * 4);
    wsb.poison();
  }
  if (c.give_rstd) {
    rb = DeviceBuffer(std::max<size_t>(in.rstd.bytes.size(), 4));
    if (!in.rstd.bytes.empty()) rb.upload(in.rstd.bytes.data(), in.rstd.bytes.size());
  }

  const TensorRef dy = L.view(dyb.get(), c.dy_dtype);
  const TensorRef x = L.view(xb.get(), c.x_dtype);
  const TensorRef ds = c.fused && c.has_ds ? L.view(dsb.get(), c.x_dtype) : TensorRef();
  const TensorRef dx = c.in_place ? dy : DL.view(dxb.get(), dx_dtype);
  const TensorRef dres = !has_dres    ? TensorRef()
                         : dres_in_ds ? ds
                                      : L.view(dresb.get(), dres_dtype);
  const TensorRef w =
      c.has_weight ? TensorRef(wb.at(woff, c.w_dtype), c.w_dtype, {c.n}, {1}, dev) : TensorRef();
  const TensorRef dw =
      want_dw ? TensorRef(dwb.at(woff, c.w_dtype), c.w_dtype, {c.n}, {1}, dev) : TensorRef();
  const TensorRef ws =
      want_dw ? TensorRef::contiguous(wsb.at(wsoff, DType::kFloat32), DType::kFloat32,
                                      {static_cast<int64_t>(wsb.size() / 4 - wsoff)}, dev)
              : TensorRef();
  const TensorRef rstd =
      c.give_rstd ? TensorRef(rb.get(), DType::kFloat32, {c.m}, {1}, dev) : TensorRef();
  if (c.plan_rows > 0) {
    const core::RmsNormBackwardCall call{dy, x, ds, w, rstd, dx, dres, dw, ws, c.params, c.fused};
    out.status = cuda::run_rms_norm_backward(call, c.plan_rows, Stream{}, &out.lean_kernel);
  } else if (c.fused) {
    out.status = add_rms_norm_backward(dy, ds, x, w, rstd, dx, dres, dw, ws, c.params);
  } else {
    out.status = rms_norm_backward(dy, x, w, rstd, dx, dw, ws, c.params);
  }
  if (out.status.ok()) out.status = sync_device();
  if (!out.status.ok()) {
    out.summary = describe(c) + ": call failed: " + out.status.message();
    return out;
  }

  out.dx_out = gather(download_all(c.in_place ? dyb : dxb), dx_dtype, DL, &out.pad_written);
  if (has_dres) {
    out.dres_out = gather(download_all(dres_in_ds ? dsb : dresb), dres_dtype, L, &out.pad_written);
  }
  if (want_dw) {
    const auto img = download_all(dwb);
    const size_t es = dtype_size(c.w_dtype);
    out.dw_out = HostTensor(c.w_dtype, c.n);
    std::memcpy(out.dw_out.bytes.data(), img.data() + woff * es, out.dw_out.bytes.size());
    for (size_t i = 0; i < static_cast<size_t>(woff) * es; ++i) {
      if (img[i] != 0xFF) ++out.pad_written;
    }
  }
  check_backward_outputs(c, in, &out);
  return out;
}

void check_backward_outputs(const RmsNormBackwardCase& c, const RmsNormBackwardInputs& in,
                            RmsNormBackwardOutcome* outp) {
  RmsNormBackwardOutcome& out = *outp;
  const OutputForms f = output_forms(c);
  const bool has_dres = f.dres;
  const DType dx_dtype = f.dx_dtype, dres_dtype = f.dres_dtype;
  const bool want_dw = c.has_weight && c.want_dw;
  out.tol_dx = ref::tolerance_ulp(kTolOp, "dx", dx_dtype);
  const double tol_dres = ref::tolerance_ulp(kTolOp, "dx", dres_dtype);
  const double scale_ulps = ref::tolerance_ulp(kTolOp, "dx_scale_term", DType::kFloat32);
  out.tol_dw = ref::tolerance_ulp(kTolOp, "dw", c.w_dtype);
  std::vector<double> wr(c.n), dw_ref(c.n, 0.0);
  for (int64_t j = 0; c.has_weight && j < c.n; ++j) wr[j] = in.weight.get(j);
  const double eps = static_cast<double>(c.params.eps);
  const double offset = static_cast<double>(c.params.weight_offset);
  std::mutex mu;
  parallel_rows(c.m, [&](int64_t r0, int64_t r1) {
    ErrorStats edx, edres;
    std::vector<double> dyr(c.n), xr(c.n), dsr(c.n), dxr(c.n), scale(c.n), dw_part(c.n, 0.0);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < c.n; ++j) {
        dyr[j] = in.dy.get(r * c.n + j);
        xr[j] = in.x.get(r * c.n + j);
        if (c.fused && c.has_ds) dsr[j] = in.ds.get(r * c.n + j);
      }
      const double saved_r = c.give_rstd ? in.rstd.get(r) : 0.0;
      ref::rms_norm_backward_row_ref(dyr.data(), xr.data(), c.has_weight ? wr.data() : nullptr,
                                     c.fused && c.has_ds ? dsr.data() : nullptr, c.n, eps, offset,
                                     c.give_rstd ? &saved_r : nullptr, dxr.data(),
                                     want_dw ? dw_part.data() : nullptr, scale.data(), nullptr);
      for (int64_t j = 0; j < c.n; ++j) {
        const double allow = scale_ulps * ref::ulp_of(scale[j], DType::kFloat32);
        edx.add_allowing(out.dx_out.get(r * c.n + j), dxr[j], dx_dtype, r * c.n + j, dx_dtype,
                         allow);
        if (has_dres) {
          edres.add_allowing(out.dres_out.get(r * c.n + j), dxr[j], dres_dtype, r * c.n + j,
                             dres_dtype, allow);
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out.dx.merge(edx);
    out.dresidual.merge(edres);
    for (int64_t j = 0; want_dw && j < c.n; ++j) dw_ref[j] += dw_part[j];
  });
  if (want_dw) {
    double max_abs = 0.0;
    for (double v : dw_ref) max_abs = std::max(max_abs, std::fabs(v));
    const double ulps = ref::tolerance_ulp(kTolOp, "dw_scale_term", DType::kFloat32) +
                        ref::tolerance_ulp(kTolOp, "dw_per_sqrt_rows", DType::kFloat32) *
                            std::sqrt(static_cast<double>(c.m));
    const double allow = ulps * ref::ulp_of(max_abs, DType::kFloat32);
    for (int64_t j = 0; j < c.n; ++j) {
      out.dw.add_allowing(out.dw_out.get(j), dw_ref[j], c.w_dtype, j, c.w_dtype, allow);
    }
  }

  std::ostringstream os;
  os << describe(c) << ": dx max " << out.dx.max_ulp << " ulp (tol " << out.tol_dx << ", exact "
     << out.dx.frac_exact() * 100.0 << "%)";
  bool ok = out.tol_dx >= 0 && scale_ulps >= 0 && out.dx.max_ulp <= out.tol_dx;
  if (has_dres) {
    os << ", dresidual max " << out.dresidual.max_ulp << " ulp (tol " << tol_dres << ")";
    ok = ok && tol_dres >= 0 && out.dresidual.max_ulp <= tol_dres;
  }
  if (want_dw) {
    os << ", dw max " << out.dw.max_ulp << " ulp (tol " << out.tol_dw << ")";
    ok = ok && out.tol_dw >= 0 && out.dw.max_ulp <= out.tol_dw;
  }
  if (out.pad_written) os << ", " << out.pad_written << " bytes written outside the outputs";
  ok = ok && out.pad_written == 0;
  const auto worst = [&](const char* name, const ErrorStats& e, double tol) {
    if (e.worst_index >= 0 && e.max_ulp > tol) {
      os << " [worst " << name << " at " << e.worst_index << ": got " << e.worst_got << " ref "
         << e.worst_ref << "]";
    }
  };
  if (!ok) {
    worst("dx", out.dx, out.tol_dx);
    if (has_dres) worst("dresidual", out.dresidual, tol_dres);
    if (want_dw) worst("dw", out.dw, out.tol_dw);
  }
  out.passed = ok;
  out.summary = os.str();
}

}  // namespace ropenorm::verify
