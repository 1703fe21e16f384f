// One fused QK-norm + RoPE backward verification case (see qk_norm_rope_backward_case.h).
#include "verify/qk_norm_rope_backward_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_run.h"
#include "reference/host_float.h"
#include "reference/qk_norm_rope_grad_ref.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/qk_norm_rope.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/qk_norm_rope_inputs.h"
#include "verify/rope_layout.h"

namespace ropenorm::verify {

using namespace rope_layout;

namespace {

constexpr const char* kOp = "qk_norm_rope_backward";

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "qk_norm_rope_backward case: %s\n", what.c_str());
  std::abort();
}

// Exact r of one head vector of a logical [T, H, D] tensor.
double exact_rstd(const HostTensor& x, int64_t base, int64_t d, double eps) {
  double ss = 0.0;
  for (int64_t j = 0; j < d; ++j) ss += x.get(base + j) * x.get(base + j);
  return 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
}

// Bytes of a buffer that differ from `want` (0xFF when want is null).
int64_t changed_bytes(const DeviceBuffer& b, const std::vector<unsigned char>* want) {
  const auto now = download_all(b);
  int64_t n = 0;
  for (size_t j = 0; j < now.size(); ++j) n += now[j] != (want ? (*want)[j] : 0xFF);
  return n;
}

}  // namespace

std::string describe(const QkNormRopeBackwardCase& c) {
  std::ostringstream os;
  os << "qk_norm_rope_backward (" << describe(c.rope) << ") w:" << dtype_name(c.w_dtype)
     << " eps=" << c.eps << " o=" << c.weight_offset
     << (c.with_rstd ? (c.rstd_from_forward ? " forward-rstd" : " rstd") : " no-rstd")
     << (c.want_dw ? " dw" : " no-dw") << (c.wk_f32 ? " wk:f32" : "")
     << (c.short_workspace ? " short-workspace" : "") << (c.allow_lean ? "" : " no-lean");
  return os.str();
}

QkNormRopeBackwardInputs make_inputs(const QkNormRopeBackwardCase& c) {
  if (!c.rope.has_k || c.rope.layout == RopeLayout::kHfBhsd || c.rope.inverse) {
    fatal("cases are [T, H, D] or [B, S, H, D] with k, separate or packed, forward parameters");
  }
  QkNormRopeBackwardInputs in;
  in.rope = make_inputs(c.rope);
  std::mt19937_64 rng(c.rope.seed * 0xA24BAED4963EE407ull + 11);
  const int64_t t = c.rope.tokens(), d = c.rope.head_dim;
  in.wq = HostTensor(c.w_dtype, d);
  in.wk = HostTensor(c.wk_f32 ? DType::kFloat32 : c.w_dtype, d);
  ref::fill_normal(in.wq, rng);
  ref::fill_normal(in.wk, rng);
  in.dq_out = HostTensor(c.rope.dtype, t * c.rope.hq * d);
  in.dk_out = HostTensor(c.rope.dtype, t * c.rope.hk * d);
  ref::fill_normal(in.dq_out, rng);
  ref::fill_normal(in.dk_out, rng);
  return in;
}

