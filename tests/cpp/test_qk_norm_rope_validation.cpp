// Every fused QK-norm + RoPE input error gets its own message naming the argument, and leaves
// every output untouched. Runs on the CPU: validation happens before any device work (host
// buffers are described as cuda:0 views; nothing dereferences them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/qk_norm_rope_validate.h"
#include "ropenorm/qk_norm_rope.h"

namespace ropenorm {
namespace {

constexpr int64_t T = 4, HQ = 2, HK = 1, D = 8, P = 16;

struct Buffers {
  std::vector<uint16_t> q = std::vector<uint16_t>(T * HQ * D, 0x3F80);
  std::vector<uint16_t> k = std::vector<uint16_t>(T * HK * D, 0x3F80);
  std::vector<uint16_t> q_out = std::vector<uint16_t>(T * HQ * D, 0xFFFF);
  std::vector<uint16_t> k_out = std::vector<uint16_t>(T * HK * D, 0xFFFF);
  std::vector<float> wq = std::vector<float>(4 * D, 1.0f);
  std::vector<float> wk = std::vector<float>(4 * D, 1.0f);
  std::vector<float> q_rstd = std::vector<float>(4 * T * HQ, -1.0f);
  std::vector<float> k_rstd = std::vector<float>(4 * T * HK, -1.0f);
  std::vector<int32_t> pos = std::vector<int32_t>(T, 1);
  std::vector<uint16_t> cache = std::vector<uint16_t>(P * D, 0x3F80);

