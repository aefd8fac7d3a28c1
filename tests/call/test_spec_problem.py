"""A problem spec file written from a Call reads back to the same Call, at every size a Call
accepts (numbers past Python's int-to-str digit limit included)."""

from fractions import Fraction

import pytest

from exactattn.call import Call
from exactattn.call.spec import load_problem, problem_text
from exactattn.properties.inputs import value_text


@pytest.mark.parametrize("entry", ["9" * 3000 + "e3000", "-" + "9" * 3000 + "e3000",
                                   "1234e-3000", "7/3", "100", "-1/2"])
def test_problem_text_reads_back_exactly(tmp_path, entry):
    call = Call([[entry]], [["1"]], [["1"]])
    path = tmp_path / "problem.json"
    path.write_text(problem_text(call, "float32"))
    back = load_problem(str(path))[0]
    assert type(back.query.flat[0]) is Fraction
    assert back.query.flat[0] == call.query.flat[0]


def test_a_huge_exact_entry_has_a_text():
    x = Fraction(10 ** 5000 + 1, 3)
    text = value_text(x)
    assert text.endswith("/3") and len(text) == 5003