QkNormRopeBackwardOutcome run_case(const QkNormRopeBackwardCase& bc,
                                   const QkNormRopeBackwardInputs& in) {
  const RopeCase& c = bc.rope;
  QkNormRopeBackwardOutcome out;
  const int64_t t = c.tokens(), r = c.rot(), h = r / 2, d = c.head_dim;
  const size_t es = dtype_size(c.dtype);
  const Placement pl = place_of(c);

  // Buffer images: the forward's inputs, the incoming gradients; results in place or poisoned.
  std::vector<std::vector<unsigned char>> ximg, gimg;
  for (int64_t n : pl.buf_elems) {
    ximg.emplace_back(static_cast<size_t>(n) * es, 0xFF);
    gimg.emplace_back(static_cast<size_t>(n) * es, 0xFF);
  }
  scatter(in.rope.q, c, pl.q, &ximg[pl.q.buf]);
  scatter(in.rope.k, c, pl.k, &ximg[pl.k.buf]);
  scatter(in.dq_out, c, pl.q, &gimg[pl.q.buf]);
  scatter(in.dk_out, c, pl.k, &gimg[pl.k.buf]);
  std::vector<DeviceBuffer> xb, gb, outb;
  for (const auto& im : ximg) xb.push_back(upload_at(im.data(), im.size(), 0, 1));
  for (const auto& im : gimg) gb.push_back(upload_at(im.data(), im.size(), 0, 1));
  if (!c.in_place) {
    for (const auto& im : gimg) {
      outb.emplace_back(im.size());
      outb.back().poison();
    }
  }
  std::vector<DeviceBuffer>& ob = c.in_place ? gb : outb;
  const TensorRef q = head_view(c, pl.q, xb[pl.q.buf].get());
  const TensorRef k = head_view(c, pl.k, xb[pl.k.buf].get());
  const TensorRef dq_out = head_view(c, pl.q, gb[pl.q.buf].get());
  const TensorRef dk_out = head_view(c, pl.k, gb[pl.k.buf].get());
  const TensorRef dq = head_view(c, pl.q, ob[pl.q.buf].get());
  const TensorRef dk = head_view(c, pl.k, ob[pl.k.buf].get());

  // The saved r (fp32 of the exact value) when given.
  std::vector<float> rq(static_cast<size_t>(t * c.hq)), rk(static_cast<size_t>(t * c.hk));
  for (int64_t i = 0; i < t * c.hq; ++i) {
    rq[i] = static_cast<float>(exact_rstd(in.rope.q, i * d, d, bc.eps));
  }
  for (int64_t i = 0; i < t * c.hk; ++i) {
    rk[i] = static_cast<float>(exact_rstd(in.rope.k, i * d, d, bc.eps));
  }
  DeviceBuffer rq_buf = upload_at(rq.data(), rq.size() * 4, 0, 1);
  DeviceBuffer rk_buf = upload_at(rk.data(), rk.size() * 4, 0, 1);
  TensorRef q_rstd, k_rstd;
  if (bc.with_rstd) {
    q_rstd = rstd_view(c, rq_buf.get(), c.hq);
    k_rstd = rstd_view(c, rk_buf.get(), c.hk);
  }

  // dw (one poisoned slack element each side) and the workspace (likewise).
  const size_t wes = dtype_size(bc.w_dtype);
  const DType dwk_dtype = bc.wk_f32 ? DType::kFloat32 : bc.w_dtype;
  const size_t kes = dtype_size(dwk_dtype);
  DeviceBuffer dwq_buf((static_cast<size_t>(d) + 2) * wes),
      dwk_buf((static_cast<size_t>(d) + 2) * kes);
  dwq_buf.poison();
  dwk_buf.poison();
  TensorRef dwq, dwk, ws;
  const size_t ws_bytes = qk_norm_rope_backward_workspace_size(t, c.hq, c.hk, d);
  int64_t ws_elems = static_cast<int64_t>(ws_bytes / 4);
  if (bc.short_workspace) ws_elems -= 1;
  DeviceBuffer ws_buf((static_cast<size_t>(std::max<int64_t>(ws_elems, 0)) + 2) * 4);
  ws_buf.poison();
  if (bc.want_dw) {
    dwq = TensorRef(dwq_buf.at(1, bc.w_dtype), bc.w_dtype, {d}, {1}, Device::cuda(0));
    dwk = TensorRef(dwk_buf.at(1, dwk_dtype), dwk_dtype, {d}, {1}, Device::cuda(0));
    if (ws_elems > 0) {
      ws = TensorRef(ws_buf.at(1, DType::kFloat32), DType::kFloat32, {ws_elems}, {1},
                     Device::cuda(0));
    }
  }

  // Weights, positions (explicit kinds, or arange + offset) and the cos/sin source.
  const QkNormRopeDeviceInputs dev = upload_qk_norm_rope_inputs(c, in.rope, in.wq, in.wk);
  RopeParams params;
  params.style = c.style;
  params.rotary_dim = c.rotary_dim;
  params.check_positions = c.check_positions;
  QkNormParams np;
  np.eps = bc.eps;
  np.weight_offset = bc.weight_offset;

  if (bc.with_rstd && bc.rstd_from_forward) {
    // The forward (out of place, into scratch copies of q and k's buffers) saves its r.
    std::vector<DeviceBuffer> fwd_out;
    for (const auto& im : ximg) fwd_out.push_back(upload_at(im.data(), im.size(), 0, 1));
    out.status = qk_norm_rope(q, k, dev.wq, dev.wk, head_view(c, pl.q, fwd_out[pl.q.buf].get()),
                              head_view(c, pl.k, fwd_out[pl.k.buf].get()), q_rstd, k_rstd, dev.pos,
                              dev.cs, params, np);
    if (out.status.ok()) out.status = sync_device();
    if (!out.status.ok()) {
      out.summary = describe(bc) + ": the forward failed: " + out.status.message();
      return out;
    }
    rq_buf.download(rq.data(), rq.size() * 4);
    rk_buf.download(rk.data(), rk.size() * 4);
  }
  out.status = cuda::run_qk_norm_rope_backward(
      core::qk_norm_rope_backward_call(dq_out, dk_out, q, k, dev.wq, dev.wk, q_rstd, k_rstd, dq, dk,
                                       dwq, dwk, ws, dev.pos, dev.cs, params, np),
      bc.allow_lean, Stream{});
  if (out.status.ok()) out.status = sync_device();

  // Inputs must be unchanged in every outcome (the gradients too when out of place).
  for (size_t i = 0; i < xb.size(); ++i) out.input_changed += changed_bytes(xb[i], &ximg[i]);
  if (!c.in_place) {
    for (size_t i = 0; i < gb.size(); ++i) out.input_changed += changed_bytes(gb[i], &gimg[i]);
  }
  if (!out.status.ok()) {
    for (size_t i = 0; i < ob.size(); ++i) {
      out.pad_written += changed_bytes(ob[i], c.in_place ? &gimg[i] : nullptr);
    }
    out.pad_written += changed_bytes(dwq_buf, nullptr) + changed_bytes(dwk_buf, nullptr);
    const bool names_ws = out.status.message().find("argument 'workspace'") != std::string::npos;
    out.passed = bc.short_workspace && names_ws && out.pad_written == 0 && out.input_changed == 0;
    out.summary = describe(bc) + ": call failed: " + out.status.message();
    if (out.pad_written) out.summary += " (" + std::to_string(out.pad_written) + " bytes written)";
    return out;
  }
  if (bc.short_workspace) {
    out.summary = describe(bc) + ": a workspace one element short was accepted";
    return out;
  }

  // Read back; bytes outside the views must still be 0xFF.
  out.pad_written += read_back(ob, c, pl, c.in_place ? &gimg : nullptr, &out.dq_val, &out.dk_val);
  auto read_dw = [&](const DeviceBuffer& b, DType dt, HostTensor* dst) {
    const size_t es = dtype_size(dt);
    const auto bytes = download_all(b);
    for (size_t j = 0; j < bytes.size(); ++j) {
      const bool inside = bc.want_dw && j >= es && j < es * (static_cast<size_t>(d) + 1);
      if (!inside && bytes[j] != 0xFF) ++out.pad_written;
    }
    if (!bc.want_dw) return;
    *dst = HostTensor(dt, d);
    std::memcpy(dst->bytes.data(), bytes.data() + es, static_cast<size_t>(d) * es);
  };
  read_dw(dwq_buf, bc.w_dtype, &out.dwq);
  read_dw(dwk_buf, dwk_dtype, &out.dwk);
  {
    const auto bytes = download_all(ws_buf);
    for (size_t j : {size_t{0}, size_t{1}, size_t{2}, size_t{3}})
      out.pad_written += bytes[j] != 0xFF;
    for (size_t j = bytes.size() - 4; j < bytes.size(); ++j) out.pad_written += bytes[j] != 0xFF;
  }

  // Oracle, token by token; dw summed per chunk of tokens, then over the chunks.
  out.tol_dq = ref::tolerance_ulp(kOp, "dq", c.dtype);
  out.tol_dk = ref::tolerance_ulp(kOp, "dk", c.dtype);
  out.tol_dw = ref::tolerance_ulp(kOp, "dw", bc.w_dtype);
  const double tol_dwk = ref::tolerance_ulp(kOp, "dw", dwk_dtype);
  const double dx_term = ref::tolerance_ulp(kOp, "dx_term", DType::kFloat32);
  const double dw_term = ref::tolerance_ulp(kOp, "dw_term", DType::kFloat32);
  const double dw_sum_term = ref::tolerance_ulp(kOp, "dw_sum_term", DType::kFloat32);
  const bool in_kernel = c.source == CosSinKind::kInvFreq;
  const double inv_term =
      in_kernel ? ref::tolerance_ulp("rope", "inv_freq_pair_term", DType::kFloat32) : 0.0;
  const double eps = static_cast<double>(bc.eps), off = static_cast<double>(bc.weight_offset);
  std::vector<double> wqd(d), wkd(d);
  for (int64_t j = 0; j < d; ++j) {
    wqd[j] = in.wq.get(j);
    wkd[j] = in.wk.get(j);
  }
  std::vector<double> dwq_ref(d, 0.0), dwk_ref(d, 0.0);
  std::mutex mu;
  parallel_rows(t, [&](int64_t t0, int64_t t1) {
    ref::ErrorStats eq, ek;
    std::vector<double> cv(h), sv(h), ang(h), x(d), dy(d), dx(d), gn(d), scale(d);
    std::vector<double> dwq_l(d, 0.0), dwk_l(d, 0.0);
    for (int64_t tok = t0; tok < t1; ++tok) {
      kernel_cos_sin(c, in.rope, tok, cv.data(), sv.data(), ang.data());
      for (int which = 0; which < 2; ++which) {
        const HostTensor& src = which == 0 ? in.rope.q : in.rope.k;
        const HostTensor& grad = which == 0 ? in.dq_out : in.dk_out;
        const HostTensor& got = which == 0 ? out.dq_val : out.dk_val;
        const std::vector<float>& saved = which == 0 ? rq : rk;
        const std::vector<double>& w = which == 0 ? wqd : wkd;
        std::vector<double>& dw_l = which == 0 ? dwq_l : dwk_l;
        const int64_t heads = which == 0 ? c.hq : c.hk;
        ref::ErrorStats& st = which == 0 ? eq : ek;
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j) {
            x[j] = src.get(base + j);
            dy[j] = grad.get(base + j);
          }
          const double given = static_cast<double>(saved[tok * heads + hd]);
          double rr = 0.0;
          ref::qk_norm_rope_grad_row_ref(x.data(), dy.data(), w.data(), d, r, c.style, cv.data(),
                                         sv.data(), eps, off, bc.with_rstd ? &given : nullptr,
                                         dx.data(), dw_l.data(), gn.data(), &rr);
          // The fp32 error scale of element j: r (P_j |w_j + o| + |xh_j| M), with P_j the norm of
          // the g_n pair holding j (|g_n[j]| past R) and M = sum_i P_i |w_i + o| |xh_i| / D.
          double m_abs = 0.0;
          for (int64_t j = 0; j < d; ++j) {
            double pj = std::fabs(gn[j]);
            if (j < r) {
              const int64_t i = c.style == RopeStyle::kNeox ? (j < h ? j : j - h) : j / 2;
              const int64_t ia = c.style == RopeStyle::kNeox ? i : 2 * i;
              const int64_t ib = c.style == RopeStyle::kNeox ? i + h : 2 * i + 1;
              pj = std::hypot(gn[ia], gn[ib]);
            }
            scale[j] = pj * std::fabs(w[j] + off);
            m_abs += scale[j] * std::fabs(x[j] * rr);
          }
          m_abs /= static_cast<double>(d);
          for (int64_t j = 0; j < d; ++j) {
            const double s_j = rr * (scale[j] + std::fabs(x[j] * rr) * m_abs);
            const double allow = (dx_term + inv_term) * ref::ulp_of(s_j, DType::kFloat32);
            st.add_allowing(got.get(base + j), dx[j], c.dtype, base + j, c.dtype, allow);
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out.dq.merge(eq);
    out.dk.merge(ek);
    for (int64_t j = 0; j < d; ++j) {
      dwq_ref[j] += dwq_l[j];
      dwk_ref[j] += dwk_l[j];
    }
  });

  // dw: in output ulps of max|dw| beyond (dw_term + dw_sum_term sqrt(N)) fp32 ulps of max|dw|.
  auto dw_error = [&](const HostTensor& got, const std::vector<double>& want, int64_t n_vec,
                      DType dt) {
    double max_abs = 0.0;
    for (double v : want) max_abs = std::max(max_abs, std::fabs(v));
    const double allow = (dw_term + dw_sum_term * std::sqrt(static_cast<double>(n_vec))) *
                         ref::ulp_of(max_abs, DType::kFloat32);
    const double unit = ref::ulp_of(max_abs, dt);
    double worst = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double g = got.get(j);
      const double e = std::isfinite(g) ? std::max(0.0, std::fabs(g - want[j]) - allow) / unit
                                        : std::numeric_limits<double>::infinity();
      worst = std::max(worst, e);
    }
    return worst;
  };
  if (bc.want_dw) {
    out.dwq_err = dw_error(out.dwq, dwq_ref, t * c.hq, bc.w_dtype);
    out.dwk_err = dw_error(out.dwk, dwk_ref, t * c.hk, dwk_dtype);
  }

  std::ostringstream os;
  os << describe(bc) << ": dq max " << out.dq.max_ulp << " ulp (tol " << out.tol_dq << "), dk max "
     << out.dk.max_ulp << " ulp (tol " << out.tol_dk << ")";
  bool ok = out.tol_dq >= 0 && out.tol_dk >= 0 && dx_term >= 0 && inv_term >= 0 &&
            out.dq.max_ulp <= out.tol_dq && out.dk.max_ulp <= out.tol_dk;
  if (bc.want_dw) {
    os << ", dwq " << out.dwq_err << " / dwk " << out.dwk_err << " ulp of max|dw| (tol "
       << out.tol_dw << " / " << tol_dwk << ")";
    ok = ok && out.tol_dw >= 0 && tol_dwk >= 0 && dw_term >= 0 && dw_sum_term >= 0 &&
         out.dwq_err <= out.tol_dw && out.dwk_err <= tol_dwk;
  }
  if (out.pad_written) os << ", " << out.pad_written << " bytes written outside the views";
  if (out.input_changed) os << ", " << out.input_changed << " input bytes changed";
  ok = ok && out.pad_written == 0 && out.input_changed == 0;
  const ref::ErrorStats& worst = out.dq.max_ulp >= out.dk.max_ulp ? out.dq : out.dk;
  if (!ok && worst.worst_index >= 0) {
    os << " [worst " << (&worst == &out.dq ? "dq" : "dk") << " at " << worst.worst_index << ": got "
       << worst.worst_got << " ref " << worst.worst_ref << "]";
  }
  out.passed = ok;
  out.summary = os.str();
  return out;
}

}  // namespace ropenorm::verify
