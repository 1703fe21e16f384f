// Large-shape tier for rms_norm and add_rms_norm: tensors of more than 2^31 elements, row strides
// that put element offsets past 2^31, and the widest rows, checked against the float64 oracle.
//
// Inputs of the big tensors are never held whole on the host: every element is a cheap hash of
// its logical index (a value in [-2, 2) rounded to bf16, times a power of two chosen per row), so
// the host uploads them in chunks of rows and recomputes the few rows it checks. Outputs are
// poisoned (all bits set, NaN) before the call; sampled rows (first, last, random, and the rows
// around the 2^31-element boundary) are compared with the oracle under the tolerance table, and
// every element of every output is scanned for NaN/inf (a poisoned element left unwritten).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "gpu_util.h"
#include "reference/host_float.h"
#include "reference/rms_norm_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/rms_norm.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"
#include "verify/rms_norm_case.h"

namespace ropenorm {
namespace {

using ref::ErrorStats;
using verify::DeviceBuffer;

constexpr int64_t k2p31 = int64_t{1} << 31;
constexpr size_t kBf16 = 2;

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element (r, j) of a generated [m, n] matrix, as bf16 bits: a value in [-2, 2) from the hash of
// the logical index, rounded to bf16, then scaled by 2^((r % 9) - 4) (exact in bf16), so rows
// differ in magnitude and a row read from the wrong place cannot pass.
uint16_t gen_bits(uint64_t seed, int64_t r, int64_t n, int64_t j) {
  const uint64_t h = splitmix64(seed * 0xD1B54A32D192ED03ull ^ static_cast<uint64_t>(r * n + j));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  const double v = ref::bf16_bits_to_double(ref::double_to_bf16_bits(4.0 * u - 2.0));
  return ref::double_to_bf16_bits(std::ldexp(v, static_cast<int>(r % 9) - 4));
}

bool bf16_finite(uint16_t b) { return (b & 0x7F80u) != 0x7F80u; }

// The physical placement of a bf16 [m, n] matrix with row pitch `pitch` (elements).
struct Big {
  int64_t m = 0, n = 0, pitch = 0;
  int64_t elems() const { return (m - 1) * pitch + n; }
  size_t bytes() const { return static_cast<size_t>(elems()) * kBf16; }
  size_t row_byte(int64_t r) const { return static_cast<size_t>(r * pitch) * kBf16; }
  TensorRef view(void* p) const {
    return TensorRef(p, DType::kBFloat16, {m, n}, {pitch, 1}, Device::cuda(0));
  }
};

// Fills buf with the generated matrix, uploading chunks of rows (one copy per chunk when the rows
// are contiguous, one per row otherwise). Pad bytes between rows are left as they are.
void upload_generated(DeviceBuffer& buf, const Big& L, uint64_t seed) {
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{1} << 26) / L.n);
  std::vector<uint16_t> host;
  for (int64_t r0 = 0; r0 < L.m; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, L.m - r0);
    host.resize(static_cast<size_t>(rows * L.n));
    verify::parallel_rows(rows, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        for (int64_t j = 0; j < L.n; ++j) host[i * L.n + j] = gen_bits(seed, r0 + i, L.n, j);
      }
    });
    if (L.pitch == L.n) {
      buf.upload(host.data(), host.size() * kBf16, L.row_byte(r0));
    } else {
      for (int64_t i = 0; i < rows; ++i) {
        buf.upload(host.data() + i * L.n, static_cast<size_t>(L.n) * kBf16, L.row_byte(r0 + i));
      }
    }
  }
}

// Number of NaN/inf elements in the rows of a bf16 matrix on the device (downloaded in chunks).
int64_t count_non_finite(const DeviceBuffer& buf, const Big& L) {
  int64_t bad = 0;
  if (L.pitch == L.n) {
    const int64_t chunk = int64_t{1} << 27;
    std::vector<uint16_t> host;
    for (int64_t e0 = 0; e0 < L.m * L.n; e0 += chunk) {
      const int64_t cnt = std::min(chunk, L.m * L.n - e0);
      host.resize(static_cast<size_t>(cnt));
      buf.download(host.data(), host.size() * kBf16, static_cast<size_t>(e0) * kBf16);
      for (uint16_t b : host) bad += !bf16_finite(b);
    }
  } else {
    std::vector<uint16_t> row(static_cast<size_t>(L.n));
    for (int64_t r = 0; r < L.m; ++r) {
      buf.download(row.data(), row.size() * kBf16, L.row_byte(r));
      for (uint16_t b : row) bad += !bf16_finite(b);
    }
  }
  return bad;
}

