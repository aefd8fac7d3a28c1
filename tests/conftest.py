"""Shared test setup: Hypothesis profiles (``ci``: 200 examples; ``dev``: 30)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE",
                                     "ci" if os.environ.get("CI") else "dev"))


import pytest  # noqa: E402


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: ``cli("scores", "--digits", "6") -> (status, stdout, stderr)``.

    argparse's own errors leave through ``SystemExit(2)``; that code is returned too.
    """
    from exactattn.cli import main

    def run(*argv):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err
    return run
