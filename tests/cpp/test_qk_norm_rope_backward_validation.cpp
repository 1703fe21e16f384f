// Every fused QK-norm + RoPE backward input error gets its own message naming the argument, and
// leaves every output untouched; the workspace query and the launch plan. Runs on the CPU:
// validation happens before any device work (host buffers are described as cuda:0 views;
// nothing dereferences them).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/qk_norm_rope_backward_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "lean_facts.h"
#include "ropenorm/qk_norm_rope_backward.h"

namespace ropenorm {
namespace {

constexpr int64_t T = 4, HQ = 2, HK = 1, D = 8, P = 16;
constexpr int kSms = 132;

size_t ws_floats() { return core::qk_norm_rope_backward_workspace_bytes(T, HQ, HK, D, kSms) / 4; }

struct Buffers {
  std::vector<uint16_t> q = std::vector<uint16_t>(T * HQ * D, 0x3F80);
  std::vector<uint16_t> k = std::vector<uint16_t>(T * HK * D, 0x3F80);
  std::vector<uint16_t> dq_out = std::vector<uint16_t>(T * HQ * D, 0x3F80);
  std::vector<uint16_t> dk_out = std::vector<uint16_t>(T * HK * D, 0x3F80);
  std::vector<uint16_t> dq = std::vector<uint16_t>(T * HQ * D, 0xFFFF);
  std::vector<uint16_t> dk = std::vector<uint16_t>(T * HK * D, 0xFFFF);
  std::vector<float> wq = std::vector<float>(4 * D, 1.0f);
  std::vector<float> wk = std::vector<float>(4 * D, 1.0f);
  std::vector<float> dwq = std::vector<float>(4 * D, -1.0f);
  std::vector<float> dwk = std::vector<float>(4 * D, -1.0f);
  std::vector<float> ws = std::vector<float>(4 * ws_floats(), -1.0f);
  std::vector<float> q_rstd = std::vector<float>(4 * T * HQ, 1.0f);
  std::vector<float> k_rstd = std::vector<float>(4 * T * HK, 1.0f);
  std::vector<int32_t> pos = std::vector<int32_t>(T, 1);
  std::vector<uint16_t> cache = std::vector<uint16_t>(P * D, 0x3F80);