  bool outputs_untouched() const {
    for (uint16_t v : q_out) {
      if (v != 0xFFFF) return false;
    }
    for (uint16_t v : k_out) {
      if (v != 0xFFFF) return false;
    }
    for (float v : q_rstd) {
      if (v != -1.0f) return false;
    }
    for (float v : k_rstd) {
      if (v != -1.0f) return false;
    }
    return true;
  }
};

const Device kDev = Device::cuda(0);

TensorRef bf16(void* p, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(p, DType::kBFloat16, sizes, kDev);
}
TensorRef f32(void* p, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(p, DType::kFloat32, sizes, kDev);
}

core::QkNormRopeCall valid_call(Buffers& b) {
  core::QkNormRopeCall c;
  c.rope.q = bf16(b.q.data(), {T, HQ, D});
  c.rope.k = bf16(b.k.data(), {T, HK, D});
  c.rope.q_out = bf16(b.q_out.data(), {T, HQ, D});
  c.rope.k_out = bf16(b.k_out.data(), {T, HK, D});
  c.rope.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {T}, kDev);
  c.rope.cos_sin.kind = CosSinKind::kCache;
  c.rope.cos_sin.cache = bf16(b.cache.data(), {P, D});
  c.wq = f32(b.wq.data(), {D});
  c.wk = f32(b.wk.data(), {D});
  c.q_rstd = f32(b.q_rstd.data(), {T, HQ});
  c.k_rstd = f32(b.k_rstd.data(), {T, HK});
  return c;
}

Status call_public(const core::QkNormRopeCall& c) {
  return qk_norm_rope(c.rope.q, c.rope.k, c.wq, c.wk, c.rope.q_out, c.rope.k_out, c.q_rstd,
                      c.k_rstd, c.rope.positions, c.rope.cos_sin, c.rope.params, c.norm);
}

std::string message_of(const core::QkNormRopeCall& c) {
  return core::validate_qk_norm_rope(c, 0).message();
}

struct BadCase {
  const char* name;
  std::function<void(core::QkNormRopeCall&, Buffers&)> mutate;
  const char* arg;  // must appear in the message as "argument '<arg>'"
};

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // The RoPE part (validate_rope's checks, re-labelled).
      {"k absent", [](auto& c, auto&) { c.rope.k = TensorRef(); }, "k"},
      {"rotary_dim odd", [](auto& c, auto&) { c.rope.params.rotary_dim = 3; }, "rotary_dim"},
      {"q int dtype", [](auto& c, auto&) { c.rope.q.dtype = DType::kInt32; }, "q"},
      {"positions wrong length",
       [](auto& c, auto& b) {
         c.rope.positions.positions =
             TensorRef::contiguous(b.pos.data(), DType::kInt32, {T - 1}, kDev);
       },
       "positions"},
      // head_dim the fused kernel cannot hold.
      {"head_dim 514",
       [](auto& c, auto& b) {
         static std::vector<uint16_t> big(3 * 514, 0x3F80);
         static std::vector<uint16_t> big_out(3 * 514, 0xFFFF);
         static std::vector<uint16_t> big_k(514, 0x3F80);
         static std::vector<uint16_t> big_k_out(514, 0xFFFF);
         static std::vector<uint16_t> big_cache(514, 0x3F80);
         c.rope.q = bf16(big.data(), {1, 3, 514});
         c.rope.q_out = bf16(big_out.data(), {1, 3, 514});
         c.rope.k = bf16(big_k.data(), {1, 1, 514});
         c.rope.k_out = bf16(big_k_out.data(), {1, 1, 514});
         c.rope.cos_sin.cache = bf16(big_cache.data(), {1, 514});
         c.rope.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {1}, kDev);
       },
       "q"},
      // Weights.
      {"wq absent", [](auto& c, auto&) { c.wq = TensorRef(); }, "wq"},
      {"wk absent", [](auto& c, auto&) { c.wk = TensorRef(); }, "wk"},
      {"wq 2-D",
       [](auto& c, auto& b) {
         c.wq = f32(b.wq.data(), {1, D});
       },
       "wq"},
      {"wk 2-D",
       [](auto& c, auto& b) {
         c.wk = f32(b.wk.data(), {2, D});
       },
       "wk"},
      {"wq wrong length", [](auto& c, auto& b) { c.wq = f32(b.wq.data(), {D + 2}); }, "wq"},
      {"wk wrong length", [](auto& c, auto& b) { c.wk = f32(b.wk.data(), {D - 2}); }, "wk"},
      {"wq and wk lengths differ", [](auto& c, auto& b) { c.wk = f32(b.wk.data(), {2 * D}); },
       "wk"},
      {"wq int dtype", [](auto& c, auto&) { c.wq.dtype = DType::kInt32; }, "wq"},
      {"wk int64 dtype", [](auto& c, auto&) { c.wk.dtype = DType::kInt64; }, "wk"},
      {"wq strided",
       [](auto& c, auto& b) { c.wq = TensorRef(b.wq.data(), DType::kFloat32, {D}, {2}, kDev); },
       "wq"},
      {"wk null data", [](auto& c, auto&) { c.wk.data = nullptr; }, "wk"},
      {"wq on the CPU", [](auto& c, auto&) { c.wq.device = Device::cpu(); }, "wq"},
      {"wk on another GPU", [](auto& c, auto&) { c.wk.device = Device::cuda(1); }, "wk"},
      // eps and offset.
      {"eps zero", [](auto& c, auto&) { c.norm.eps = 0.0f; }, "eps"},
      {"eps too large", [](auto& c, auto&) { c.norm.eps = 0.5f; }, "eps"},
      {"eps NaN", [](auto& c, auto&) { c.norm.eps = std::numeric_limits<float>::quiet_NaN(); },
       "eps"},
      {"weight_offset inf",
       [](auto& c, auto&) { c.norm.weight_offset = std::numeric_limits<float>::infinity(); },
       "weight_offset"},
      {"weight_offset NaN",
       [](auto& c, auto&) { c.norm.weight_offset = std::numeric_limits<float>::quiet_NaN(); },
       "weight_offset"},
      // rstd outputs.
      {"q_rstd bf16", [](auto& c, auto&) { c.q_rstd.dtype = DType::kBFloat16; }, "q_rstd"},
      {"k_rstd f16", [](auto& c, auto&) { c.k_rstd.dtype = DType::kFloat16; }, "k_rstd"},
      {"q_rstd wrong heads",
       [](auto& c, auto& b) {
         c.q_rstd = f32(b.q_rstd.data(), {T, HK});
       },
       "q_rstd"},
      {"k_rstd wrong tokens",
       [](auto& c, auto& b) {
         c.k_rstd = f32(b.k_rstd.data(), {T + 1, HK});
       },
       "k_rstd"},
      {"q_rstd flat", [](auto& c, auto& b) { c.q_rstd = f32(b.q_rstd.data(), {T * HQ}); },
       "q_rstd"},
      {"q_rstd strided",
       [](auto& c, auto& b) {
         c.q_rstd = TensorRef(b.q_rstd.data(), DType::kFloat32, {T, HQ}, {2 * HQ, 1}, kDev);
       },
       "q_rstd"},
      {"q_rstd transposed",
       [](auto& c, auto& b) {
         c.q_rstd = TensorRef(b.q_rstd.data(), DType::kFloat32, {T, HQ}, {1, T}, kDev);
       },
       "q_rstd"},
      {"k_rstd null data", [](auto& c, auto&) { c.k_rstd.data = nullptr; }, "k_rstd"},
      {"q_rstd on the CPU", [](auto& c, auto&) { c.q_rstd.device = Device::cpu(); }, "q_rstd"},
      {"k_rstd aliases q_rstd",
       [](auto& c, auto& b) {
         c.k_rstd = f32(b.q_rstd.data(), {T, HK});
       },
       "k_rstd"},
      {"q_rstd over wq",
       [](auto& c, auto& b) {
         c.q_rstd = f32(b.wq.data(), {T, HQ});
       },
       "q_rstd"},
      {"k_rstd over wk",
       [](auto& c, auto& b) {
         c.k_rstd = f32(b.wk.data(), {T, HK});
       },
       "k_rstd"},
      {"q_rstd over q_out",
       [](auto& c, auto& b) {
         c.q_rstd = f32(b.q_out.data(), {T, HQ});
       },
       "q_rstd"},
      {"k_rstd over q",
       [](auto& c, auto& b) {
         c.k_rstd = f32(b.q.data(), {T, HK});
       },
       "k_rstd"},
      // Outputs over the weights.
      {"q_out over wq",
       [](auto& c, auto& b) {
         c.rope.q_out = bf16(b.wq.data(), {T, HQ, D});
       },
       "q_out"},
      {"k_out over wk",
       [](auto& c, auto& b) {
         c.rope.k_out = bf16(b.wk.data(), {T, HK, D});
       },
       "k_out"},
  };
  return cases;
}

