"""The forwards of the patched Hugging Face modules (RMSNorm, attention, decoder layer).

Two ways of changing a stock forward, chosen to copy as little of transformers as possible:

- **Rebinding** (the rotation of every family): the stock attention forward's own code object
  runs with a copy of its module globals, taken when it is first patched (a module of its own
  in sys.modules, as torch.compile requires), in which ``apply_rotary_pos_emb`` is ropenorm's.
  Nothing of the forward is copied, so the KV cache update, the mask and the attention-interface
  dispatch (eager, sdpa, flash, flex) are whatever the installed transformers does.
- **Mirroring** (the fused QK-norm + RoPE attention of Qwen3 / Gemma-3 and the fused add + norm
  decoder layers): a forward that changes the structure cannot reuse the stock code object, so
  it is written out here, mirroring transformers 5.17. Its stock counterpart is checked against
  a digest of the 5.17 source (signature and body, comments and formatting ignored); a
  mismatch is an error that names the option which avoids the mirrored forward.

Each forward falls back to the stock computation wherever the kernel may not run
(:mod:`._hf_kernels`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import textwrap
import types
from typing import Callable, Optional, Tuple

import torch

from . import _hf_kernels as K
from ._hf_families import Family

MIRRORED_VERSION = "5.17"

#: Digest of the stock forwards (transformers 5.17) that the forwards below mirror.
MIRRORED_DIGESTS = {
    "qwen3.attention": "081f73195a30fe91",
    "gemma3.attention": "12d21b305740007a",
    "pre_norm.layer": "f29410c3c6f996a5",
    "sandwich.layer": "2157c82ed32acbce",
}


class NormPlan:
    """How a family's RMSNorm maps onto ropenorm's (see :mod:`._hf_families`)."""

    __slots__ = ("eps_attr", "weight_offset", "rounding", "same_dtype")

    def __init__(self, family: Family, numerics: str) -> None:
        self.eps_attr = family.eps_attr
        self.weight_offset = 1.0 if family.norm_kind == "gemma" else 0.0
        hf_llama = family.norm_kind == "llama" and numerics == "hf"
        self.rounding = K.ROUNDING["hf_llama" if hf_llama else "exact"]
        # LlamaRMSNorm's result dtype is promoted with the weight's; ropenorm returns x's.
        self.same_dtype = family.norm_kind == "llama"

    def describe(self) -> str:
        rounding = "hf_llama" if self.rounding == K.ROUNDING["hf_llama"] else "exact"
        return f"ropenorm(rounding={rounding}, weight_offset={self.weight_offset:g})"


# ------------------------------------------------------------------------------------------------
# Checks of the stock code


def source_digest(fn: Callable) -> str:
    """A digest of fn's parameter names and body (docstring, comments, formatting ignored)."""
    src = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(src).body[0]
    body = node.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    params = [(p.name, p.kind.name) for p in inspect.signature(fn).parameters.values()]
    text = repr(params) + "\n" + _canonical(body)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(node) -> str:
    # ast.dump's format changes between Python versions (3.13 omits empty fields); this one
    # names each node and its non-empty fields, sorted, and nothing else.
    if isinstance(node, list):
        return "[" + ", ".join(_canonical(n) for n in node) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = []
    for name in sorted(node._fields):
        value = getattr(node, name, None)
        if name in ("ctx", "kind", "type_comment") or value is None or value == []:
            continue
        fields.append(f"{name}={_canonical(value)}")
    return f"{type(node).__name__}({', '.join(fields)})"


def _installed_version() -> str:
    import transformers

    return transformers.__version__


def check_mirrored(stock_cls: type, key: str, option: str) -> None:
    """Raises a RuntimeError when stock_cls.forward is not the one the mirrored forward copies."""
    fn = stock_cls.__dict__.get("forward")
    try:
        digest = source_digest(fn) if fn is not None else None
    except (OSError, TypeError):
        digest = None
    if digest != MIRRORED_DIGESTS[key]:
        raise RuntimeError(
            f"ropenorm.integrations.transformers: {stock_cls.__name__}.forward of the installed "
            f"transformers {_installed_version()} differs from the transformers "
            f"{MIRRORED_VERSION} one that ropenorm's patched forward mirrors (digest {digest}, "
            f"expected {MIRRORED_DIGESTS[key]}); pass {option}=False to keep the stock forward "
            f"there, or install transformers {MIRRORED_VERSION}"
        )


