// Host-side argument building of the fused QK-norm + RoPE backward (see
// qk_norm_rope_backward_host.h).
#include <cstdint>

#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_host.h"
#include "cuda/rope/rope_host.h"

namespace ropenorm::cuda {

namespace {

// Widest vector every operand allows: x, dout and dx of q and k, and the cos/sin tables (the
// test is monotone in V, so the minimum of the separate widths is the joint one).
int access_width(const core::QkNormRopeBackwardCall& c, const core::RopeGeometry& g,
                 const QkNormRopeBackwardArgs& qa) {
  const RopeKernelArgs& a = qa.rope;
  const int es = static_cast<int>(dtype_size(c.fwd.rope.q.dtype));
  const int64_t h = g.rotary_dim / 2;
  const int64_t d = g.head_dim;
  const RopeCosSin& cs = c.fwd.rope.cos_sin;
  int v = core::rope_vector_width(h, d, es,
                                  {{a.q.data, es, {a.q.sb, a.q.ss, a.q.sh}},
                                   {a.k.data, es, {a.k.sb, a.k.ss, a.k.sh}},
                                   {a.q_out.data, es, {a.q_out.sb, a.q_out.ss, a.q_out.sh}},
                                   {a.k_out.data, es, {a.k_out.sb, a.k_out.ss, a.k_out.sh}},
                                   {qa.gq.data, es, {qa.gq.sb, qa.gq.ss, qa.gq.sh}},
                                   {qa.gk.data, es, {qa.gk.sb, qa.gk.ss, qa.gk.sh}}});
  int vt = v;
  if (cs.kind == CosSinKind::kCache) {
    const int ce = static_cast<int>(dtype_size(cs.cache.dtype));
    vt = core::rope_vector_width(h, d, es, {{cs.cache.data, ce, {a.cos_row}}});
  } else if (cs.kind != CosSinKind::kInvFreq) {
    const int ce = static_cast<int>(dtype_size(cs.cos.dtype));
    vt = core::rope_vector_width(h, d, es,
                                 {{cs.cos.data, ce, {a.cos_row, a.cos_sb, a.cos_ss}},
                                  {cs.sin.data, ce, {a.sin_row, a.sin_sb, a.sin_ss}}});
  }
  return vt < v ? vt : v;
}

}  // namespace

void fill_qk_norm_rope_backward_args(const core::QkNormRopeBackwardCall& c,
                                     const core::RopeGeometry& g, QkNormRopeBackwardArgs* qa,
                                     core::RopeLeanFacts* lean_facts) {
  const core::RopeCall& rc = c.fwd.rope;
  fill_rope_args(rc, g, &qa->rope);
  qa->rope.inverse = true;  // the transposed rotation: s_i negated
  qa->gq = rope_operand(c.dq_out);
  qa->gk = rope_operand(c.dk_out);
  qa->wq = c.fwd.wq.data;
  qa->wk = c.fwd.wk.data;
  qa->wq_dtype = c.fwd.wq.dtype;
  qa->wk_dtype = c.fwd.wk.dtype;
  qa->eps = c.fwd.norm.eps;
  qa->weight_offset = c.fwd.norm.weight_offset;
  qa->q_rstd = c.fwd.q_rstd.defined() ? static_cast<const float*>(c.fwd.q_rstd.data) : nullptr;
  qa->k_rstd = c.fwd.k_rstd.defined() ? static_cast<const float*>(c.fwd.k_rstd.data) : nullptr;
  const int vec = access_width(c, g, *qa);
  qa->rot_slots = static_cast<int>(g.rotary_dim / 2 / vec);
  *lean_facts = rope_lean_facts(rc, g, vec);
}

void qk_bwd_apply_plan(const core::QkNormRopeBackwardPlan& plan, float* partials,
                       QkNormRopeBackwardArgs* qa) {
  qa->partials = partials;
  qa->tokens_per_block = plan.tokens_per_block;
  qa->group = plan.group;
  qa->slots = plan.slots;
}

}  // namespace ropenorm::cuda
