"""The error policy of the slots (`speco3.errors.OUTCOME_ERRORS`): engine, input and operating-system errors
end the one turn they belong to as its outcome; anything else is a bug and propagates out of `step`."""

from __future__ import annotations

import pytest

from speco3.engine.base import Sampling
from speco3.engine.parallel import SerialSlots
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import ContextFullError, EngineError

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
TASK = "\nIs it a **Carbon Star**?<|im_end|>\n<|im_start|>assistant\n"


def one_turn(slots) -> list:
    slot = slots.open(Sampling())
    slots.extend(slot, ["<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"])
    slots.begin(slot, max_tokens=8)
    return slots.step()


@pytest.mark.parametrize("error", [EngineError("GPU lost"), ContextFullError("full"), OSError("disk gone")])
def test_engine_errors_are_the_turns_outcome(error):
    [(slot, outcome)] = one_turn(SerialSlots(ScriptedEngine([error])))
    assert slot == 0 and outcome is error


@pytest.mark.parametrize("error", [TypeError("a bug"), KeyError("x"), AssertionError("invariant")])
def test_other_errors_propagate(error):
    with pytest.raises(type(error)):
        one_turn(SerialSlots(ScriptedEngine([error])))


@pytest.mark.llama
def test_pool_engine_error_ends_that_slot_only(make_engine, images):
    """A slot whose turn cannot start (its conversation does not end with text) gets the `EngineError`; the other
    slot generates."""
    engine = make_engine(n_seq=2)
    with engine.open_pool() as pool:
        good, bad = pool.open(Sampling()), pool.open(Sampling())
        pool.extend(good, [SYSTEM, images[0], TASK])
        pool.extend(bad, [SYSTEM, images[0]])
        pool.sequence(bad).conv.pop()  # drop the image's closing marker: the conversation ends with the image
        pool.begin(good, max_tokens=4)
        pool.begin(bad, max_tokens=4)
        res = {}
        while len(res) < 2:
            res.update(pool.step())
    assert isinstance(res[bad], EngineError) and "must end with text" in str(res[bad])
    assert res[good].n_tokens == 4


@pytest.mark.llama
def test_pool_bug_propagates(make_engine, images, monkeypatch):
    """A programming error inside the token loop is not recorded as a slot's outcome (a stand-in for a bug: no
    real input makes the evaluation raise TypeError)."""
    engine = make_engine(n_seq=2)
    with engine.open_pool() as pool:
        slot = pool.open(Sampling())
        pool.extend(slot, [SYSTEM, images[0], TASK])
        pool.begin(slot, max_tokens=4)

        def broken(seq, reserve=0):
            raise TypeError("a bug in the evaluation")

        monkeypatch.setattr(pool.context, "evaluate", broken)
        with pytest.raises(TypeError, match="a bug"):
            pool.step()