struct LargeCase {
  int64_t m = 0, n = 0, pitch = 0;  ///< pitch 0: n
  bool fused = false;
  uint64_t seed = 1;
  int random_rows = 48;
  bool check_all_rows = false;  ///< oracle on every row instead of a sample
};

std::string describe(const LargeCase& c) {
  std::ostringstream os;
  os << (c.fused ? "add_rms_norm" : "rms_norm") << " bf16 M=" << c.m << " N=" << c.n
     << " pitch=" << (c.pitch ? c.pitch : c.n) << " (" << c.m * c.n << " elements)";
  return os.str();
}

// Rows compared with the oracle: the first and last 8, random ones, and those around the rows
// holding physical element offsets 2^31 - 1, 2^31 and 2^32 (when the matrix reaches them).
std::vector<int64_t> sample_rows(const LargeCase& c, const Big& L) {
  std::set<int64_t> rows;
  if (c.check_all_rows) {
    for (int64_t r = 0; r < L.m; ++r) rows.insert(r);
  } else {
    for (int64_t r = 0; r < std::min<int64_t>(8, L.m); ++r) {
      rows.insert(r);
      rows.insert(L.m - 1 - r);
    }
    std::mt19937_64 rng(c.seed + 99);
    std::uniform_int_distribution<int64_t> any(0, L.m - 1);
    for (int i = 0; i < c.random_rows; ++i) rows.insert(any(rng));
    for (int64_t edge : {k2p31 - 1, k2p31, 2 * k2p31}) {
      const int64_t r = edge / L.pitch;
      for (int64_t d = -1; d <= 1; ++d) {
        if (r + d >= 0 && r + d < L.m) rows.insert(r + d);
      }
    }
  }
  return std::vector<int64_t>(rows.begin(), rows.end());
}

