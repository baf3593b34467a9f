"""Hypothesis profiles for the property tests of server bytes and user files (issue 19).

``ci`` (the default, in ``make test``): a bounded number of examples per target, seeded, so a run is
the same every time. ``fuzz`` (``make fuzz``): ``IK_FUZZ_EXAMPLES`` seeded cases per target (default
100,000). Pick one with ``--hypothesis-profile`` or ``HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "derandomize": True, "database": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=int(os.environ.get("IK_CI_EXAMPLES", "300")), **_COMMON)
settings.register_profile("fuzz", max_examples=int(os.environ.get("IK_FUZZ_EXAMPLES", "100000")), **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
