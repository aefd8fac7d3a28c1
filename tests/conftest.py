"""Shared test setup: Hypothesis profiles (``ci``: 200 examples; ``dev``: 30)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE",
                                     "ci" if os.environ.get("CI") else "dev"))
