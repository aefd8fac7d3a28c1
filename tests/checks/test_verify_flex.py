"""--impl flex: torch's flex_attention on the CPU, judged against the exact answer."""
import pytest

pytest.importorskip("torch")
from exactattn.call import Call, Policy  # noqa: E402
from exactattn.errors import InputError  # noqa: E402
from exactattn.verify import verify  # noqa: E402
from exactattn.verify.impls import load_impl  # noqa: E402


def test_flex_forward_causal_softcap_passes():
    call = Call.random(seed=1, policy=Policy(causal=True, softcap="5"))
    rep = verify(load_impl("flex"), call, "float32")
    assert rep.passed is True


def test_flex_refuses_a_sink_by_name():
    call = Call.random(seed=1, policy=Policy(sink="0"))
    with pytest.raises(InputError, match="no sink or dropout for impl flex"):
        verify(load_impl("flex"), call, "float32")
