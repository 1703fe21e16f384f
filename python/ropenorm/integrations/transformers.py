"""ropenorm for Hugging Face transformers models.

One call patches a model so that its RMSNorms, rotary embeddings, per-head QK-norm + RoPE and
residual add + norm run on ropenorm's kernels::

    from ropenorm.integrations.transformers import apply_ropenorm
    model = apply_ropenorm(AutoModelForCausalLM.from_pretrained(...))

or, before the model is built (like Liger-Kernel's ``apply_liger_kernel_to_llama``)::

    patch_transformers("qwen3")            # or "all", or apply_ropenorm_to_class(Qwen3ForCausalLM)
    model = Qwen3ForCausalLM.from_pretrained(...)

Families: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3 (text, also inside the multimodal
model) and olmo2. What changes:

- **RMSNorm** (``rms_norm=True``): every RMSNorm of the family (the decoder norms, the final
  norm, q_norm / k_norm) computes with ``ropenorm.rms_norm``: Llama-style norms with rounding
  ``exact`` (one rounding; ``numerics="hf"``: ``hf_llama``, Hugging Face's own rounding), Gemma's
  ``(1 + w)`` with ``weight_offset=1``, OLMo-2's fp32 weight multiply with ``exact`` (which is
  what those two compute already). The backward passes are ropenorm's in both modes (fp32,
  one rounding of each gradient), not the chain of bf16 roundings autograd takes through the
  stock formula.
- **RoPE** (``rope=True``): ``apply_rotary_pos_emb`` in the attention forward is ropenorm's
  rotation of the ``[B, S, H, D]`` views, one rounding, partial rotary (cos/sin narrower than
  the head) passing the other channels through. With ``numerics="hf"`` only where Hugging Face
  rotates in fp32 with one rounding too (float32 cos/sin: float32 models, and OLMo-2, whose
  rotary embedding keeps them in fp32); with bf16/f16 cos/sin it rounds both products and their
  sum, which no ropenorm kernel reproduces, so its own rotation runs.
- **Fused QK-norm + RoPE** (``qk_norm_rope=True``; Qwen3 and Gemma-3, whose q/k norms are per
  head): the two norms and the rotation are one ``ropenorm.qk_norm_rope`` pass over the views of
  the q/k projections, no copy. Used only with ``rms_norm`` and ``rope`` on and
  ``numerics="exact"`` (Hugging Face rounds the normalised q/k before rotating them, which a
  single pass does not), and when the installed ropenorm has the op; otherwise the norms and the
  rotation run as two ropenorm calls. OLMo-2 normalises the whole projection (H*D channels)
  before splitting the heads, which is a plain RMSNorm, not this op.
- **Fused add + norm** (``fused_add=True``, with ``rms_norm``): the decoder layer's residual add
  and the norm that follows it (Llama-style: the post-attention norm; Gemma-2/3: the
  pre-feed-forward norm) are one ``ropenorm.add_rms_norm`` pass. The sum is rounded exactly as
  the stock ``residual + x``, so this changes no value. OLMo-2 has no add followed by a norm.

Where the cos/sin come from: the model's own Hugging Face rotary embedding still computes them,
once per forward for all layers, and ropenorm applies them (the ``hf_cos_sin_gathered`` source).
So every rope_type (default, linear, dynamic, llama3, yarn, longrope, ...) is exactly Hugging
Face's, dynamic NTK included (its frequencies change with the sequence length, which the
rotary module tracks), and Gemma-3's sliding and full layers each get their own rotary base
through the stock model forward. Building a ropenorm cache from the config instead would save
only that per-forward cos/sin computation (a handful of small kernels shared by all layers),
at the price of a second source of truth for every rope_type.

How: each patched module's class is swapped for a subclass of the stock class with the same
name that overrides ``forward`` (``isinstance``, ``_no_split_modules``, hooks and the output
recorders keep working), and nothing else changes: parameters, buffers and state_dict keys are
the stock ones, so checkpoints load both ways. :func:`remove_ropenorm` swaps the classes back.

Each patched forward runs the stock code wherever a kernel cannot: CPU tensors, dtypes other
than float32/float16/bfloat16, a Llama-style norm whose weight dtype differs from the input's
(the stock result dtype is then the promoted one), and training through an op whose backward
is not available in the installed ropenorm (probed once at patch time). The forwards that
restructure stock code (the fused QK-norm + RoPE attention and the fused-add decoder layers)
mirror transformers 5.17 and are refused, with an error naming the option to turn off, when the
installed version's forward differs; the rotation is put into the stock forward itself and
works with any version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Union

import torch

from . import _hf_forwards as F
from . import _hf_kernels as K
from ._hf_families import FAMILIES, SUPPORTED_FAMILIES, Family, family_by_name, family_of_class
from ._hf_families import family_of_model

__all__ = [
    "SUPPORTED_FAMILIES",
    "NUMERICS",
    "apply_ropenorm",
    "apply_ropenorm_to_class",
    "patch_transformers",
    "unpatch_transformers",
    "remove_ropenorm",
    "patched_modules",
]

NUMERICS = ("exact", "hf")
_EPS_RANGE = (1e-12, 1e-2)


@dataclass(frozen=True)
class _Settings:
    rms_norm: bool
    rope: bool
    qk_norm_rope: bool
    fused_add: bool
    numerics: str

    def fused_qk(self, family: Family) -> bool:
        return (family.qk_norm == "per_head" and self.qk_norm_rope and self.rms_norm
                and self.rope and self.numerics == "exact" and K.has_fused_qk_norm_rope())


def _settings(rms_norm, rope, qk_norm_rope, fused_add, numerics) -> _Settings:
    if numerics not in NUMERICS:
        raise ValueError(f"ropenorm.integrations.transformers: argument 'numerics': expected one "
                         f"of {list(NUMERICS)}, received {numerics!r}")
    return _Settings(bool(rms_norm), bool(rope), bool(qk_norm_rope), bool(fused_add), numerics)


_CLASSES: Dict[tuple, type] = {}


def _is_patched(cls: type) -> bool:
    return cls in _CLASSES.values()


def _stock(cls: type) -> type:
    return cls._ropenorm_stock_class if _is_patched(cls) else cls


def _subclass(stock: type, role: str, variant: str, settings: _Settings, make_forward: Callable,
              plan: F.NormPlan) -> type:
    key = (stock, variant, settings)
    cls = _CLASSES.get(key)
    if cls is None:
        ns = {
            "forward": make_forward(),
            "_ropenorm_stock_class": stock,
            "_ropenorm_role": role,
            "_ropenorm_settings": settings,
            "__module__": stock.__module__,
            "__qualname__": stock.__qualname__,
            "__doc__": stock.__doc__,
        }
        if role == "rms_norm":
            ns["extra_repr"] = lambda self: f"{stock.extra_repr(self)}, {plan.describe()}"
        # The stock name: transformers looks classes up by name (_no_split_modules, init rules).
        cls = type(stock.__name__, (stock,), ns)
        _CLASSES[key] = cls
    return cls


def _family_classes(family: Family) -> Dict[str, type]:
    """The family's stock classes that can be patched, by role."""
    modeling = family.modeling()
    return {
        "rms_norm": _stock(getattr(modeling, family.norm_class)),
        "attention": _stock(getattr(modeling, family.attention_class)),
        "decoder_layer": _stock(getattr(modeling, family.layer_class)),
    }