  bool outputs_untouched() const {
    for (const auto* v : {&dq, &dk}) {
      for (uint16_t e : *v) {
        if (e != 0xFFFF) return false;
      }
    }
    for (const auto* v : {&dwq, &dwk, &ws}) {
      for (float e : *v) {
        if (e != -1.0f) return false;
      }
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

core::QkNormRopeBackwardCall valid_call(Buffers& b) {
  core::QkNormRopeBackwardCall c;
  core::RopeCall& r = c.fwd.rope;
  r.q = bf16(b.q.data(), {T, HQ, D});
  r.k = bf16(b.k.data(), {T, HK, D});
  r.q_out = bf16(b.dq.data(), {T, HQ, D});
  r.k_out = bf16(b.dk.data(), {T, HK, D});
  r.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {T}, kDev);
  r.cos_sin.kind = CosSinKind::kCache;
  r.cos_sin.cache = bf16(b.cache.data(), {P, D});
  c.fwd.wq = f32(b.wq.data(), {D});
  c.fwd.wk = f32(b.wk.data(), {D});
  c.fwd.q_rstd = f32(b.q_rstd.data(), {T, HQ});
  c.fwd.k_rstd = f32(b.k_rstd.data(), {T, HK});
  c.dq_out = bf16(b.dq_out.data(), {T, HQ, D});
  c.dk_out = bf16(b.dk_out.data(), {T, HK, D});
  c.dwq = f32(b.dwq.data(), {D});
  c.dwk = f32(b.dwk.data(), {D});
  c.workspace = f32(b.ws.data(), {static_cast<int64_t>(ws_floats())});
  return c;
}

Status validate(const core::QkNormRopeBackwardCall& c) {
  return core::validate_qk_norm_rope_backward(c, 0, kSms);
}

Status call_public(const core::QkNormRopeBackwardCall& c) {
  const core::RopeCall& r = c.fwd.rope;
  return qk_norm_rope_backward(c.dq_out, c.dk_out, r.q, r.k, c.fwd.wq, c.fwd.wk, c.fwd.q_rstd,
                               c.fwd.k_rstd, r.q_out, r.k_out, c.dwq, c.dwk, c.workspace,
                               r.positions, r.cos_sin, r.params, c.fwd.norm);
}

struct BadCase {
  const char* name;
  std::function<void(core::QkNormRopeBackwardCall&, Buffers&)> mutate;
  const char* arg;  // must appear in the message as "argument '<arg>'"
};

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // The forward's checks, re-labelled.
      {"inverse set", [](auto& c, auto&) { c.fwd.rope.params.inverse = true; }, "inverse"},
      {"k absent", [](auto& c, auto&) { c.fwd.rope.k = TensorRef(); }, "k"},
      {"q absent", [](auto& c, auto&) { c.fwd.rope.q = TensorRef(); }, "q"},
      {"rotary_dim odd", [](auto& c, auto&) { c.fwd.rope.params.rotary_dim = 3; }, "rotary_dim"},
      {"q int dtype", [](auto& c, auto&) { c.fwd.rope.q.dtype = DType::kInt32; }, "q"},
      {"positions wrong length",
       [](auto& c, auto& b) {
         c.fwd.rope.positions.positions =
             TensorRef::contiguous(b.pos.data(), DType::kInt32, {T - 1}, kDev);
       },
       "positions"},
      {"cache wrong width",
       [](auto& c, auto& b) {
         c.fwd.rope.cos_sin.cache = bf16(b.cache.data(), {P, D / 2});
       },
       "cache"},
      {"wq absent", [](auto& c, auto&) { c.fwd.wq = TensorRef(); }, "wq"},
      {"wk wrong length", [](auto& c, auto& b) { c.fwd.wk = f32(b.wk.data(), {D - 2}); }, "wk"},
      {"eps zero", [](auto& c, auto&) { c.fwd.norm.eps = 0.0f; }, "eps"},
      {"eps too large", [](auto& c, auto&) { c.fwd.norm.eps = 0.5f; }, "eps"},
      {"weight_offset NaN",
       [](auto& c, auto&) { c.fwd.norm.weight_offset = std::numeric_limits<float>::quiet_NaN(); },
       "weight_offset"},
      {"q_rstd bf16", [](auto& c, auto&) { c.fwd.q_rstd.dtype = DType::kBFloat16; }, "q_rstd"},
      {"k_rstd wrong heads",
       [](auto& c, auto& b) {
         c.fwd.k_rstd = f32(b.k_rstd.data(), {T, HQ});
       },
       "k_rstd"},
      // Results dq / dk.
      {"dq absent", [](auto& c, auto&) { c.fwd.rope.q_out = TensorRef(); }, "dq"},
      {"dk absent", [](auto& c, auto&) { c.fwd.rope.k_out = TensorRef(); }, "dk"},
      {"dq wrong shape",
       [](auto& c, auto& b) {
         c.fwd.rope.q_out = bf16(b.dq.data(), {T, HK, D});
       },
       "dq"},
      {"dk f32", [](auto& c, auto&) { c.fwd.rope.k_out.dtype = DType::kFloat32; }, "dk"},
      {"dq is q", [](auto& c, auto&) { c.fwd.rope.q_out = c.fwd.rope.q; }, "dq"},
      {"dk is k", [](auto& c, auto&) { c.fwd.rope.k_out = c.fwd.rope.k; }, "dk"},
      {"dq over k",
       [](auto& c, auto& b) {
         c.fwd.rope.q_out = bf16(b.k.data(), {T / 2, HQ / 2, D});
       },
       "dq"},
      {"dq over wq",
       [](auto& c, auto& b) {
         c.fwd.rope.q_out = bf16(b.wq.data(), {T, HQ, D});
       },
       "dq"},
      {"dk over dq",
       [](auto& c, auto& b) {
         c.fwd.rope.k_out = bf16(b.dq.data() + 1, {T, HK, D});
       },
       "dk"},
      // Incoming gradients.
      {"dq_out absent", [](auto& c, auto&) { c.dq_out = TensorRef(); }, "dq_out"},
      {"dk_out absent", [](auto& c, auto&) { c.dk_out = TensorRef(); }, "dk_out"},
      {"dq_out f16", [](auto& c, auto&) { c.dq_out.dtype = DType::kFloat16; }, "dq_out"},
      {"dk_out wrong heads",
       [](auto& c, auto& b) {
         c.dk_out = bf16(b.dk_out.data(), {T, 2, D});
       },
       "dk_out"},
      {"dq_out wrong tokens",
       [](auto& c, auto& b) {
         c.dq_out = bf16(b.dq_out.data(), {T - 1, HQ, D});
       },
       "dq_out"},
      {"dq_out strided last dim",
       [](auto& c, auto& b) {
         c.dq_out =
             TensorRef(b.dq_out.data(), DType::kBFloat16, {T, HQ, D / 2}, {HQ * D, D, 2}, kDev);
       },
       "dq_out"},
      {"dk_out null data", [](auto& c, auto&) { c.dk_out.data = nullptr; }, "dk_out"},
      {"dq_out on the CPU", [](auto& c, auto&) { c.dq_out.device = Device::cpu(); }, "dq_out"},
      {"dq partly over dq_out",
       [](auto& c, auto& b) {
         c.fwd.rope.q_out = bf16(b.dq_out.data() + D, {T, HQ, D});
       },
       "dq"},
      {"dk over dq_out",
       [](auto& c, auto& b) {
         c.fwd.rope.k_out = bf16(b.dq_out.data(), {T, HK, D});
       },
       "dk"},
      {"dk_out under dq",
       [](auto& c, auto& b) {
         c.dk_out = bf16(b.dq.data(), {T, HK, D});
       },
       "dq"},
      // Weight gradients.
      {"dwq wrong dtype", [](auto& c, auto&) { c.dwq.dtype = DType::kBFloat16; }, "dwq"},
      {"dwk wrong length", [](auto& c, auto& b) { c.dwk = f32(b.dwk.data(), {D + 2}); }, "dwk"},
      {"dwq 2-D",
       [](auto& c, auto& b) {
         c.dwq = f32(b.dwq.data(), {1, D});
       },
       "dwq"},
      {"dwk strided",
       [](auto& c, auto& b) { c.dwk = TensorRef(b.dwk.data(), DType::kFloat32, {D}, {2}, kDev); },
       "dwk"},
      {"dwq null data", [](auto& c, auto&) { c.dwq.data = nullptr; }, "dwq"},
      {"dwk on another GPU", [](auto& c, auto&) { c.dwk.device = Device::cuda(1); }, "dwk"},
      {"dwq over wq", [](auto& c, auto& b) { c.dwq = f32(b.wq.data(), {D}); }, "dwq"},
      {"dwk over dwq", [](auto& c, auto& b) { c.dwk = f32(b.dwq.data() + 1, {D}); }, "dwk"},
      {"dwq over q_rstd", [](auto& c, auto& b) { c.dwq = f32(b.q_rstd.data(), {D}); }, "dwq"},
      // Workspace.
      {"workspace absent", [](auto& c, auto&) { c.workspace = TensorRef(); }, "workspace"},
      {"workspace too small",
       [](auto& c, auto& b) {
         c.workspace = f32(b.ws.data(), {static_cast<int64_t>(ws_floats()) - 1});
       },
       "workspace"},
      {"workspace bf16", [](auto& c, auto&) { c.workspace.dtype = DType::kBFloat16; }, "workspace"},
      {"workspace strided",
       [](auto& c, auto& b) {
         c.workspace = TensorRef(b.ws.data(), DType::kFloat32, {static_cast<int64_t>(ws_floats())},
                                 {2}, kDev);
       },
       "workspace"},
      {"workspace null data", [](auto& c, auto&) { c.workspace.data = nullptr; }, "workspace"},
      {"workspace on the CPU", [](auto& c, auto&) { c.workspace.device = Device::cpu(); },
       "workspace"},
      {"workspace over dwq",
       [](auto& c, auto& b) {
         c.dwq = f32(b.ws.data() + ws_floats(), {D});
         c.workspace = f32(b.ws.data(), {static_cast<int64_t>(ws_floats()) + 1});
       },
       "workspace"},
      {"workspace over dq_out",
       [](auto& c, auto&) {
         c.workspace = f32(c.dq_out.data, {static_cast<int64_t>(ws_floats())});
       },
       "workspace"},
  };
  return cases;
}

TEST(CpuQkNormRopeBackwardValidation, EachErrorNamesItsArgumentAndWritesNothing) {
  for (const BadCase& bc : bad_cases()) {
    Buffers b;
    auto c = valid_call(b);
    ASSERT_TRUE(validate(c).ok()) << validate(c).message();
    bc.mutate(c, b);
    const Status st = validate(c);
    ASSERT_FALSE(st.ok()) << bc.name;
    EXPECT_NE(st.message().find(std::string("argument '") + bc.arg + "'"), std::string::npos)
        << bc.name << ": " << st.message();
    EXPECT_EQ(st.message().rfind("qk_norm_rope_backward: ", 0), 0u)
        << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("expected"), std::string::npos) << bc.name << ": " << st.message();
    EXPECT_NE(st.message().find("received"), std::string::npos) << bc.name << ": " << st.message();
    EXPECT_EQ(st.message().find("'q_out'"), std::string::npos) << bc.name << ": " << st.message();
    EXPECT_EQ(st.message().find("'k_out'"), std::string::npos) << bc.name << ": " << st.message();
    const Status pub = call_public(c);
    EXPECT_FALSE(pub.ok()) << bc.name;
    EXPECT_TRUE(b.outputs_untouched()) << bc.name;
  }
}

TEST(CpuQkNormRopeBackwardValidation, ValidCallsPass) {
  Buffers b;
  auto expect_ok = [](const core::QkNormRopeBackwardCall& c, const char* what) {
    const Status st = validate(c);
    EXPECT_TRUE(st.ok()) << what << ": " << st.message();
  };
  auto c = valid_call(b);
  expect_ok(c, "baseline");
  c.fwd.q_rstd = TensorRef();
  c.fwd.k_rstd = TensorRef();
  expect_ok(c, "rstd recomputed");
  c.dwq = TensorRef();
  expect_ok(c, "no dwq");
  c.dwk = TensorRef();
  c.workspace = TensorRef();
  expect_ok(c, "no dw, no workspace");

  auto mixed = valid_call(b);
  mixed.fwd.wq.dtype = DType::kBFloat16;
  mixed.dwq.dtype = DType::kBFloat16;
  mixed.fwd.wk.dtype = DType::kFloat16;
  mixed.dwk.dtype = DType::kFloat16;
  mixed.fwd.norm.weight_offset = 1.0f;
  expect_ok(mixed, "weight dtypes differ from q's, Gemma offset");

  auto ip = valid_call(b);
  ip.fwd.rope.q_out = ip.dq_out;
  ip.fwd.rope.k_out = ip.dk_out;
  expect_ok(ip, "in place on the incoming gradients");

  // Packed views: q, k of one QKV buffer; dq_out, dk_out of one gradient buffer; in place.
  const int64_t w = (HQ + 2 * HK) * D;
  std::vector<uint16_t> qkv(T * w, 0x3F80), dqkv(T * w, 0x3F80);
  auto pk = valid_call(b);
  pk.fwd.rope.q = TensorRef(qkv.data(), DType::kBFloat16, {T, HQ, D}, {w, D, 1}, kDev);
  pk.fwd.rope.k = TensorRef(qkv.data() + HQ * D, DType::kBFloat16, {T, HK, D}, {w, D, 1}, kDev);
  pk.dq_out = TensorRef(dqkv.data(), DType::kBFloat16, {T, HQ, D}, {w, D, 1}, kDev);
  pk.dk_out = TensorRef(dqkv.data() + HQ * D, DType::kBFloat16, {T, HK, D}, {w, D, 1}, kDev);
  pk.fwd.rope.q_out = pk.dq_out;
  pk.fwd.rope.k_out = pk.dk_out;
  expect_ok(pk, "packed QKV, in place");

  // Zero tokens: no workspace needed even with dw wanted.
  auto zero = valid_call(b);
  for (TensorRef* t : {&zero.fwd.rope.q, &zero.fwd.rope.k, &zero.fwd.rope.q_out,
                       &zero.fwd.rope.k_out, &zero.dq_out, &zero.dk_out}) {
    t->sizes[0] = 0;
  }
  zero.fwd.q_rstd = TensorRef();
  zero.fwd.k_rstd = TensorRef();
  zero.fwd.rope.positions.positions = TensorRef::contiguous(b.pos.data(), DType::kInt32, {0}, kDev);
  zero.workspace = TensorRef();
  expect_ok(zero, "zero tokens");
}

TEST(CpuQkNormRopeBackwardPlan, WorkspaceQueryAndGrid) {
  // [2, grid, D] fp32 with grid = min(T, 4 blocks per SM, 4096).
  EXPECT_EQ(core::qk_norm_rope_backward_workspace_bytes(1, 32, 8, 128, 132), 2u * 1 * 128 * 4);
  EXPECT_EQ(core::qk_norm_rope_backward_workspace_bytes(32768, 32, 8, 128, 132),
            2u * 528 * 128 * 4);
  EXPECT_EQ(core::qk_norm_rope_backward_workspace_bytes(32768, 32, 8, 128, 0), 2u * 4096 * 128 * 4);
  EXPECT_EQ(core::qk_norm_rope_backward_workspace_bytes(0, 32, 8, 128, 132), 0u);
  EXPECT_EQ(core::qk_norm_rope_backward_workspace_bytes(5, 0, 0, 128, 132), 0u);
  EXPECT_EQ(core::qk_norm_rope_backward_grid(100000, 132, 2), 264);
  EXPECT_EQ(core::qk_norm_rope_backward_grid(100000, 132, 9), 528);  // capped at 4 per SM
  EXPECT_EQ(core::qk_norm_rope_backward_grid(100000, 132, 0), 132);  // at least 1 per SM
  // The public query on a machine without a GPU gives the bound for the largest grid; with a
  // GPU, the device's. Either way it bounds what the launch needs.
  const size_t pub = qk_norm_rope_backward_workspace_size(32768, 32, 8, 128);
  EXPECT_GE(pub, 2u * 128 * 4);
  EXPECT_LE(pub, 2u * 4096 * 128 * 4);
  EXPECT_EQ(qk_norm_rope_backward_workspace_size(0, 32, 8, 128), 0u);
}

TEST(CpuQkNormRopeBackwardPlan, SlotsGroupsAndSharedMemory) {
  struct Want {
    int64_t half, d;
    int vec, slots, group, ks;
  };
  for (const Want& w :
       {Want{64, 128, 8, 8, 8, 1}, Want{64, 128, 1, 64, 32, 2}, Want{32, 128, 8, 8, 8, 1},
        Want{40, 80, 8, 5, 8, 1}, Want{1, 2, 1, 1, 1, 1}, Want{3, 6, 1, 3, 4, 1},
        Want{1, 6, 1, 3, 4, 1}, Want{256, 512, 1, 256, 32, 8}, Want{4, 12, 4, 2, 2, 1},
        Want{128, 256, 4, 32, 32, 1}}) {
    const auto p = core::plan_qk_norm_rope_backward(1000, w.half, w.d, w.vec, 132);
    EXPECT_EQ(p.slots, w.slots) << w.d << "/" << w.half << "/" << w.vec;
    EXPECT_EQ(p.group, w.group) << w.d << "/" << w.half << "/" << w.vec;
    EXPECT_EQ(p.slots_per_lane, w.ks) << w.d << "/" << w.half << "/" << w.vec;
    EXPECT_LE(p.vec * p.slots_per_lane, 8);
    EXPECT_LE(p.smem_bytes, 48u * 1024u);
    EXPECT_EQ(p.grid, 528);
    EXPECT_EQ(p.tokens_per_block, 2);
  }
}

using plan_test::lean_facts;

TEST(CpuQkNormRopeBackwardPlan, LeanRule) {
  using core::qk_norm_rope_backward_lean;
  EXPECT_TRUE(qk_norm_rope_backward_lean(lean_facts(1, 40, 64, 128), true, 132));
  EXPECT_TRUE(qk_norm_rope_backward_lean(lean_facts(32768, 40, 64, 128), true, 132));
  EXPECT_TRUE(qk_norm_rope_backward_lean(lean_facts(7, 1, 8, 16), true, 132));   // one lane
  EXPECT_TRUE(qk_norm_rope_backward_lean(lean_facts(7, 9, 256, 512), true, 0));  // 32 lanes
  // Partial rotary, h / 8 not a power of two or past 32 lanes, no tokens or heads.
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(7, 40, 32, 128), true, 132));
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(7, 40, 48, 96), true, 132));
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(7, 40, 512, 1024), true, 132));
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(0, 40, 64, 128), true, 132));
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(7, 0, 64, 128), true, 132));
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(7, 40, 0, 0), true, 132));  // no lanes
  // 32-bit q/k, a narrower vector, computed cos/sin, a weight not 16-byte aligned.
  core::RopeLeanFacts f = lean_facts(7, 40, 64, 128);
  f.elem_size = 4;
  EXPECT_FALSE(qk_norm_rope_backward_lean(f, true, 132));
  f = lean_facts(7, 40, 64, 128);
  f.vec = 4;
  EXPECT_FALSE(qk_norm_rope_backward_lean(f, true, 132));
  f = lean_facts(7, 40, 64, 128);
  f.cos_sin_loaded = false;
  EXPECT_FALSE(qk_norm_rope_backward_lean(f, true, 132));
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(7, 40, 64, 128), false, 132));
  // 80 heads of D 128 need two head groups (40 rows of 8 lanes each): at least two tokens.
  EXPECT_FALSE(qk_norm_rope_backward_lean(lean_facts(1, 80, 64, 128), true, 132));
  EXPECT_TRUE(qk_norm_rope_backward_lean(lean_facts(2, 80, 64, 128), true, 132));
}

