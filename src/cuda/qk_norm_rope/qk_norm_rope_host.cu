// Host-side argument building of the fused QK-norm + RoPE forward (see qk_norm_rope_host.h).
#include <cstdint>

#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/rope/rope_host.h"

namespace ropenorm::cuda {

bool qk_weights_aligned16(const core::QkNormRopeCall& c) {
  return reinterpret_cast<uintptr_t>(c.wq.data) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(c.wk.data) % 16 == 0;
}

void fill_qk_norm_rope_args(const core::QkNormRopeCall& c, const core::RopeGeometry& g,
                            QkNormRopeArgs* qa, core::QkNormRopeFacts* facts) {
  RopeKernelArgs& a = qa->rope;
  fill_rope_args(c.rope, g, &a);
  qa->wq = c.wq.data;
  qa->wk = c.wk.data;
  qa->wq_dtype = c.wq.dtype;
  qa->wk_dtype = c.wk.dtype;
  qa->eps = c.norm.eps;
  qa->weight_offset = c.norm.weight_offset;
  qa->q_rstd = c.q_rstd.defined() ? static_cast<float*>(c.q_rstd.data) : nullptr;
  qa->k_rstd = c.k_rstd.defined() ? static_cast<float*>(c.k_rstd.data) : nullptr;
  qa->slots = static_cast<int>(g.head_dim / 2);

  facts->rope = rope_lean_facts(c.rope, g, rope_access_width(c.rope, g, a));
  facts->weights_aligned16 = qk_weights_aligned16(c);
}

}  // namespace ropenorm::cuda
