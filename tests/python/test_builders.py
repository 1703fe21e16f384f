"""Host-side rope parameters (rope_inv_freq, build_rope_cache): need the extension, not a GPU."""

import math

import pytest

from support import requires_extension, round_to, torch

import ropenorm

pytestmark = requires_extension


def _hf_default_inv_freq(theta, rotary_dim):
    # Hugging Face's float32 expression: 1 / theta ** (arange(0, R, 2).float() / R)
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))


@pytest.mark.parametrize("theta,rotary_dim", [(10000.0, 128), (500000.0, 64), (1e6, 96)])
def test_default_inv_freq_matches_float64_formula(theta, rotary_dim):
    f64, scaling = ropenorm.rope_inv_freq(rope_theta=theta, rotary_dim=rotary_dim, hf_float32=False)
    i = torch.arange(rotary_dim // 2, dtype=torch.float64)
    expect = 1.0 / torch.pow(torch.tensor(theta, dtype=torch.float64), 2 * i / rotary_dim)
    assert f64.dtype == torch.float64 and scaling == 1.0
    torch.testing.assert_close(f64, expect, rtol=4e-16, atol=0)
    f32, _ = ropenorm.rope_inv_freq(rope_theta=theta, rotary_dim=rotary_dim)
    assert f32.dtype == torch.float32
    # Hugging Face's float32 values, up to the one-ulp pow differences the header documents.
    torch.testing.assert_close(f32, _hf_default_inv_freq(theta, rotary_dim), rtol=2.4e-7, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cache_is_cos_sin_of_exact_angle(dtype):
    rotary_dim, positions = 64, 300
    cache = ropenorm.build_rope_cache(positions, rope_theta=10000.0, rotary_dim=rotary_dim,
                                      dtype=dtype)
    assert cache.shape == (positions, rotary_dim) and cache.dtype == dtype
    assert cache.device.type == "cpu"
    inv, _ = ropenorm.rope_inv_freq(rope_theta=10000.0, rotary_dim=rotary_dim)
    angle = torch.arange(positions, dtype=torch.float64)[:, None] * inv.double()[None, :]
    expect = torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)
    # Each value is float64 cos/sin of the exact angle, rounded once.
    assert torch.equal(cache, round_to(expect, dtype))


def test_cache_range_and_scaling():
    kw = dict(rope_type="yarn", rope_theta=10000.0, rotary_dim=64, factor=4.0,
              original_max_position_embeddings=2048)
    full = ropenorm.build_rope_cache(100, **kw)
    part = ropenorm.build_rope_cache(30, first_position=50, **kw)
    assert torch.equal(full[50:80], part)
    _, scaling = ropenorm.rope_inv_freq(**kw)
    assert scaling == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)
    # Row 0: cos(0) * scaling, sin(0) * scaling.
    assert torch.allclose(full[0, :32].double(), torch.full((32,), scaling, dtype=torch.float64),
                          rtol=1e-7)
    assert torch.equal(full[0, 32:], torch.zeros(32))


def test_llama3_and_hf_config_mapping():
    config = dict(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
                  rope_theta=500000.0,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, original_max_position_embeddings=8192))
    kw = ropenorm.rope_parameters_from_hf_config(config)
    assert kw["rope_type"] == "llama3" and kw["rotary_dim"] == 128 and kw["factor"] == 8.0
    inv, scaling = ropenorm.rope_inv_freq(**kw)
    base, _ = ropenorm.rope_inv_freq(rope_theta=500000.0, rotary_dim=128)
    assert scaling == 1.0
    assert torch.equal(inv[:8], base[:8])  # high frequencies kept
    torch.testing.assert_close(inv[-4:], base[-4:] / 8.0, rtol=2.4e-7, atol=0)  # low scaled
    rot = ropenorm.RotaryEmbedding.from_hf_config(type("Config", (), config)())
    assert rot.rotary_dim == 128 and rot.cos_sin_cache.shape == (131072, 128)


def test_builder_range_errors_name_the_python_arguments():
    with pytest.raises(ValueError, match="build_rope_cache: argument 'first_position'"):
        ropenorm.build_rope_cache(8, first_position=-1, rotary_dim=8)
    with pytest.raises(ValueError, match=r"argument 'max_positions': expected first_position \+"):
        ropenorm.build_rope_cache(2, first_position=2**53 - 1, rotary_dim=8)
    with pytest.raises(ValueError, match="build_rope_cache: argument 'max_positions'"):
        ropenorm.build_rope_cache(-1, rotary_dim=8)
    # A configuration error of a range comes from the library's range builder, which names itself.
    with pytest.raises(ValueError, match="build_rope_cache_range: "):
        ropenorm.build_rope_cache(8, first_position=3, rotary_dim=8, rope_theta=-1.0)


def test_builder_errors_name_the_argument():
    with pytest.raises(ValueError, match="rope_type"):
        ropenorm.build_rope_cache(8, rope_type="nope", rotary_dim=8)
    with pytest.raises(ValueError, match="rotary_dim"):
        ropenorm.build_rope_cache(8, rotary_dim=7)
    with pytest.raises(TypeError, match="dtype"):
        ropenorm.build_rope_cache(8, rotary_dim=8, dtype=torch.float64)
    with pytest.raises(ValueError, match="unknown rope parameter"):
        ropenorm.build_rope_cache(8, rotary_dim=8, not_a_parameter=1)
    with pytest.raises(ValueError, match="factor"):
        ropenorm.rope_inv_freq(rope_type="linear", rotary_dim=8, factor=0.5)


def test_rotary_embedding_module_builds_cache_on_cpu():
    rot = ropenorm.RotaryEmbedding(128, 64, rope_theta=10000.0, partial_rotary_factor=0.5,
                                   cache_dtype=torch.bfloat16)
    assert rot.cos_sin_cache.shape == (64, 64) and rot.cos_sin_cache.dtype == torch.bfloat16
    assert "cos_sin_cache" not in rot.state_dict()
