"""`import ropenorm` works everywhere; an op that cannot run says why with a RuntimeError."""

import pytest

import ropenorm


def test_import_and_availability_report():
    reason = ropenorm.unavailable_reason()
    assert ropenorm.available() == (reason is None)
    if reason is not None:
        assert isinstance(reason, str) and reason


@pytest.mark.skipif(ropenorm.available(), reason="the CUDA ops are available here: nothing to refuse")
def test_unavailable_op_raises_runtime_error_with_reason():
    reason = ropenorm.unavailable_reason()
    with pytest.raises(RuntimeError) as info:
        ropenorm.rms_norm(None)
    message = str(info.value)
    assert "ropenorm.rms_norm" in message
    assert reason in message
    # The error is raised by ropenorm's own check, not somewhere deep inside a call.
    assert len(info.traceback) <= 3


@pytest.mark.skipif(ropenorm.available(cuda=False),
                    reason="the host-side builders are available here: nothing to refuse")
def test_unavailable_builder_raises_runtime_error_with_reason():
    with pytest.raises(RuntimeError, match="build_rope_cache"):
        ropenorm.build_rope_cache(16, rotary_dim=8)