TEST(CpuQkNormRopeBackwardPlan, LeanShapeAndWorkspace) {
  // The standard shape: one head group of 40 rows of 8 lanes, two blocks per SM.
  core::QkNormRopeBackwardPlan p =
      core::plan_qk_norm_rope_backward_lean(lean_facts(32768, 40, 64, 128), 132);
  EXPECT_TRUE(p.lean);
  EXPECT_EQ(p.group, 8);
  EXPECT_EQ(p.rows, 40);
  EXPECT_EQ(p.threads, 320);
  EXPECT_EQ(p.head_groups, 1);
  EXPECT_EQ(p.grid, 264);
  EXPECT_EQ(p.smem_bytes, 0u);
  // 40 heads of D 256: 16 lanes, at most 20 rows: two head groups of 20.
  p = core::plan_qk_norm_rope_backward_lean(lean_facts(1000, 40, 128, 256), 132, 3);
  EXPECT_EQ(p.group, 16);
  EXPECT_EQ(p.rows, 20);
  EXPECT_EQ(p.head_groups, 2);
  EXPECT_EQ(p.grid, 198);  // 3 x 132 blocks over 2 head groups
  // 43 heads of D 128: two groups of 22 rows (one idle in the second).
  p = core::plan_qk_norm_rope_backward_lean(lean_facts(5, 43, 64, 128), 132);
  EXPECT_EQ(p.rows, 22);
  EXPECT_EQ(p.head_groups, 2);
  EXPECT_EQ(p.grid, 2);  // 5 tokens: 5 blocks at most, 2 per head group
  // Every lean grid's partial rows fit the workspace the query reports, for every occupancy.
  for (int64_t t : {1, 2, 5, 100, 4096, 100000}) {
    for (int64_t heads : {1, 9, 40, 43, 80, 200}) {
      for (int64_t half : {4 * 8, 8 * 8, 16 * 8, 32 * 8}) {
        for (int sms : {0, 1, 132}) {
          const auto f = lean_facts(t, heads, half, 2 * half);
          if (!core::qk_norm_rope_backward_lean(f, true, sms)) continue;
          for (int bps : {1, 2, 3, 4, 9}) {
            p = core::plan_qk_norm_rope_backward_lean(f, sms, bps);
            EXPECT_LE(p.threads, core::kQkBwdLeanThreads);
            EXPECT_GE(p.rows * p.head_groups, heads);
            EXPECT_LT((p.rows - 1) * p.head_groups, heads);
            EXPECT_LE(p.grid, t);  // every block has a token
            EXPECT_LE(static_cast<size_t>(2 * p.grid * p.head_groups * f.head_dim) * 4,
                      core::qk_norm_rope_backward_workspace_bytes(t, heads, 0, f.head_dim, sms));
          }
        }
      }
    }
  }
}

TEST(CpuQkNormRopeBackwardPlan, LeanInstance) {
  // The lanes fixed at compile time for D 128 and 256 (8 and 16 lanes), every fact at run time
  // for the other lean head dims.
  EXPECT_EQ(core::qk_bwd_lean_instance(8), core::QkBwdLeanInstance::kLanes);
  EXPECT_EQ(core::qk_bwd_lean_instance(16), core::QkBwdLeanInstance::kLanes);
  for (int64_t lanes : {1, 2, 4, 32}) {
    EXPECT_EQ(core::qk_bwd_lean_instance(lanes), core::QkBwdLeanInstance::kAny) << lanes;
  }
  // The lean plan's group is the lanes the instance is chosen from.
  EXPECT_EQ(core::plan_qk_norm_rope_backward_lean(lean_facts(64, 40, 64, 128), 132).group, 8);
  EXPECT_EQ(core::plan_qk_norm_rope_backward_lean(lean_facts(64, 40, 128, 256), 132).group, 16);
}

}  // namespace
}  // namespace ropenorm
