// Large-shape tier for rope: many tokens, positions up to 2^20 in a cache of 2^20 + 1 rows, and a
// q of more than 2^31 elements, checked against the float64 oracle on sampled tokens.
//
// q and k are a cheap hash of each element's logical index (a value in [-2, 2) rounded to the
// dtype), generated and uploaded in chunks of tokens and recomputed on the host for the tokens
// checked. The cache holds only the rows of positions in use; every other row is NaN, so a read
// of a wrong row shows. Outputs are poisoned before the call and scanned whole for NaN/inf
// afterwards; sampled tokens (first, last, random, those at the largest and smallest positions)
// are compared with ref::rope_rotate_ref under the tolerance table, pass-through channels bit for
// bit.
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
#include "reference/rope_ref.h"
#include "reference/tolerance.h"
#include "ropenorm/rope.h"
#include "ropenorm/rope_cache.h"
#include "verify/device_buffer.h"
#include "verify/parallel.h"

namespace ropenorm {
namespace {

using ref::ErrorStats;
using verify::DeviceBuffer;

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Raw bits of element `index` of a generated tensor in dtype dt: a value in [-2, 2) rounded to dt.
uint32_t gen_bits(uint64_t seed, int64_t index, DType dt) {
  const uint64_t h = splitmix64(seed * 0xD1B54A32D192ED03ull ^ static_cast<uint64_t>(index));
  const double v = 4.0 * (static_cast<double>(h >> 11) * 0x1.0p-53) - 2.0;
  switch (dt) {
    case DType::kBFloat16:
      return ref::double_to_bf16_bits(v);
    case DType::kFloat16:
      return ref::double_to_f16_bits(v);
    default: {
      const float f = ref::double_to_f32(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    }
  }
}

double bits_value(uint32_t b, DType dt) {
  switch (dt) {
    case DType::kBFloat16:
      return ref::bf16_bits_to_double(static_cast<uint16_t>(b));
    case DType::kFloat16:
      return ref::f16_bits_to_double(static_cast<uint16_t>(b));
    default: {
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
  }
}

bool bits_finite(uint32_t b, DType dt) {
  switch (dt) {
    case DType::kBFloat16:
      return (b & 0x7F80u) != 0x7F80u;
    case DType::kFloat16:
      return (b & 0x7C00u) != 0x7C00u;
    default:
      return (b & 0x7F800000u) != 0x7F800000u;
  }
}

void put_bits(unsigned char* dst, uint32_t b, size_t es) { std::memcpy(dst, &b, es); }

uint32_t get_bits(const unsigned char* src, size_t es) {
  uint32_t b = 0;
  std::memcpy(&b, src, es);
  return b;
}

struct LargeRope {
  int64_t tokens = 1, hq = 32, hk = 8, head_dim = 128;
  bool has_k = true;
  DType dtype = DType::kBFloat16;
  int64_t table_rows = (int64_t{1} << 20) + 1;  ///< P; positions in [0, P)
  RopeStyle style = RopeStyle::kNeox;
  double theta = 500000.0;
  uint64_t seed = 1;
  int random_tokens = 64;
};

std::string describe(const LargeRope& c) {
  std::ostringstream os;
  os << "rope " << dtype_name(c.dtype) << " T=" << c.tokens << " Hq=" << c.hq
     << " Hk=" << (c.has_k ? std::to_string(c.hk) : std::string("none")) << " D=" << c.head_dim
     << " " << rope_style_name(c.style) << " cache:f32 P=" << c.table_rows
     << " (q: " << c.tokens * c.hq * c.head_dim << " elements)";
  return os.str();
}

// Generates a [T, H, D] tensor (contiguous) into buf, in chunks of tokens.
void upload_generated(DeviceBuffer& buf, int64_t tokens, int64_t row_elems, DType dt,
                      uint64_t seed) {
  const size_t es = dtype_size(dt);
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 26) / row_elems);
  std::vector<unsigned char> host;
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t nt = std::min(chunk, tokens - t0);
    host.resize(static_cast<size_t>(nt * row_elems) * es);
    verify::parallel_rows(nt, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        for (int64_t e = 0; e < row_elems; ++e) {
          put_bits(host.data() + static_cast<size_t>(i * row_elems + e) * es,
                   gen_bits(seed, (t0 + i) * row_elems + e, dt), es);
        }
      }
    });
    buf.upload(host.data(), host.size(), static_cast<size_t>(t0 * row_elems) * es);
  }
}