def _check_rebindable(fn: Callable, cls_name: str) -> None:
    if inspect.unwrap(fn) is not fn or "apply_rotary_pos_emb" not in fn.__code__.co_names:
        raise RuntimeError(
            f"ropenorm.integrations.transformers: {cls_name}.forward of the installed "
            f"transformers {_installed_version()} does not call apply_rotary_pos_emb directly, "
            "so ropenorm's rotation cannot be put in its place; pass rope=False"
        )


# ------------------------------------------------------------------------------------------------
# RMSNorm


def norm_forward(stock_forward: Callable, plan: NormPlan) -> Callable:
    eps_attr, offset, rounding, same = (plan.eps_attr, plan.weight_offset, plan.rounding,
                                        plan.same_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = K.rms_norm(x, self.weight, getattr(self, eps_attr), offset, rounding, same)
        return stock_forward(self, x) if y is None else y

    return forward


def _add_norm(norm, plan: NormPlan, x: torch.Tensor,
              residual: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(norm(residual + x), residual + x)``: one ropenorm pass, or the stock add and norm."""
    out = K.add_rms_norm(x, residual, norm.weight, getattr(norm, plan.eps_attr),
                         plan.weight_offset, plan.rounding, plan.same_dtype)
    if out is not None:
        return out
    s = residual + x
    return norm(s), s


# ------------------------------------------------------------------------------------------------
# Rotation (rebound into the stock attention forward)


def rotary_fn(stock_rotary: Callable, hf_numerics: bool = False) -> Callable:
    """A drop-in for a family's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``.

    With ``hf_numerics`` it rotates only float32 cos/sin: Hugging Face then computes the
    rotation in fp32 and rounds once, as ropenorm does (float32 models; OLMo-2, whose rotary
    embedding keeps fp32 cos/sin), whereas with bf16/f16 cos/sin it rounds each product and the
    sum, which no ropenorm kernel reproduces, so the stock rotation runs."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if cos.dim() == 3 and q.dim() == 4 and not (hf_numerics and cos.dtype != torch.float32):
            if unsqueeze_dim == 1:  # [B, H, S, D]: rotate the [B, S, H, D] views
                out = K.rope_bshd(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
                if out is not None:
                    return out[0].transpose(1, 2), out[1].transpose(1, 2)
            elif unsqueeze_dim == 2:
                out = K.rope_bshd(q, k, cos, sin)
                if out is not None:
                    return out
        return stock_rotary(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)

    return apply_rotary_pos_emb


def _rebound_module(stock_globals: dict, hf_numerics: bool) -> types.ModuleType:
    """A copy of a modeling module's namespace with ropenorm's apply_rotary_pos_emb, registered
    in sys.modules: torch.compile resolves a function's globals through its module name."""
    stock_name = stock_globals["__name__"]
    name = (f"{__package__}._rebound_{stock_name.rsplit('.', 1)[-1]}"
            f"{'_hf' if hf_numerics else ''}")
    mod = sys.modules.get(name)
    if mod is None or mod.__dict__.get("_ropenorm_source") is not stock_globals:
        mod = types.ModuleType(name, f"{stock_name} with ropenorm's apply_rotary_pos_emb")
        skip = ("__name__", "__doc__", "__spec__", "__loader__", "__package__")
        mod.__dict__.update({k: v for k, v in stock_globals.items() if k not in skip})
        mod.apply_rotary_pos_emb = rotary_fn(stock_globals["apply_rotary_pos_emb"], hf_numerics)
        mod._ropenorm_source = stock_globals
        sys.modules[name] = mod
    return mod


def rebound_attention_forward(stock_cls: type, hf_numerics: bool) -> Callable:
    """stock_cls.forward's code with ropenorm's apply_rotary_pos_emb in its globals."""
    fn = stock_cls.forward
    _check_rebindable(fn, stock_cls.__name__)
    scope = _rebound_module(fn.__globals__, hf_numerics).__dict__
    out = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    out.__qualname__ = fn.__qualname__
    out.__doc__ = fn.__doc__
    out.__annotations__ = dict(fn.__annotations__)
    return out


# ------------------------------------------------------------------------------------------------
# Fused QK-norm + RoPE attention (Qwen3, Gemma-3)


def qk_norm_rope_attention_forward(stock_cls: type, family: Family, plan: NormPlan) -> Callable:
    """The attention forward of Qwen3 / Gemma-3 with the per-head q/k norms and the rotation in
    one ropenorm pass over the [B, S, H, D] views of the projections.

    Mirrors Qwen3Attention.forward and Gemma3Attention.forward of transformers 5.17 (identical
    but for where the norms sit, before or after the transpose, which does not change them)."""
    check_mirrored(stock_cls, f"{family.name}.attention", "qk_norm_rope")
    modeling = inspect.getmodule(stock_cls)
    stock_rotary = modeling.apply_rotary_pos_emb
    eps_attr, offset = plan.eps_attr, plan.weight_offset

    def norm_and_rotate(self, q, k, cos, sin):
        q_norm, k_norm = self.q_norm, self.k_norm
        eps = getattr(q_norm, eps_attr)
        if getattr(k_norm, eps_attr) == eps:
            out = K.qk_norm_rope_bshd(q, k, q_norm.weight, k_norm.weight, eps, offset, cos, sin)
            if out is not None:
                return out
        q, k = q_norm(q), k_norm(k)
        out = K.rope_bshd(q, k, cos, sin)
        if out is not None:
            return out
        # The stock rotation, on the stock [B, H, S, D] layout (so its gradients sum alike).
        q, k = stock_rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q.transpose(1, 2), k.transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        attention_mask: Optional[torch.Tensor] = None,
        past_key_values=None,
        **kwargs,
    ):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(hidden_shape)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = norm_and_rotate(self, query_states, key_states, cos, sin)
        query_states, key_states = query_states.transpose(1, 2), key_states.transpose(1, 2)

        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states,
                                                              self.layer_idx)

        attention_interface = modeling.ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, modeling.eager_attention_forward
        )

        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            sliding_window=self.sliding_window,
            **kwargs,
        )

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights

    return forward


