"""The Hugging Face model families ropenorm patches: for each, its modeling module, the classes
that are patched and how their arithmetic maps onto ropenorm's.

Norm kinds (what the family's RMSNorm computes, ``r = 1 / sqrt(mean(x^2) + eps)`` in fp32):

- ``llama``: ``w * to(x.dtype, x * r)`` (LlamaRMSNorm and its copies): ropenorm rounding
  ``hf_llama`` reproduces it, ``exact`` rounds once; the output dtype is promoted with w's, so
  the kernel serves only ``w.dtype == x.dtype``.
- ``gemma``: ``to(x.dtype, x * r * (1 + w))`` in fp32 (GemmaRMSNorm, Gemma2, Gemma3): ropenorm
  ``exact`` with ``weight_offset=1``.
- ``olmo2``: ``to(x.dtype, w * (x * r))`` in fp32 (Olmo2RMSNorm): ropenorm ``exact``.

QK-norm kinds: ``None`` (no q/k norm), ``per_head`` (Qwen3, Gemma-3: a norm over each head's
D channels, the fused ``qk_norm_rope`` op), ``projection`` (OLMo-2: a norm over the whole q / k
projection, H*D channels, before the heads are split; patched as a plain RMSNorm).

Decoder layouts: ``pre_norm`` (``h = x + attn(norm1(x)); out = h + mlp(norm2(h))``: the add and
norm2 fuse), ``sandwich`` (Gemma-2/3: ``h = x + norm2(attn(norm1(x)))`` then ``norm3(h)``: the
add and norm3 fuse), ``post_norm`` (OLMo-2: the adds feed no norm; nothing to fuse).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Dict, Optional


@dataclass(frozen=True)
class Family:
    name: str
    module: str  # the modeling module, under transformers.models
    prefix: str  # class-name prefix: <prefix>RMSNorm, <prefix>Attention, <prefix>DecoderLayer
    norm_kind: str
    eps_attr: str  # the norm module's eps attribute
    qk_norm: Optional[str]
    layout: str
    model_types: tuple  # config.model_type values of this family

    @property
    def norm_class(self) -> str:
        return f"{self.prefix}RMSNorm"

    @property
    def attention_class(self) -> str:
        return f"{self.prefix}Attention"

    @property
    def layer_class(self) -> str:
        return f"{self.prefix}DecoderLayer"

    def modeling(self) -> ModuleType:
        return importlib.import_module(f"transformers.models.{self.module}")


FAMILIES: Dict[str, Family] = {
    f.name: f
    for f in (
        Family("llama", "llama.modeling_llama", "Llama", "llama", "variance_epsilon", None,
               "pre_norm", ("llama",)),
        Family("mistral", "mistral.modeling_mistral", "Mistral", "llama", "variance_epsilon",
               None, "pre_norm", ("mistral",)),
        Family("qwen2", "qwen2.modeling_qwen2", "Qwen2", "llama", "variance_epsilon", None,
               "pre_norm", ("qwen2",)),
        Family("qwen3", "qwen3.modeling_qwen3", "Qwen3", "llama", "variance_epsilon",
               "per_head", "pre_norm", ("qwen3",)),
        Family("gemma", "gemma.modeling_gemma", "Gemma", "gemma", "eps", None, "pre_norm",
               ("gemma",)),
        Family("gemma2", "gemma2.modeling_gemma2", "Gemma2", "gemma", "eps", None, "sandwich",
               ("gemma2",)),
        Family("gemma3", "gemma3.modeling_gemma3", "Gemma3", "gemma", "eps", "per_head",
               "sandwich", ("gemma3_text", "gemma3")),
        Family("olmo2", "olmo2.modeling_olmo2", "Olmo2", "olmo2", "variance_epsilon",
               "projection", "post_norm", ("olmo2",)),
    )
}

SUPPORTED_FAMILIES = tuple(FAMILIES)

_BY_MODEL_TYPE = {t: f for f in FAMILIES.values() for t in f.model_types}
_BY_MODULE = {f"transformers.models.{f.module}": f for f in FAMILIES.values()}


def _unsupported(what: str) -> ValueError:
    return ValueError(
        f"ropenorm.integrations.transformers: {what} is not a supported model family; "
        f"supported families: {', '.join(SUPPORTED_FAMILIES)}"
    )


def family_by_name(name: str) -> Family:
    family = FAMILIES.get(name) or _BY_MODEL_TYPE.get(name)
    if family is None:
        raise _unsupported(repr(name))
    return family


def family_of_class(cls: type) -> Optional[Family]:
    """The family whose modeling module defines cls or one of its bases, or whose model_type
    its config class declares."""
    for base in cls.__mro__:
        family = _BY_MODULE.get(getattr(base, "__module__", ""))
        if family is not None:
            return family
    config_class = getattr(cls, "config_class", None)
    return _BY_MODEL_TYPE.get(getattr(config_class, "model_type", None))


def family_of_model(model) -> Family:
    config = getattr(model, "config", None)
    family = _BY_MODEL_TYPE.get(getattr(config, "model_type", None))
    if family is None:
        family = family_of_class(type(model))
    if family is None:
        model_type = getattr(config, "model_type", None)
        raise _unsupported(f"{type(model).__name__} (model_type {model_type!r})")
    return family
