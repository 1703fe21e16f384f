// Every RoPE input error gets its own message naming the argument, and leaves every output
// untouched. Runs on the CPU: validation happens before any device work (host buffers are
// described as cuda:0 views; nothing dereferences them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/rope_validate.h"
#include "ropenorm/rope.h"

namespace ropenorm {
namespace {

constexpr int64_t T = 4, HQ = 2, HK = 1, D = 8, P = 16;

struct Buffers {
  std::vector<uint16_t> q = std::vector<uint16_t>(64 * T * HQ * D, 0x3F80);
  std::vector<uint16_t> k = std::vector<uint16_t>(64 * T * HK * D, 0x3F80);
  std::vector<uint16_t> q_out = std::vector<uint16_t>(64 * T * HQ * D, 0xFFFF);
  std::vector<uint16_t> k_out = std::vector<uint16_t>(64 * T * HK * D, 0xFFFF);
  std::vector<int32_t> pos = std::vector<int32_t>(64 * T, 1);
  std::vector<int64_t> seq_off = std::vector<int64_t>(64, 0);
  std::vector<uint16_t> cache = std::vector<uint16_t>(64 * P * D, 0x3F80);
  std::vector<uint16_t> cos = std::vector<uint16_t>(64 * P * D, 0x3F80);
  std::vector<uint16_t> sin = std::vector<uint16_t>(64 * P * D, 0x3F80);
  std::vector<float> inv_freq = std::vector<float>(64, 1.0f);