def _patched_classes(family: Family, settings: _Settings) -> Dict[type, type]:
    """stock class -> patched class, for the classes the settings patch."""
    stock = _family_classes(family)
    plan = F.NormPlan(family, settings.numerics)
    out: Dict[type, type] = {}
    if settings.rms_norm:
        norm = stock["rms_norm"]
        out[norm] = _subclass(norm, "rms_norm", "rms_norm", settings,
                              lambda: F.norm_forward(norm.forward, plan), plan)
    attn = stock["attention"]
    if settings.fused_qk(family):
        out[attn] = _subclass(attn, "attention", "qk_norm_rope", settings,
                              lambda: F.qk_norm_rope_attention_forward(attn, family, plan), plan)
    elif settings.rope:
        hf = settings.numerics == "hf"
        out[attn] = _subclass(attn, "attention", "rope", settings,
                              lambda: F.rebound_attention_forward(attn, hf), plan)
    if settings.rms_norm and settings.fused_add and family.layout != "post_norm":
        layer = stock["decoder_layer"]
        make = F.pre_norm_layer_forward if family.layout == "pre_norm" else F.sandwich_layer_forward
        out[layer] = _subclass(layer, "decoder_layer", family.layout, settings,
                               lambda: make(layer, plan), plan)
    return out


def _check_eps(name: str, module: torch.nn.Module, family: Family) -> None:
    eps = getattr(module, family.eps_attr)
    lo, hi = _EPS_RANGE
    if not (isinstance(eps, (int, float)) and lo <= eps <= hi):
        raise ValueError(f"ropenorm.integrations.transformers: module '{name}' "
                         f"({type(module).__name__}): eps {eps!r} is outside the kernels' range "
                         f"[{lo:g}, {hi:g}]; pass rms_norm=False to keep the stock norms")


_probed = False


def _probe() -> None:
    global _probed
    if not _probed:
        K.probe_backward()
        _probed = True