# ------------------------------------------------------------------------------------------------
# Decoder layers with the residual add fused into the following norm


def pre_norm_layer_forward(stock_cls: type, plan: NormPlan) -> Callable:
    """``h = x + attn(norm1(x)); out = h + mlp(norm2(h))`` with ``x + attn`` and ``norm2`` in one
    pass. Mirrors LlamaDecoderLayer.forward of transformers 5.17 (and its copies in Mistral,
    Qwen2, Qwen3 and Gemma)."""
    check_mirrored(stock_cls, "pre_norm.layer", "fused_add")

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_values=None,
        use_cache: Optional[bool] = False,
        position_embeddings: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        **kwargs,
    ) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        hidden_states, residual = _add_norm(self.post_attention_layernorm, plan, hidden_states,
                                            residual)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states

    return forward


def sandwich_layer_forward(stock_cls: type, plan: NormPlan) -> Callable:
    """Gemma-2/3: ``h = x + norm2(attn(norm1(x))); out = h + norm4(mlp(norm3(h)))`` with
    ``x + norm2(...)`` and ``norm3`` in one pass. Mirrors Gemma2DecoderLayer.forward and
    Gemma3DecoderLayer.forward of transformers 5.17."""
    check_mirrored(stock_cls, "sandwich.layer", "fused_add")

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_values=None,
        **kwargs,
    ) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, residual = _add_norm(self.pre_feedforward_layernorm, plan, hidden_states,
                                            residual)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        return residual + hidden_states

    return forward
