"""A hypothesis profile for mutation testing (`--hypothesis-profile=mutmut`, set in pyproject.toml's
[tool.mutmut]); registered only, so ordinary runs keep hypothesis' defaults.

Under mutmut every call into a mutated module goes through its trampoline, and the machine is
often shared: generation and examples are slower, so the time-based health check and the
deadline would fail clean code. Derandomized: the same examples for every mutant, so a verdict
never depends on luck.
"""

from hypothesis import HealthCheck, settings

# By hand, the long run of the `simulate` fuzz (tests/simulate/test_fuzz.py, docs/testing.md).
settings.register_profile("simulate-long", max_examples=3000, deadline=None)
settings.register_profile(
    "mutmut", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