def apply_ropenorm(
    model: torch.nn.Module,
    *,
    rms_norm: bool = True,
    rope: bool = True,
    qk_norm_rope: bool = True,
    fused_add: bool = True,
    numerics: str = "exact",
) -> torch.nn.Module:
    """Patches a Hugging Face model of a supported family in place and returns it.

    Args:
        model: a model of one of :data:`SUPPORTED_FAMILIES` (any head: ``*ForCausalLM``,
            ``*Model``, ``*ForSequenceClassification``, ...), on any device and dtype.
        rms_norm: route the family's RMSNorms through ``ropenorm.rms_norm``.
        rope: route ``apply_rotary_pos_emb`` through ``ropenorm.rope``.
        qk_norm_rope: fuse Qwen3's / Gemma-3's per-head q/k norms and the rotation into one
            ``ropenorm.qk_norm_rope`` pass (needs ``rms_norm``, ``rope`` and
            ``numerics="exact"``).
        fused_add: fuse the decoder layer's residual add with the norm that follows it
            (``ropenorm.add_rms_norm``; needs ``rms_norm``).
        numerics: ``"exact"`` (each output rounded once from fp32: within 1 ulp of the correctly
            rounded value) or ``"hf"`` (the forward rounds where Hugging Face's does:
            Llama-style norms round before the weight multiply, the q/k norms are not fused
            with the rotation, and the rotation stays Hugging Face's where it rounds each
            product to bf16/f16, i.e. everywhere but float32 models and OLMo-2).

    Calling it again with other options re-patches the model; an option turned off restores
    the stock class of what it patched.

    Raises:
        ValueError: the model is not of a supported family (the message lists them), an option
            is invalid, or a norm's eps is outside ``[1e-12, 1e-2]``.
        RuntimeError: a forward that the options restructure differs, in the installed
            transformers, from the transformers 5.17 one ropenorm mirrors (the message names
            the option that avoids it).
    """
    family = family_of_model(model)
    settings = _settings(rms_norm, rope, qk_norm_rope, fused_add, numerics)
    classes = _patched_classes(family, settings)
    stock_classes = set(_family_classes(family).values())
    norm_class = _family_classes(family)["rms_norm"]
    for name, module in model.named_modules():
        stock = _stock(type(module))  # subclasses other than ropenorm's are left alone
        if stock not in stock_classes:
            continue
        patched = classes.get(stock)
        if patched is not None and stock is norm_class:
            _check_eps(name, module, family)
        module.__class__ = patched if patched is not None else stock
    _probe()
    return model


def remove_ropenorm(model: torch.nn.Module) -> torch.nn.Module:
    """Undoes :func:`apply_ropenorm`: every patched module gets its stock class back."""
    for module in model.modules():
        if _is_patched(type(module)):
            module.__class__ = type(module)._ropenorm_stock_class
    return model


def patched_modules(model: torch.nn.Module) -> Dict[str, str]:
    """Qualified name -> role (``rms_norm``, ``attention``, ``decoder_layer``) of every module
    of model that ropenorm patched."""
    return {name: type(m)._ropenorm_role for name, m in model.named_modules()
            if _is_patched(type(m))}


# ------------------------------------------------------------------------------------------------
# Patching the modeling modules before a model is built

#: family -> {class name: the stock class}, for the modeling modules patch_transformers changed.
_MODULE_ORIGINALS: Dict[str, Dict[str, type]] = {}


def _families(family: Union[str, List[str]]) -> List[Family]:
    if family == "all":
        return list(FAMILIES.values())
    names = [family] if isinstance(family, str) else list(family)
    return [family_by_name(n) for n in names]


def patch_transformers(
    family: Union[str, List[str]] = "all",
    *,
    rms_norm: bool = True,
    rope: bool = True,
    qk_norm_rope: bool = True,
    fused_add: bool = True,
    numerics: str = "exact",
) -> List[str]:
    """Patches the modeling modules of the given families (a name, a list of names, or
    ``"all"``) so that models built afterwards (``from_pretrained``, ``from_config``, the
    constructors) come patched, as :func:`apply_ropenorm` would patch them. Models built before
    are not changed. Options as for :func:`apply_ropenorm`. Returns the families patched.

    :func:`unpatch_transformers` restores the modules."""
    settings = _settings(rms_norm, rope, qk_norm_rope, fused_add, numerics)
    done = []
    for fam in _families(family):
        classes = _patched_classes(fam, settings)
        modeling = fam.modeling()
        originals = _MODULE_ORIGINALS.setdefault(fam.name, {})
        for cls in _family_classes(fam).values():
            originals.setdefault(cls.__name__, cls)
            setattr(modeling, cls.__name__, classes.get(cls, cls))
        done.append(fam.name)
    _probe()
    return done


def unpatch_transformers(family: Union[str, List[str]] = "all") -> List[str]:
    """Restores the modeling modules :func:`patch_transformers` changed. Returns the families
    restored."""
    done = []
    for fam in _families(family):
        originals = _MODULE_ORIGINALS.pop(fam.name, None)
        if originals is None:
            continue
        modeling = fam.modeling()
        for name, cls in originals.items():
            setattr(modeling, name, cls)
        done.append(fam.name)
    return done


def apply_ropenorm_to_class(model_class: type, **options) -> type:
    """Patches the modeling module of model_class's family (see :func:`patch_transformers`) so
    that instances built afterwards come patched; returns model_class."""
    fam = family_of_class(model_class)
    if fam is None:
        raise ValueError(
            f"ropenorm.integrations.transformers: {model_class.__name__} is not a supported "
            f"model family; supported families: {', '.join(SUPPORTED_FAMILIES)}"
        )
    patch_transformers(fam.name, **options)
    return model_class
