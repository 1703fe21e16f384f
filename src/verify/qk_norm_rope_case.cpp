// One fused QK-norm + RoPE verification case (see qk_norm_rope_case.h).
#include "verify/qk_norm_rope_case.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "cuda/qk_norm_rope/qk_norm_rope_run.h"
#include "reference/host_float.h"
#include "reference/rms_norm_ref.h"
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/qk_norm_rope_inputs.h"
#include "verify/rope_layout.h"

namespace ropenorm::verify {

using namespace rope_layout;

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "qk_norm_rope case: %s\n", what.c_str());
  std::abort();
}

}  // namespace

std::string describe(const QkNormRopeCase& c) {
  std::ostringstream os;
  os << "qk_norm_rope (" << describe(c.rope) << ") w:" << dtype_name(c.w_dtype) << " eps=" << c.eps
     << " o=" << c.weight_offset << (c.with_rstd ? " rstd" : "")
     << (c.allow_lean ? "" : " no-lean");
  return os.str();
}

QkNormRopeInputs make_inputs(const QkNormRopeCase& c) {
  if (!c.rope.has_k || c.rope.layout == RopeLayout::kHfBhsd) {
    fatal("cases are [T, H, D] or [B, S, H, D] with k, separate or packed");
  }
  QkNormRopeInputs in;
  in.rope = make_inputs(c.rope);
  std::mt19937_64 rng(c.rope.seed * 0xD1B54A32D192ED03ull + 5);
  in.wq = HostTensor(c.w_dtype, c.rope.head_dim);
  in.wk = HostTensor(c.w_dtype, c.rope.head_dim);
  ref::fill_normal(in.wq, rng);
  ref::fill_normal(in.wk, rng);
  return in;
}