void run_large(const LargeCase& c) {
  const Big L{c.m, c.n, c.pitch ? c.pitch : c.n};
  const DType bf = DType::kBFloat16;
  SCOPED_TRACE(describe(c));

  // Weight: asymmetric, never all ones.
  std::vector<uint16_t> w_bits(static_cast<size_t>(c.n));
  std::vector<double> w(static_cast<size_t>(c.n));
  for (int64_t j = 0; j < c.n; ++j) {
    w_bits[j] = gen_bits(c.seed + 3, 0, c.n, j);
    w[j] = ref::bf16_bits_to_double(w_bits[j]);
  }

  // Device buffers: inputs generated, outputs poisoned. When the pitch leaves gaps, the inputs'
  // gaps are poisoned too and the outputs' gaps must stay poisoned.
  DeviceBuffer xb(L.bytes()), yb(L.bytes()), wb(w_bits.size() * kBf16);
  DeviceBuffer sb(static_cast<size_t>(c.m) * 4);
  DeviceBuffer rb, rob;
  if (L.pitch != L.n) xb.poison();
  upload_generated(xb, L, c.seed);
  if (c.fused) {
    rb = DeviceBuffer(L.bytes());
    if (L.pitch != L.n) rb.poison();
    upload_generated(rb, L, c.seed + 1);
    rob = DeviceBuffer(L.bytes());
    rob.poison();
  }
  yb.poison();
  sb.poison();
  wb.upload(w_bits.data(), w_bits.size() * kBf16);

  RmsNormParams params;
  params.eps = 1e-6f;
  const TensorRef wt(wb.get(), bf, {c.n}, {1}, Device::cuda(0));
  const TensorRef rstd(sb.get(), DType::kFloat32, {c.m}, {1}, Device::cuda(0));
  Status st = c.fused ? add_rms_norm(L.view(xb.get()), L.view(rb.get()), wt, L.view(yb.get()),
                                     L.view(rob.get()), rstd, params)
                      : rms_norm(L.view(xb.get()), wt, L.view(yb.get()), rstd, params);
  if (st.ok()) st = verify::sync_device();
  ASSERT_TRUE(st.ok()) << st.message();

  // The last element of the last row (the highest offset) was written.
  {
    uint16_t last = 0xFFFF;
    yb.download(&last, kBf16, static_cast<size_t>(L.elems() - 1) * kBf16);
    ASSERT_TRUE(bf16_finite(last)) << "last element of y not written";
  }

  // Every output element written and finite.
  EXPECT_EQ(count_non_finite(yb, L), 0) << "y elements NaN/inf (unwritten or overflowed)";
  if (c.fused) {
    EXPECT_EQ(count_non_finite(rob, L), 0) << "residual_out elements NaN/inf";
  }
  std::vector<float> rstd_host(static_cast<size_t>(c.m));
  sb.download(rstd_host.data(), rstd_host.size() * 4);
  int64_t rstd_bad = 0;
  for (float v : rstd_host) rstd_bad += !std::isfinite(v);
  EXPECT_EQ(rstd_bad, 0) << "rstd entries NaN/inf";

  // Oracle on the sampled rows.
  const std::vector<int64_t> rows = sample_rows(c, L);
  const char* op = c.fused ? "add_rms_norm" : "rms_norm";
  const double tol_y = ref::tolerance_ulp(op, "y", bf, params.rounding);
  const double tol_rstd = ref::tolerance_ulp(op, "rstd", DType::kFloat32, params.rounding);
  const double tol_res = ref::tolerance_ulp(op, "residual_out", bf, params.rounding);
  ASSERT_GE(tol_y, 0);
  ASSERT_GE(tol_rstd, 0);
  if (c.fused) {
    ASSERT_GE(tol_res, 0);
  }
  const size_t probe = L.pitch > L.n ? static_cast<size_t>(std::min<int64_t>(64, L.pitch - L.n))
                                     : 0;  // gap elements after each row that must stay poisoned
  ErrorStats ey, er, es;
  int64_t gap_written = 0;
  std::mutex mu;
  verify::parallel_rows(static_cast<int64_t>(rows.size()), [&](int64_t i0, int64_t i1) {
    ErrorStats ly, lr, ls;
    int64_t lgap = 0;
    std::vector<uint16_t> got(static_cast<size_t>(c.n) + probe), got_res(static_cast<size_t>(c.n));
    std::vector<double> x(c.n), res(c.n), s(c.n), y(c.n);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = rows[i];
      const size_t len = static_cast<size_t>(c.n) + (r + 1 < L.m ? probe : 0);
      yb.download(got.data(), len * kBf16, L.row_byte(r));
      for (size_t g = c.n; g < len; ++g) lgap += got[g] != 0xFFFF;
      for (int64_t j = 0; j < c.n; ++j)
        x[j] = ref::bf16_bits_to_double(gen_bits(c.seed, r, c.n, j));
      const double* norm_in = x.data();
      if (c.fused) {
        rob.download(got_res.data(), got_res.size() * kBf16, L.row_byte(r));
        for (int64_t j = 0; j < c.n; ++j) {
          res[j] = ref::bf16_bits_to_double(gen_bits(c.seed + 1, r, c.n, j));
        }
        ref::add_row_ref(x.data(), res.data(), c.n, bf, s.data());
        for (int64_t j = 0; j < c.n; ++j) {
          ls.add(ref::bf16_bits_to_double(got_res[j]), s[j], bf, r * c.n + j);
        }
        norm_in = s.data();
      }
      double rstd_ref = 0;
      ref::rms_norm_row_ref(norm_in, w.data(), c.n, static_cast<double>(params.eps), 0.0,
                            params.rounding, bf, y.data(), &rstd_ref);
      for (int64_t j = 0; j < c.n; ++j) {
        ly.add(ref::bf16_bits_to_double(got[j]), y[j], bf, r * c.n + j);
      }
      lr.add(rstd_host[r], rstd_ref, DType::kFloat32, r);
    }
    std::lock_guard<std::mutex> lock(mu);
    ey.merge(ly);
    er.merge(lr);
    es.merge(ls);
    gap_written += lgap;
  });

  EXPECT_EQ(ey.count, static_cast<int64_t>(rows.size()) * c.n);
  EXPECT_LE(ey.max_ulp, tol_y) << rows.size() << " rows: y max " << ey.max_ulp << " ulp, worst at "
                               << ey.worst_index << " (row " << ey.worst_index / c.n << "): got "
                               << ey.worst_got << " ref " << ey.worst_ref;
  EXPECT_LE(er.max_ulp, tol_rstd) << "rstd max " << er.max_ulp << " ulp, worst row "
                                  << er.worst_index << ": got " << er.worst_got << " ref "
                                  << er.worst_ref;
  if (c.fused) {
    EXPECT_LE(es.max_ulp, tol_res)
        << "residual_out max " << es.max_ulp << " ulp, worst at " << es.worst_index << ": got "
        << es.worst_got << " ref " << es.worst_ref;
  }
  EXPECT_EQ(gap_written, 0) << "y bytes written in the gaps between rows";
}

