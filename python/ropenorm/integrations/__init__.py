"""Integrations of ropenorm with other libraries.

- :mod:`ropenorm.integrations.transformers`: patches Hugging Face transformers models (Llama,
  Mistral, Qwen2, Qwen3, Gemma, Gemma-2, Gemma-3, OLMo-2) to ropenorm's kernels.

Importing this package does not import transformers; the patching functions do, when called.
"""

from .transformers import (
    NUMERICS,
    SUPPORTED_FAMILIES,
    apply_ropenorm,
    apply_ropenorm_to_class,
    patch_transformers,
    patched_modules,
    remove_ropenorm,
    unpatch_transformers,
)

__all__ = [
    "NUMERICS",
    "SUPPORTED_FAMILIES",
    "apply_ropenorm",
    "apply_ropenorm_to_class",
    "patch_transformers",
    "patched_modules",
    "remove_ropenorm",
    "unpatch_transformers",
]