int64_t count_non_finite(const DeviceBuffer& buf, int64_t elems, DType dt) {
  const size_t es = dtype_size(dt);
  const int64_t chunk = int64_t{1} << 27;
  std::vector<unsigned char> host;
  int64_t bad = 0;
  for (int64_t e0 = 0; e0 < elems; e0 += chunk) {
    const int64_t cnt = std::min(chunk, elems - e0);
    host.resize(static_cast<size_t>(cnt) * es);
    buf.download(host.data(), host.size(), static_cast<size_t>(e0) * es);
    for (int64_t i = 0; i < cnt; ++i) bad += !bits_finite(get_bits(host.data() + i * es, es), dt);
  }
  return bad;
}

void run_large_rope(const LargeRope& c) {
  SCOPED_TRACE(describe(c));
  const int64_t t = c.tokens, d = c.head_dim, r = d, h = r / 2, p_rows = c.table_rows;
  const size_t es = dtype_size(c.dtype);
  const int64_t hk = c.has_k ? c.hk : 0;

  // Positions: random in [0, P), with P - 1 first and 0 last.
  std::vector<int64_t> pos(static_cast<size_t>(t));
  {
    std::mt19937_64 rng(c.seed + 5);
    std::uniform_int_distribution<int64_t> any(0, p_rows - 1);
    for (auto& p : pos) p = any(rng);
    pos[0] = p_rows - 1;
    if (t >= 2) pos[t - 1] = 0;
  }

  // Cache [P, R] f32: rows of used positions built, the rest NaN.
  RopeConfig cfg;
  cfg.theta = c.theta;
  cfg.rotary_dim = r;
  std::vector<float> cache(static_cast<size_t>(p_rows * r),
                           std::numeric_limits<float>::quiet_NaN());
  {
    const std::set<int64_t> used_set(pos.begin(), pos.end());
    const std::vector<int64_t> used(used_set.begin(), used_set.end());
    std::mutex mu;
    std::string err;
    verify::parallel_rows(static_cast<int64_t>(used.size()), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const Status st =
            build_rope_cache_range(cfg, used[i], 1, DType::kFloat32, cache.data() + used[i] * r);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          err = st.message();
        }
      }
    });
    ASSERT_TRUE(err.empty()) << err;
  }

  const int64_t q_elems = t * c.hq * d, k_elems = t * hk * d;
  DeviceBuffer qb(static_cast<size_t>(q_elems) * es), qob(static_cast<size_t>(q_elems) * es);
  DeviceBuffer kb, kob;
  upload_generated(qb, t, c.hq * d, c.dtype, c.seed);
  qob.poison();
  if (c.has_k) {
    kb = DeviceBuffer(static_cast<size_t>(k_elems) * es);
    kob = DeviceBuffer(static_cast<size_t>(k_elems) * es);
    upload_generated(kb, t, hk * d, c.dtype, c.seed + 1);
    kob.poison();
  }
  DeviceBuffer posb(pos.size() * 8), cacheb(cache.size() * 4);
  posb.upload(pos.data(), pos.size() * 8);
  cacheb.upload(cache.data(), cache.size() * 4);

  const Device dev = Device::cuda(0);
  const TensorRef q(qb.get(), c.dtype, {t, c.hq, d}, {c.hq * d, d, 1}, dev);
  const TensorRef q_out(qob.get(), c.dtype, {t, c.hq, d}, {c.hq * d, d, 1}, dev);
  const TensorRef k =
      c.has_k ? TensorRef(kb.get(), c.dtype, {t, hk, d}, {hk * d, d, 1}, dev) : TensorRef();
  const TensorRef k_out =
      c.has_k ? TensorRef(kob.get(), c.dtype, {t, hk, d}, {hk * d, d, 1}, dev) : TensorRef();
  RopePositions positions;
  positions.positions = TensorRef(posb.get(), DType::kInt64, {t}, {1}, dev);
  RopeCosSin cs;
  cs.kind = CosSinKind::kCache;
  cs.cache = TensorRef(cacheb.get(), DType::kFloat32, {p_rows, r}, {r, 1}, dev);
  RopeParams params;
  params.style = c.style;
  Status st = rope(q, k, q_out, k_out, positions, cs, params);
  if (st.ok()) st = verify::sync_device();
  ASSERT_TRUE(st.ok()) << st.message();

  // Every output element written (no poison left) and finite (no NaN cache row read).
  EXPECT_EQ(count_non_finite(qob, q_elems, c.dtype), 0) << "q_out elements NaN/inf";
  if (c.has_k) {
    EXPECT_EQ(count_non_finite(kob, k_elems, c.dtype), 0) << "k_out elements NaN/inf";
  }

  // Sampled tokens.
  std::set<int64_t> tok_set;
  for (int64_t i = 0; i < std::min<int64_t>(8, t); ++i) {
    tok_set.insert(i);
    tok_set.insert(t - 1 - i);
  }
  {
    std::mt19937_64 rng(c.seed + 77);
    std::uniform_int_distribution<int64_t> any(0, t - 1);
    for (int i = 0; i < c.random_tokens; ++i) tok_set.insert(any(rng));
    // The tokens at the largest positions.
    std::vector<int64_t> order(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + std::min<int64_t>(8, t), order.end(),
                      [&](int64_t a, int64_t b) { return pos[a] > pos[b]; });
    for (int64_t i = 0; i < std::min<int64_t>(8, t); ++i) tok_set.insert(order[i]);
  }
  const std::vector<int64_t> toks(tok_set.begin(), tok_set.end());

  const double tol_q = ref::tolerance_ulp("rope", "q_out", c.dtype);
  const double tol_k = ref::tolerance_ulp("rope", "k_out", c.dtype);
  ASSERT_GE(tol_q, 0);
  ASSERT_GE(tol_k, 0);
  ErrorStats eq, ek;
  int64_t tails = 0;
  std::mutex mu;
  verify::parallel_rows(static_cast<int64_t>(toks.size()), [&](int64_t i0, int64_t i1) {
    ErrorStats lq, lk;
    int64_t ltails = 0;
    std::vector<double> cv(h), sv(h), x(d), y(d);
    std::vector<unsigned char> got;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t tok = toks[i], p = pos[tok];
      for (int64_t j = 0; j < h; ++j) {
        cv[j] = cache[p * r + j];
        sv[j] = cache[p * r + h + j];
      }
      for (int which = 0; which < (c.has_k ? 2 : 1); ++which) {
        const int64_t heads = which == 0 ? c.hq : hk;
        const DeviceBuffer& ob = which == 0 ? qob : kob;
        const uint64_t seed = which == 0 ? c.seed : c.seed + 1;
        ErrorStats& es_ = which == 0 ? lq : lk;
        got.resize(static_cast<size_t>(heads * d) * es);
        ob.download(got.data(), got.size(), static_cast<size_t>(tok * heads * d) * es);
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t base = (tok * heads + hd) * d;
          for (int64_t j = 0; j < d; ++j)
            x[j] = bits_value(gen_bits(seed, base + j, c.dtype), c.dtype);
          ref::rope_rotate_ref(x.data(), y.data(), d, r, c.style, cv.data(), sv.data(), false);
          for (int64_t j = 0; j < d; ++j) {
            const uint32_t gb = get_bits(got.data() + static_cast<size_t>(hd * d + j) * es, es);
            if (j < r) {
              es_.add(bits_value(gb, c.dtype), y[j], c.dtype, base + j);
            } else {
              ltails += gb != gen_bits(seed, base + j, c.dtype);
            }
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    eq.merge(lq);
    ek.merge(lk);
    tails += ltails;
  });

  EXPECT_EQ(eq.count, static_cast<int64_t>(toks.size()) * c.hq * r);
  EXPECT_LE(eq.max_ulp, tol_q) << toks.size() << " tokens: q_out max " << eq.max_ulp
                               << " ulp, worst at " << eq.worst_index << " (token "
                               << eq.worst_index / (c.hq * d) << "): got " << eq.worst_got
                               << " ref " << eq.worst_ref;
  if (c.has_k) {
    EXPECT_EQ(ek.count, static_cast<int64_t>(toks.size()) * hk * r);
    EXPECT_LE(ek.max_ulp, tol_k) << "k_out max " << ek.max_ulp << " ulp, worst at "
                                 << ek.worst_index << " (token " << ek.worst_index / (hk * d)
                                 << "): got " << ek.worst_got << " ref " << ek.worst_ref;
  }
  EXPECT_EQ(tails, 0) << "pass-through channels changed";
}

// T = 65537 tokens, 32 q heads and 8 k heads of 128, positions random up to 2^20, cache of
// 2^20 + 1 rows (f32, 512 MiB). Device memory: q, q_out 537 MB each, k, k_out 134 MB each,
// cache 537 MB: about 1.9 GB.
TEST(LargeRope, ManyTokensPositionsTo2p20) {
  ROPENORM_REQUIRE_GPU();
  for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      LargeRope c;
      c.tokens = 65537;
      c.dtype = dt;
      c.style = style;
      c.seed = dt == DType::kBFloat16 ? 31 : 32;
      run_large_rope(c);
    }
  }
}

// q of 2^31 + 4096 elements (T = 2^19 + 1, 32 heads of 128, bf16: 4.3 GB), k absent. Device
// memory: q, q_out 4.3 GB each, cache 537 MB: about 9.1 GB.
TEST(LargeRope, QMoreThan2p31Elements) {
  ROPENORM_REQUIRE_GPU();
  LargeRope c;
  c.tokens = (int64_t{1} << 19) + 1;
  c.has_k = false;
  c.seed = 33;
  ASSERT_GT(c.tokens * c.hq * c.head_dim, int64_t{1} << 31);
  run_large_rope(c);
}

}  // namespace
}  // namespace ropenorm