// M * N = 2,148,581,400 > 2^31 elements, contiguous: 4.3 GB per tensor (x, y: 8.6 GB).
TEST(LargeRmsNorm, MoreThan2p31Elements) {
  ROPENORM_REQUIRE_GPU();
  LargeCase c;
  c.m = (int64_t{1} << 17) + 3;
  c.n = 16384 + 8;
  ASSERT_GT(c.m * c.n, k2p31);
  c.seed = 11;
  run_large(c);
}

// Row stride 2^20 + 16 elements: (M - 1) * stride = 2,202,042,800 > 2^31, so element offsets
// pass 2^31 while the tensor itself is small (8.6 M elements, every row checked): 4.4 GB per
// buffer (x, y: 8.8 GB).
TEST(LargeRmsNorm, RowStridePast2p31) {
  ROPENORM_REQUIRE_GPU();
  LargeCase c;
  c.m = 2101;
  c.n = 4096;
  c.pitch = (int64_t{1} << 20) + 16;
  ASSERT_GT((c.m - 1) * c.pitch, k2p31);
  c.seed = 12;
  c.check_all_rows = true;
  run_large(c);
}

// Same stride with a width that is not a multiple of any vector width.
TEST(LargeRmsNorm, RowStridePast2p31OddWidth) {
  ROPENORM_REQUIRE_GPU();
  LargeCase c;
  c.m = 2101;
  c.n = 4095;
  c.pitch = (int64_t{1} << 20) + 16;
  ASSERT_GT((c.m - 1) * c.pitch, k2p31);
  c.seed = 13;
  c.check_all_rows = true;
  run_large(c);
}

// Fused add at M * N > 2^31: x, residual, y, residual_out, 4.3 GB each (17.2 GB).
TEST(LargeAddRmsNorm, MoreThan2p31Elements) {
  ROPENORM_REQUIRE_GPU();
  LargeCase c;
  c.m = (int64_t{1} << 17) + 3;
  c.n = 16384 + 8;
  c.fused = true;
  c.seed = 14;
  run_large(c);
}

// Fused add with a row stride past 2^31 (4 buffers of 4.4 GB: 17.6 GB).
TEST(LargeAddRmsNorm, RowStridePast2p31) {
  ROPENORM_REQUIRE_GPU();
  LargeCase c;
  c.m = 2101;
  c.n = 4096;
  c.pitch = (int64_t{1} << 20) + 16;
  c.fused = true;
  c.seed = 15;
  c.check_all_rows = true;
  run_large(c);
}

// 262144-wide rows (M = 3), every element checked, through the shared case runner.
TEST(LargeRmsNorm, WideRows262144) {
  ROPENORM_REQUIRE_GPU();
  uint64_t seed = 20;
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    for (bool fused : {false, true}) {
      verify::RmsNormCase c;
      c.m = 3;
      c.n = 262144;
      c.x_dtype = c.w_dtype = c.y_dtype = c.res_dtype = dt;
      c.fused = fused;
      c.seed = seed++;
      const auto in = verify::make_inputs(c);
      const auto out = verify::run_case(c, in);
      ASSERT_TRUE(out.status.ok()) << out.status.message();
      EXPECT_EQ(out.y.count, c.m * c.n);
      EXPECT_TRUE(out.passed) << out.summary;
      for (int64_t i = 0; i < c.m * c.n; ++i) {
        ASSERT_TRUE(std::isfinite(out.y_out.get(i))) << verify::describe(c) << " y[" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace ropenorm