TEST(CpuQkNormRopeValidation, EachErrorNamesItsArgumentAndWritesNothing) {
  for (const BadCase& bc : bad_cases()) {
    Buffers b;
    auto c = valid_call(b);
    ASSERT_TRUE(core::validate_qk_norm_rope(c, 0).ok()) << message_of(c);
    bc.mutate(c, b);
    const Status st = core::validate_qk_norm_rope(c, 0);
    ASSERT_FALSE(st.ok()) << bc.name;
    EXPECT_NE(st.message().find(std::string("argument '") + bc.arg + "'"), std::string::npos)
        << bc.name << ": " << st.message();
    EXPECT_EQ(st.message().rfind("qk_norm_rope: ", 0), 0u) << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("expected"), std::string::npos) << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("received"), std::string::npos) << bc.name << ": " << st.message();
    const Status pub = call_public(c);
    EXPECT_FALSE(pub.ok()) << bc.name;
    EXPECT_TRUE(b.outputs_untouched()) << bc.name;
  }
}

TEST(CpuQkNormRopeValidation, ValidCallsPass) {
  Buffers b;
  auto expect_ok = [](const core::QkNormRopeCall& c, const char* what) {
    const Status st = core::validate_qk_norm_rope(c, 0);
    EXPECT_TRUE(st.ok()) << what << ": " << st.message();
  };
  auto c = valid_call(b);
  expect_ok(c, "baseline");
  c.q_rstd = TensorRef();
  c.k_rstd = TensorRef();
  expect_ok(c, "no rstd");
  c.wq.dtype = DType::kBFloat16;
  c.wk.dtype = DType::kFloat16;
  c.norm.eps = 1e-12f;
  c.norm.weight_offset = 1.0f;
  expect_ok(c, "mixed weight dtypes, Gemma offset, smallest eps");
  c.norm.eps = 1e-2f;
  expect_ok(c, "largest eps");

  auto ip = valid_call(b);
  ip.rope.q_out = ip.rope.q;
  ip.rope.k_out = ip.rope.k;
  expect_ok(ip, "in place");

  // Packed QKV views: q and k in one [T, (HQ + 2 HK) D] buffer, outputs in place.
  std::vector<uint16_t> qkv(T * (HQ + 2 * HK) * D, 0x3F80);
  auto pk = valid_call(b);
  const int64_t w = (HQ + 2 * HK) * D;
  pk.rope.q = TensorRef(qkv.data(), DType::kBFloat16, {T, HQ, D}, {w, D, 1}, kDev);
  pk.rope.k = TensorRef(qkv.data() + HQ * D, DType::kBFloat16, {T, HK, D}, {w, D, 1}, kDev);
  pk.rope.q_out = pk.rope.q;
  pk.rope.k_out = pk.rope.k;
  expect_ok(pk, "packed QKV in place");

  // 4-D q with rstd [B, S, H].
  auto four = valid_call(b);
  four.rope.q = bf16(b.q.data(), {2, T / 2, HQ, D});
  four.rope.k = bf16(b.k.data(), {2, T / 2, HK, D});
  four.rope.q_out = bf16(b.q_out.data(), {2, T / 2, HQ, D});
  four.rope.k_out = bf16(b.k_out.data(), {2, T / 2, HK, D});
  four.q_rstd = f32(b.q_rstd.data(), {2, T / 2, HQ});
  four.k_rstd = f32(b.k_rstd.data(), {2, T / 2, HK});
  expect_ok(four, "4-D");
}

TEST(CpuQkNormRopeValidation, GeometryIsReported) {
  Buffers b;
  const auto c = valid_call(b);
  core::RopeGeometry g;
  ASSERT_TRUE(core::validate_qk_norm_rope(c, -1, &g).ok());
  EXPECT_EQ(g.tokens, T);
  EXPECT_EQ(g.hq, HQ);
  EXPECT_EQ(g.hk, HK);
  EXPECT_EQ(g.head_dim, D);
  EXPECT_EQ(g.rotary_dim, D);
}

}  // namespace
}  // namespace ropenorm