  bool outputs_untouched() const {
    for (uint16_t v : q_out) {
      if (v != 0xFFFF) return false;
    }
    for (uint16_t v : k_out) {
      if (v != 0xFFFF) return false;
    }
    return true;
  }
};

const Device kDev = Device::cuda(0);

TensorRef bf16(void* p, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(p, DType::kBFloat16, sizes, kDev);
}

core::RopeCall valid_call(Buffers& b) {
  core::RopeCall c;
  c.q = bf16(b.q.data(), {T, HQ, D});
  c.k = bf16(b.k.data(), {T, HK, D});
  c.q_out = bf16(b.q_out.data(), {T, HQ, D});
  c.k_out = bf16(b.k_out.data(), {T, HK, D});
  c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {T}, kDev);
  c.cos_sin.kind = CosSinKind::kCache;
  c.cos_sin.cache = bf16(b.cache.data(), {P, D});
  return c;
}

void use_hf(core::RopeCall& c, Buffers& b) {
  c.cos_sin = RopeCosSin{};
  c.cos_sin.kind = CosSinKind::kHfCosSin;
  c.cos_sin.cos = bf16(b.cos.data(), {P, D});
  c.cos_sin.sin = bf16(b.sin.data(), {P, D});
}

void use_gathered(core::RopeCall& c, Buffers& b) {
  c.cos_sin = RopeCosSin{};
  c.cos_sin.kind = CosSinKind::kHfCosSinGathered;
  c.cos_sin.cos = bf16(b.cos.data(), {T, D});
  c.cos_sin.sin = bf16(b.sin.data(), {T, D});
  c.positions = RopePositions{};
}

void use_inv_freq(core::RopeCall& c, Buffers& b) {
  c.cos_sin = RopeCosSin{};
  c.cos_sin.kind = CosSinKind::kInvFreq;
  c.cos_sin.inv_freq = TensorRef::contiguous(b.inv_freq.data(), DType::kFloat32, {D / 2}, kDev);
}

Status call_public(const core::RopeCall& c) {
  return rope(c.q, c.k, c.q_out, c.k_out, c.positions, c.cos_sin, c.params);
}

std::string message_of(const core::RopeCall& c) { return core::validate_rope(c, 0).message(); }

struct BadCase {
  const char* name;
  std::function<void(core::RopeCall&, Buffers&)> mutate;
  const char* arg;  // must appear in the message as "argument '<arg>'"
};

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // rotary_dim
      {"rotary_dim odd", [](auto& c, auto&) { c.params.rotary_dim = 3; }, "rotary_dim"},
      {"rotary_dim > D", [](auto& c, auto&) { c.params.rotary_dim = D + 2; }, "rotary_dim"},
      {"rotary_dim negative", [](auto& c, auto&) { c.params.rotary_dim = -2; }, "rotary_dim"},
      {"style out of range", [](auto& c, auto&) { c.params.style = static_cast<RopeStyle>(5); },
       "style"},
      // q
      {"q int dtype", [](auto& c, auto&) { c.q.dtype = DType::kInt32; }, "q"},
      {"q 2-D",
       [](auto& c, auto& b) {
         c.q = bf16(b.q.data(), {T, HQ * D});
       },
       "q"},
      {"q 5-D",
       [](auto& c, auto& b) {
         c.q = bf16(b.q.data(), {1, 1, T, HQ, D});
       },
       "q"},
      {"q last-dim stride 2",
       [](auto& c, auto& b) {
         c.q = TensorRef(b.q.data(), DType::kBFloat16, {T, HQ, D}, {4 * HQ * D, 2 * D, 2}, kDev);
       },
       "q"},
      {"q null data", [](auto& c, auto&) { c.q.data = nullptr; }, "q"},
      {"q negative stride",
       [](auto& c, auto& b) {
         c.q = TensorRef(b.q.data(), DType::kBFloat16, {T, HQ, D}, {-HQ * D, D, 1}, kDev);
       },
       "q"},
      {"q on the CPU", [](auto& c, auto&) { c.q.device = Device::cpu(); }, "q"},
      // k
      {"k head_dim mismatch",
       [](auto& c, auto& b) {
         c.k = bf16(b.k.data(), {T, HK, D - 2});
       },
       "k"},
      {"k token count mismatch",
       [](auto& c, auto& b) {
         c.k = bf16(b.k.data(), {T - 1, HK, D});
       },
       "k"},
      {"k rank mismatch",
       [](auto& c, auto& b) {
         c.k = bf16(b.k.data(), {1, T, HK, D});
       },
       "k"},
      {"k dtype != q's", [](auto& c, auto&) { c.k.dtype = DType::kFloat16; }, "k"},
      {"k last-dim stride 2",
       [](auto& c, auto& b) {
         c.k = TensorRef(b.k.data(), DType::kBFloat16, {T, HK, D}, {4 * D, 2 * D, 2}, kDev);
       },
       "k"},
      {"k on another GPU", [](auto& c, auto&) { c.k.device = Device::cuda(1); }, "k"},
      // outputs
      {"q_out absent", [](auto& c, auto&) { c.q_out = TensorRef(); }, "q_out"},
      {"q_out shape mismatch",
       [](auto& c, auto& b) {
         c.q_out = bf16(b.q_out.data(), {T, HQ + 1, D});
       },
       "q_out"},
      {"q_out dtype f16", [](auto& c, auto&) { c.q_out.dtype = DType::kFloat16; }, "q_out"},
      {"q_out last-dim stride 2",
       [](auto& c, auto& b) {
         c.q_out =
             TensorRef(b.q_out.data(), DType::kBFloat16, {T, HQ, D}, {4 * HQ * D, 2 * D, 2}, kDev);
       },
       "q_out"},
      {"q_out null data", [](auto& c, auto&) { c.q_out.data = nullptr; }, "q_out"},
      {"q_out aliases its own rows",
       [](auto& c, auto& b) {
         c.q_out = TensorRef(b.q_out.data(), DType::kBFloat16, {T, HQ, D}, {0, D, 1}, kDev);
       },
       "q_out"},
      {"k_out without k", [](auto& c, auto&) { c.k = TensorRef(); }, "k_out"},
      {"k without k_out", [](auto& c, auto&) { c.k_out = TensorRef(); }, "k_out"},
      {"k_out shape mismatch",
       [](auto& c, auto& b) {
         c.k_out = bf16(b.k_out.data(), {T, HK + 1, D});
       },
       "k_out"},
      {"k_out dtype f32", [](auto& c, auto&) { c.k_out.dtype = DType::kFloat32; }, "k_out"},
      {"k_out on the CPU", [](auto& c, auto&) { c.k_out.device = Device::cpu(); }, "k_out"},
      {"q_out on another GPU", [](auto& c, auto&) { c.q_out.device = Device::cuda(2); }, "q_out"},
      // overlaps
      {"q_out partially overlaps q",
       [](auto& c, auto& b) {
         c.q_out = bf16(b.q.data() + 1, {T, HQ, D});
       },
       "q_out"},
      {"q_out same bytes as q, other dtype",
       [](auto& c, auto& b) {
         c.q_out = TensorRef::contiguous(b.q.data(), DType::kFloat16, {T, HQ, D}, kDev);
       },
       "q_out"},
      {"q_out overlaps k",
       [](auto& c, auto& b) {
         c.q_out = bf16(b.k.data(), {T, HQ, D});
       },
       "q_out"},
      {"q_out overlaps the cache",
       [](auto& c, auto& b) {
         c.q_out = bf16(b.cache.data() + 8, {T, HQ, D});
       },
       "q_out"},
      {"q_out overlaps positions",
       [](auto& c, auto& b) {
         c.q_out = bf16(b.pos.data(), {T, HQ, D});
       },
       "q_out"},
      {"k_out overlaps q",
       [](auto& c, auto& b) {
         c.k_out = TensorRef(b.q.data(), DType::kBFloat16, {T, HK, D}, {HQ * D, D, 1}, kDev);
       },
       "k_out"},
      {"k_out overlaps q_out",
       [](auto& c, auto& b) {
         c.k_out =
             TensorRef(b.q_out.data() + D, DType::kBFloat16, {T, HK, D}, {HQ * D, D, 1}, kDev);
       },
       "k_out"},
      // positions
      {"positions f32", [](auto& c, auto&) { c.positions.positions.dtype = DType::kFloat32; },
       "positions"},
      {"positions wrong length",
       [](auto& c, auto& b) {
         c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {T + 1}, kDev);
       },
       "positions"},
      {"positions 2-D for a 3-D q",
       [](auto& c, auto& b) {
         c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {1, T}, kDev);
       },
       "positions"},
      {"positions null data", [](auto& c, auto&) { c.positions.positions.data = nullptr; },
       "positions"},
      {"positions on another GPU",
       [](auto& c, auto&) { c.positions.positions.device = Device::cuda(1); }, "positions"},
      {"positions with an offset", [](auto& c, auto&) { c.positions.offset = 3; }, "offset"},
      {"positions with seq_offsets",
       [](auto& c, auto& b) {
         c.positions.seq_offsets =
             TensorRef::contiguous(b.seq_off.data(), DType::kInt64, {1}, kDev);
       },
       "seq_offsets"},
      {"seq_offsets wrong shape",
       [](auto& c, auto& b) {
         c.positions.positions = TensorRef();
         c.positions.seq_offsets =
             TensorRef::contiguous(b.seq_off.data(), DType::kInt64, {2}, kDev);
       },
       "seq_offsets"},
      {"seq_offsets f32",
       [](auto& c, auto& b) {
         c.positions.positions = TensorRef();
         c.positions.seq_offsets =
             TensorRef::contiguous(b.seq_off.data(), DType::kFloat32, {1}, kDev);
       },
       "seq_offsets"},
      {"arange beyond the table",
       [](auto& c, auto&) {
         c.positions.positions = TensorRef();
         c.positions.offset = P - T + 1;
       },
       "offset"},
      {"arange negative offset",
       [](auto& c, auto&) {
         c.positions.positions = TensorRef();
         c.positions.offset = -1;
       },
       "offset"},
      // cache
      {"cache width != R",
       [](auto& c, auto& b) {
         c.cos_sin.cache = bf16(b.cache.data(), {P, D - 2});
       },
       "cache"},
      {"cache width != partial R", [](auto& c, auto&) { c.params.rotary_dim = 4; }, "cache"},
      {"cache no rows",
       [](auto& c, auto& b) {
         c.cos_sin.cache = bf16(b.cache.data(), {0, D});
       },
       "cache"},
      {"cache 1-D", [](auto& c, auto& b) { c.cos_sin.cache = bf16(b.cache.data(), {P * D}); },
       "cache"},
      {"cache int dtype", [](auto& c, auto&) { c.cos_sin.cache.dtype = DType::kInt32; }, "cache"},
      {"cache last-dim stride 2",
       [](auto& c, auto& b) {
         c.cos_sin.cache = TensorRef(b.cache.data(), DType::kBFloat16, {P, D}, {2 * D, 2}, kDev);
       },
       "cache"},
      {"cache null data", [](auto& c, auto&) { c.cos_sin.cache.data = nullptr; }, "cache"},
      {"cache on another GPU", [](auto& c, auto&) { c.cos_sin.cache.device = Device::cuda(1); },
       "cache"},
      {"cache absent", [](auto& c, auto&) { c.cos_sin.cache = TensorRef(); }, "cache"},
      {"cos given with the cache source",
       [](auto& c, auto& b) {
         c.cos_sin.cos = bf16(b.cos.data(), {P, D});
       },
       "cos"},
      {"attention_scaling with the cache source",
       [](auto& c, auto&) { c.cos_sin.attention_scaling = 1.5f; }, "attention_scaling"},
      {"kind out of range", [](auto& c, auto&) { c.cos_sin.kind = static_cast<CosSinKind>(9); },
       "kind"},
      // Hugging Face tables
      {"hf sin shape != cos",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.cos_sin.sin = bf16(b.sin.data(), {P - 1, D});
       },
       "sin"},
      {"hf cos width != R",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.cos_sin.cos = bf16(b.cos.data(), {P, D / 2});
       },
       "cos"},
      {"hf sin dtype != cos",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.cos_sin.sin.dtype = DType::kFloat16;
       },
       "sin"},
      {"hf sin absent",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.cos_sin.sin = TensorRef();
       },
       "sin"},
      {"hf cache given",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.cos_sin.cache = bf16(b.cache.data(), {P, D});
       },
       "cache"},
      {"hf sin on the CPU",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.cos_sin.sin.device = Device::cpu();
       },
       "sin"},
      {"hf arange beyond the table",
       [](auto& c, auto& b) {
         use_hf(c, b);
         c.positions.positions = TensorRef();
         c.positions.offset = P;
       },
       "offset"},
      // gathered
      {"gathered cos token count",
       [](auto& c, auto& b) {
         use_gathered(c, b);
         c.cos_sin.cos = bf16(b.cos.data(), {T - 1, D});
       },
       "cos"},
      {"gathered cos 3-D for a 3-D q",
       [](auto& c, auto& b) {
         use_gathered(c, b);
         c.cos_sin.cos = bf16(b.cos.data(), {1, T, D});
       },
       "cos"},
      {"gathered sin shape",
       [](auto& c, auto& b) {
         use_gathered(c, b);
         c.cos_sin.sin = bf16(b.sin.data(), {T, D - 2});
       },
       "sin"},
      {"gathered with positions",
       [](auto& c, auto& b) {
         use_gathered(c, b);
         c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {T}, kDev);
       },
       "positions"},
      {"gathered with an offset",
       [](auto& c, auto& b) {
         use_gathered(c, b);
         c.positions.offset = 2;
       },
       "offset"},
      // inv_freq
      {"inv_freq f16",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.inv_freq.dtype = DType::kFloat16;
       },
       "inv_freq"},
      {"inv_freq length != R/2",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.inv_freq =
             TensorRef::contiguous(b.inv_freq.data(), DType::kFloat32, {D / 2 + 1}, kDev);
       },
       "inv_freq"},
      {"inv_freq strided",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.inv_freq = TensorRef(b.inv_freq.data(), DType::kFloat32, {D / 2}, {2}, kDev);
       },
       "inv_freq"},
      {"inv_freq absent",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.inv_freq = TensorRef();
       },
       "inv_freq"},
      {"inv_freq null data",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.inv_freq.data = nullptr;
       },
       "inv_freq"},
      {"attention_scaling NaN",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.attention_scaling = std::numeric_limits<float>::quiet_NaN();
       },
       "attention_scaling"},
      {"attention_scaling inf",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.cos_sin.attention_scaling = std::numeric_limits<float>::infinity();
       },
       "attention_scaling"},
      {"q_out overlaps inv_freq",
       [](auto& c, auto& b) {
         use_inv_freq(c, b);
         c.q_out = bf16(b.inv_freq.data(), {1, 2, 8});
         c.q = bf16(b.q.data(), {1, 2, 8});
         c.k = bf16(b.k.data(), {1, 1, 8});
         c.k_out = bf16(b.k_out.data(), {1, 1, 8});
         c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {1}, kDev);
       },
       "q_out"},
  };
  return cases;
}

