"""The suite's own rules: Hypothesis profiles, no secret in any captured output, logs to
the test's stderr, and markers given by what a test uses (``slow``, ``postgres``,
``browser``, ``crash``; see docs/development.md). Fixtures are in tests/fixtures.py,
helpers in tests/support/."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from tests.support.config import SECRETS
from tether.gateway.ops import logs

pytest_plugins = ["tests.fixtures", "tether.testing.plugin"]

# Hypothesis: few examples per property in the suite, so `make test` stays fast; many
# under `make fuzz` (HYPOTHESIS_PROFILE=fuzz, on the tests Hypothesis marks `hypothesis`).
# Tests leave max_examples to the profile. No deadline: two shared cores and a slow first
# import make per-example timings noise, not findings.
_PROFILE = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
hypothesis_settings.register_profile("suite", max_examples=50, **_PROFILE)
hypothesis_settings.register_profile("fuzz", max_examples=5_000, print_blob=True, **_PROFILE)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fail any test whose captured logs (stdout/stderr/log records) contain a secret."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or report.failed:
        return
    captured = "".join(content for _name, content in report.sections)
    leaked = sorted(s for s in SECRETS if s in captured)
    if leaked:
        report.outcome = "failed"
        report.longrepr = f"a configured secret appeared in captured output: {leaked}"


@pytest.fixture(autouse=True)
def _logging() -> None:
    """Log to this test's captured stderr (a CLI call in an earlier test may have
    pointed structlog at a stream that is closed now)."""
    logs.configure("info", "json", stream=sys.stderr)


#: What a test uses that makes it one of these; ``slow`` follows from each.
BY_FIXTURE = {
    "postgres": {"pg_dsn", "pg_server"},
    "browser": {"browser", "chat_page"},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers given by what a test uses: the PostgreSQL server (its fixtures, or the
    ``store`` fixture's PostgreSQL case) and a browser; a crash, PostgreSQL or browser
    test is ``slow`` too, so ``-m "not slow"`` leaves the minute-long inner loop."""
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("store") == "postgres":
            uses.add("pg_dsn")
        for marker, fixtures in BY_FIXTURE.items():
            if uses & fixtures:
                item.add_marker(marker)
        if any(item.get_closest_marker(m) for m in ("crash", "postgres", "browser")):
            item.add_marker("slow")