QkNormRopeOutcome run_case(const QkNormRopeCase& qc, const QkNormRopeInputs& in) {
  const RopeCase& c = qc.rope;
  QkNormRopeOutcome out;
  const int64_t t = c.tokens(), r = c.rot(), h = r / 2, d = c.head_dim;
  const size_t es = dtype_size(c.dtype);
  const Placement pl = place_of(c);

  std::vector<std::vector<unsigned char>> img;
  for (int64_t n : pl.buf_elems) img.emplace_back(static_cast<size_t>(n) * es, 0xFF);
  scatter(in.rope.q, c, pl.q, &img[pl.q.buf]);
  scatter(in.rope.k, c, pl.k, &img[pl.k.buf]);
  std::vector<DeviceBuffer> inb, outb;
  for (const auto& im : img) inb.push_back(upload_at(im.data(), im.size(), 0, 1));
  if (!c.in_place) {
    for (const auto& im : img) {
      outb.emplace_back(im.size());
      outb.back().poison();
    }
  }
  std::vector<DeviceBuffer>& ob = c.in_place ? inb : outb;
  const TensorRef q = head_view(c, pl.q, inb[pl.q.buf].get());
  const TensorRef q_out = head_view(c, pl.q, ob[pl.q.buf].get());
  const TensorRef k = head_view(c, pl.k, inb[pl.k.buf].get());
  const TensorRef k_out = head_view(c, pl.k, ob[pl.k.buf].get());

  // rstd (one slack element each side, poisoned, to catch stray writes).
  DeviceBuffer rq_buf((static_cast<size_t>(t * c.hq) + 2) * 4);
  DeviceBuffer rk_buf((static_cast<size_t>(t * c.hk) + 2) * 4);
  rq_buf.poison();
  rk_buf.poison();
  TensorRef q_rstd, k_rstd;
  if (qc.with_rstd) {
    q_rstd = rstd_view(c, rq_buf.at(1, DType::kFloat32), c.hq);
    k_rstd = rstd_view(c, rk_buf.at(1, DType::kFloat32), c.hk);
  }

  // Weights, positions (explicit kinds, or arange + offset) and the cos/sin source.
  const QkNormRopeDeviceInputs dev = upload_qk_norm_rope_inputs(c, in.rope, in.wq, in.wk);
  RopeParams params;
  params.style = c.style;
  params.rotary_dim = c.rotary_dim;
  params.inverse = c.inverse;
  params.check_positions = c.check_positions;
  QkNormParams np;
  np.eps = qc.eps;
  np.weight_offset = qc.weight_offset;

  out.status =
      cuda::run_qk_norm_rope(core::qk_norm_rope_call(q, k, dev.wq, dev.wk, q_out, k_out, q_rstd,
                                                     k_rstd, dev.pos, dev.cs, params, np),
                             qc.allow_lean, Stream{});
  if (out.status.ok()) out.status = sync_device();
  if (!out.status.ok()) {
    for (size_t i = 0; i < ob.size(); ++i) {
      const auto now = download_all(ob[i]);
      for (size_t j = 0; j < now.size(); ++j) {
        if (now[j] != (c.in_place ? img[i][j] : 0xFF)) ++out.pad_written;
      }
    }
    for (const DeviceBuffer* rb : {&rq_buf, &rk_buf}) {
      for (unsigned char v : download_all(*rb)) out.pad_written += v != 0xFF;
    }
    out.summary = describe(qc) + ": call failed: " + out.status.message();
    return out;
  }

  // Read back; bytes outside the views must still be 0xFF, inputs unchanged.
  out.pad_written += read_back(ob, c, pl, nullptr, &out.q_out, &out.k_out);
  if (!c.in_place) {
    for (size_t i = 0; i < inb.size(); ++i) {
      const auto cur = download_all(inb[i]);
      for (size_t j = 0; j < cur.size(); ++j) out.input_changed += cur[j] != img[i][j];
    }
  }
  auto read_rstd = [&](const DeviceBuffer& rb, int64_t n, std::vector<float>* dst) {
    const auto bytes = download_all(rb);
    dst->assign(static_cast<size_t>(n), 0.0f);
    if (qc.with_rstd) std::memcpy(dst->data(), bytes.data() + 4, static_cast<size_t>(n) * 4);
    for (size_t j = 0; j < bytes.size(); ++j) {
      const bool inside = qc.with_rstd && j >= 4 && j < 4 + static_cast<size_t>(n) * 4;
      if (!inside && bytes[j] != 0xFF) ++out.pad_written;
    }
  };
  read_rstd(rq_buf, t * c.hq, &out.q_rstd);
  read_rstd(rk_buf, t * c.hk, &out.k_rstd);

  // Oracle, token by token.
  out.tol_q = ref::tolerance_ulp("qk_norm_rope", "q_out", c.dtype);
  out.tol_k = ref::tolerance_ulp("qk_norm_rope", "k_out", c.dtype);
  out.tol_rstd = ref::tolerance_ulp("qk_norm_rope", "rstd", DType::kFloat32);
  out.tol_pair = ref::tolerance_ulp("qk_norm_rope", "pair_term", DType::kFloat32);
  const bool in_kernel = c.source == CosSinKind::kInvFreq;
  const double inv_term =
      in_kernel ? ref::tolerance_ulp("rope", "inv_freq_pair_term", DType::kFloat32) : 0.0;
  const double scaling = static_cast<double>(c.attention_scaling);
  std::vector<double> wqd(d), wkd(d);
  for (int64_t j = 0; j < d; ++j) {
    wqd[j] = in.wq.get(j);
    wkd[j] = in.wk.get(j);
  }
  std::mutex mu;
  parallel_rows(t, [&](int64_t t0, int64_t t1) {
    ref::ErrorStats eq, ek, er;
    std::vector<double> cv(h), sv(h), ang(h), x(d), y(d), z(d);
    for (int64_t tok = t0; tok < t1; ++tok) {
      kernel_cos_sin(c, in.rope, tok, cv.data(), sv.data(), ang.data());
      for (int which = 0; which < 2; ++which) {
        const HostTensor& src = which == 0 ? in.rope.q : in.rope.k;
        const HostTensor& got = which == 0 ? out.q_out : out.k_out;
        const std::vector<float>& got_r = which == 0 ? out.q_rstd : out.k_rstd;
        const std::vector<double>& w = which == 0 ? wqd : wkd;
        const int64_t heads = which == 0 ? c.hq : c.hk;
        ref::ErrorStats& st = which == 0 ? eq : ek;
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j) x[j] = src.get(base + j);
          double rstd = 0.0;
          ref::rms_norm_row_ref(x.data(), w.data(), d, static_cast<double>(qc.eps),
                                static_cast<double>(qc.weight_offset), Rounding::kExact, c.dtype,
                                y.data(), &rstd);
          ref::rope_rotate_ref(y.data(), z.data(), d, r, c.style, cv.data(), sv.data(), c.inverse);
          for (int64_t j = 0; j < d; ++j) {
            double allow = 0.0;
            if (j < r) {
              const int64_t i = c.style == RopeStyle::kNeox ? (j < h ? j : j - h) : j / 2;
              const int64_t ia = c.style == RopeStyle::kNeox ? i : 2 * i;
              const int64_t ib = c.style == RopeStyle::kNeox ? i + h : 2 * i + 1;
              const double norm = std::hypot(y[ia], y[ib]);
              allow = out.tol_pair * ref::ulp_of(norm, DType::kFloat32);
              if (in_kernel) {
                allow += inv_term * ref::ulp_of(norm * std::fabs(scaling), DType::kFloat32);
              }
            }
            st.add_allowing(got.get(base + j), z[j], c.dtype, base + j, c.dtype, allow);
          }
          if (qc.with_rstd) {
            er.add(static_cast<double>(got_r[tok * heads + hd]), rstd, DType::kFloat32,
                   tok * heads + hd);
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out.q.merge(eq);
    out.k.merge(ek);
    out.rstd.merge(er);
  });

  std::ostringstream os;
  os << describe(qc) << ": q_out max " << out.q.max_ulp << " ulp (tol " << out.tol_q
     << "), k_out max " << out.k.max_ulp << " ulp (tol " << out.tol_k << ")";
  bool ok = out.tol_q >= 0 && out.tol_k >= 0 && out.tol_pair >= 0 && inv_term >= 0 &&
            out.q.max_ulp <= out.tol_q && out.k.max_ulp <= out.tol_k;
  if (qc.with_rstd) {
    os << ", rstd max " << out.rstd.max_ulp << " ulp (tol " << out.tol_rstd << ")";
    ok = ok && out.tol_rstd >= 0 && out.rstd.max_ulp <= out.tol_rstd;
  }
  if (out.pad_written) os << ", " << out.pad_written << " bytes written outside the views";
  if (out.input_changed) os << ", " << out.input_changed << " input bytes changed";
  ok = ok && out.pad_written == 0 && out.input_changed == 0;
  const ref::ErrorStats& worst = out.q.max_ulp >= out.k.max_ulp ? out.q : out.k;
  if (!ok && worst.worst_index >= 0) {
    os << " [worst " << (&worst == &out.q ? "q_out" : "k_out") << " at " << worst.worst_index
       << ": got " << worst.worst_got << " ref " << worst.worst_ref << "]";
  }
  out.passed = ok;
  out.summary = os.str();
  return out;
}

}  // namespace ropenorm::verify