TEST(CpuRopeValidation, EachErrorNamesItsArgumentAndWritesNothing) {
  for (const BadCase& bc : bad_cases()) {
    Buffers b;
    auto c = valid_call(b);
    ASSERT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
    bc.mutate(c, b);
    const Status st = core::validate_rope(c, 0);
    ASSERT_FALSE(st.ok()) << bc.name;
    EXPECT_NE(st.message().find(std::string("argument '") + bc.arg + "'"), std::string::npos)
        << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("rope: "), std::string::npos) << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("expected"), std::string::npos) << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("received"), std::string::npos) << bc.name << ": " << st.message();
    const Status pub = call_public(c);
    EXPECT_FALSE(pub.ok()) << bc.name;
    EXPECT_TRUE(b.outputs_untouched()) << bc.name;
  }
}

TEST(CpuRopeValidation, ValidCallsPass) {
  Buffers b;
  auto expect_ok = [](const core::RopeCall& c, const char* what) {
    const Status st = core::validate_rope(c, 0);
    EXPECT_TRUE(st.ok()) << what << ": " << st.message();
  };
  auto c = valid_call(b);
  expect_ok(c, "baseline");
  c.params.style = RopeStyle::kGptj;
  c.params.inverse = true;
  c.params.check_positions = true;
  expect_ok(c, "gptj inverse checked");

  auto ip = valid_call(b);
  ip.q_out = ip.q;
  ip.k_out = ip.k;
  expect_ok(ip, "in place");
  ip.k_out = valid_call(b).k_out;
  expect_ok(ip, "q in place, k out of place");

  auto nk = valid_call(b);
  nk.k = TensorRef();
  nk.k_out = TensorRef();
  expect_ok(nk, "k absent");

  auto ar = valid_call(b);
  ar.positions.positions = TensorRef();
  ar.positions.offset = P - T;  // last rows of the table
  expect_ok(ar, "arange + offset");
  ar.positions.offset = 100;  // seq_offsets: unknown on the host, so not range-checked here
  ar.positions.seq_offsets = TensorRef::contiguous(b.seq_off.data(), DType::kInt32, {1}, kDev);
  expect_ok(ar, "arange + seq_offsets");

  auto hf = valid_call(b);
  use_hf(hf, b);
  expect_ok(hf, "hf table");
  hf.cos_sin.sin = TensorRef(b.sin.data(), DType::kBFloat16, {P, D}, {3 * D, 1}, kDev);
  expect_ok(hf, "hf table, sin strided rows");

  auto g = valid_call(b);
  use_gathered(g, b);
  expect_ok(g, "gathered");

  auto inv = valid_call(b);
  use_inv_freq(inv, b);
  inv.cos_sin.attention_scaling = 1.2f;
  expect_ok(inv, "inv_freq with scaling");
  inv.positions.positions = TensorRef();
  inv.positions.offset = 1 << 20;  // no table: any offset
  expect_ok(inv, "inv_freq arange");

  auto part = valid_call(b);
  part.params.rotary_dim = 4;
  part.cos_sin.cache = bf16(b.cache.data(), {P, 4});
  expect_ok(part, "partial rotary");
}

