"""Progress on stderr: a tqdm bar or step timer when stderr is a terminal, none otherwise
and none with ``--no-progress`` / ``--quiet``."""

import io

import pytest

from exactattn.cli import main
from exactattn.present import stream


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(monkeypatch, argv, terminal=True):
    err, out = (_Terminal() if terminal else io.StringIO()), io.StringIO()
    monkeypatch.setattr(stream, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdout", out)
    code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv, shown", [
    (["prove", "-q", "causal_first_position", "crossover"], "proofs"),
    (["verify", "--n", "64", "--d-k", "8"], "certifying 512 outputs")])
def test_a_terminal_gets_progress_and_no_progress_turns_it_off(monkeypatch, argv, shown):
    code, out, err = _run(monkeypatch, argv)
    assert code == 0 and shown in err
    code, quiet_out, quiet_err = _run(monkeypatch, argv + ["--no-progress"])
    assert code == 0 and quiet_err == "" and quiet_out == out
    code, _, piped = _run(monkeypatch, argv, terminal=False)
    assert code == 0 and piped == ""


def test_quiet_is_no_progress_where_a_command_has_no_quiet_of_its_own(monkeypatch):
    code, _, err = _run(monkeypatch, ["verify", "--n", "4", "--d-k", "4", "--quiet"])
    assert (code, err) == (0, "")