TEST(CpuRopeValidation, FourDimensionalAndHfLayouts) {
  Buffers b;
  const int64_t B = 2, S = 2;  // B * S == T
  core::RopeCall c = valid_call(b);
  c.q = bf16(b.q.data(), {B, S, HQ, D});
  c.k = bf16(b.k.data(), {B, S, HK, D});
  c.q_out = bf16(b.q_out.data(), {B, S, HQ, D});
  c.k_out = bf16(b.k_out.data(), {B, S, HK, D});
  c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {B, S}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {B * S}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {S, B + 1}, kDev);
  EXPECT_FALSE(core::validate_rope(c, 0).ok());
  // Hugging Face [B, H, S, D] memory as a [B, S, H, D] view.
  c.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {B, S}, kDev);
  c.q = TensorRef(b.q.data(), DType::kBFloat16, {B, S, HQ, D}, {HQ * S * D, D, S * D, 1}, kDev);
  c.q_out =
      TensorRef(b.q_out.data(), DType::kBFloat16, {B, S, HQ, D}, {HQ * S * D, D, S * D, 1}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  // Gathered [B, S, R] cos/sin, broadcast over B by a zero batch stride.
  use_gathered(c, b);
  c.cos_sin.cos = TensorRef(b.cos.data(), DType::kBFloat16, {B, S, D}, {0, D, 1}, kDev);
  c.cos_sin.sin = TensorRef(b.sin.data(), DType::kBFloat16, {B, S, D}, {0, D, 1}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  c.cos_sin.cos = bf16(b.cos.data(), {B * S, D});
  EXPECT_FALSE(core::validate_rope(c, 0).ok());
  // seq_offsets must have B entries.
  core::RopeCall a = valid_call(b);
  a.q = c.q;
  a.q_out = c.q_out;
  a.k = bf16(b.k.data(), {B, S, HK, D});
  a.k_out = bf16(b.k_out.data(), {B, S, HK, D});
  a.positions = RopePositions{};
  a.positions.seq_offsets = TensorRef::contiguous(b.seq_off.data(), DType::kInt64, {B}, kDev);
  EXPECT_TRUE(core::validate_rope(a, 0).ok()) << message_of(a);
  a.positions.seq_offsets = TensorRef::contiguous(b.seq_off.data(), DType::kInt64, {B + 1}, kDev);
  EXPECT_FALSE(core::validate_rope(a, 0).ok());
}

// q and k as views of one packed [T, (Hq + 2 Hk) * D] buffer: their spans interleave, their bytes
// do not; in place (q_out == q, k_out == k) and out of place into another packed buffer pass,
// an output straddling q and k does not.
TEST(CpuRopeValidation, PackedQkvViews) {
  Buffers b;
  const int64_t W = (HQ + 2 * HK) * D;
  std::vector<uint16_t> qkv(T * W, 0x3F80), out(T * W, 0xFFFF);
  core::RopeCall c = valid_call(b);
  c.q = TensorRef(qkv.data(), DType::kBFloat16, {T, HQ, D}, {W, D, 1}, kDev);
  c.k = TensorRef(qkv.data() + HQ * D, DType::kBFloat16, {T, HK, D}, {W, D, 1}, kDev);
  c.q_out = c.q;
  c.k_out = c.k;
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  c.q_out = TensorRef(out.data(), DType::kBFloat16, {T, HQ, D}, {W, D, 1}, kDev);
  c.k_out = TensorRef(out.data() + HQ * D, DType::kBFloat16, {T, HK, D}, {W, D, 1}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  // k_out into the v columns of the input buffer: disjoint bytes, accepted.
  c.k_out = TensorRef(qkv.data() + (HQ + HK) * D, DType::kBFloat16, {T, HK, D}, {W, D, 1}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  // k_out shifted into k's columns by one element: rejected.
  c.k_out = TensorRef(qkv.data() + HQ * D + 1, DType::kBFloat16, {T, HK, D}, {W, D, 1}, kDev);
  Status st = core::validate_rope(c, 0);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("argument 'k_out'"), std::string::npos) << st.message();
  // q_out over q's second head and k's columns: rejected.
  c.k_out = TensorRef(out.data() + HQ * D, DType::kBFloat16, {T, HK, D}, {W, D, 1}, kDev);
  c.q_out = TensorRef(qkv.data() + D, DType::kBFloat16, {T, HQ, D}, {W, D, 1}, kDev);
  st = core::validate_rope(c, 0);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("argument 'q_out'"), std::string::npos) << st.message();
  // k = q (same memory) in place: q's output would overwrite k's input.
  c.q_out = c.q;
  c.k = TensorRef(qkv.data(), DType::kBFloat16, {T, HK, D}, {W, D, 1}, kDev);
  c.k_out = c.k;
  EXPECT_FALSE(core::validate_rope(c, 0).ok());
}

TEST(CpuRopeValidation, ZeroTokensAndZeroHeadsAreValid) {
  Buffers b;
  core::RopeCall c = valid_call(b);
  c.q = bf16(nullptr, {0, HQ, D});
  c.k = bf16(nullptr, {0, HK, D});
  c.q_out = bf16(nullptr, {0, HQ, D});
  c.k_out = bf16(nullptr, {0, HK, D});
  c.positions.positions = TensorRef::contiguous(nullptr, DType::kInt32, {0}, kDev);
  EXPECT_TRUE(core::validate_rope(c, 0).ok()) << message_of(c);
  core::RopeCall h = valid_call(b);
  h.q = bf16(nullptr, {T, 0, D});
  h.q_out = bf16(nullptr, {T, 0, D});
  h.k = TensorRef();
  h.k_out = TensorRef();
  EXPECT_TRUE(core::validate_rope(h, 0).ok()) << message_of(h);
}

TEST(CpuRopeValidation, GeometryIsReported) {
  Buffers b;
  core::RopeCall c = valid_call(b);
  c.params.rotary_dim = 4;
  c.cos_sin.cache = bf16(b.cache.data(), {P, 4});
  core::RopeGeometry g;
  ASSERT_TRUE(core::validate_rope(c, 0, &g).ok()) << message_of(c);
  EXPECT_EQ(g.batch, 1);
  EXPECT_EQ(g.seq, T);
  EXPECT_EQ(g.tokens, T);
  EXPECT_EQ(g.hq, HQ);
  EXPECT_EQ(g.hk, HK);
  EXPECT_EQ(g.head_dim, D);
  EXPECT_EQ(g.rotary_dim, 4);
  EXPECT_EQ(g.table_rows, P);
}

TEST(CpuRopeValidation, CheckedPositionValues) {
  const int64_t ok[] = {0, 5, 15, 3};
  EXPECT_TRUE(core::check_position_values("positions", ok, 4, 4, 16).ok());
  const int64_t high[] = {0, 5, 16, 3};
  Status st = core::check_position_values("positions", high, 4, 2, 16);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("argument 'positions'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("position 16 at token 2 (batch 1, sequence index 0)"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("[0, 16)"), std::string::npos) << st.message();
  const int64_t neg[] = {0, -1, 99, 3};
  st = core::check_position_values("seq_offsets", neg, 4, 4, 16);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("argument 'seq_offsets'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("token 1"), std::string::npos) << st.message();
  // No table (inv_freq): any position >= 0.
  const int64_t big[] = {int64_t{1} << 40, 0};
  EXPECT_TRUE(core::check_position_values("positions", big, 2, 2, 0).ok());
  EXPECT_FALSE(core::check_position_values("positions", neg, 4, 4, 0).ok());
}

TEST(CpuRopeValidation, SpanElements) {
  std::vector<uint16_t> buf(1000);
  EXPECT_EQ(core::span_elements(bf16(buf.data(), {4, 2, 8})), 64);
  EXPECT_EQ(
      core::span_elements(TensorRef(buf.data(), DType::kBFloat16, {4, 2, 8}, {32, 8, 1}, kDev)),
      3 * 32 + 8 + 8);
  EXPECT_EQ(core::span_elements(bf16(buf.data(), {0, 2, 8})), 0);
}

TEST(CpuRopeValidation, KindNames) {
  EXPECT_STREQ(cos_sin_kind_name(CosSinKind::kCache), "cache");
  EXPECT_STREQ(cos_sin_kind_name(CosSinKind::kHfCosSin), "hf_cos_sin");
  EXPECT_STREQ(cos_sin_kind_name(CosSinKind::kHfCosSinGathered), "hf_cos_sin_gathered");
  EXPECT_STREQ(cos_sin_kind_name(CosSinKind::kInvFreq), "inv_freq");
}

}  // namespace
}  // namespace ropenorm
