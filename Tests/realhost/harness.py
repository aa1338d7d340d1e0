"""Scenarios, checks and the report.

A scenario is a function registered with `@scenario(...)`; it gets a `Host` (the booted machine
with tokend installed, plus helpers) and a `Checks` to record what it verified. `checks.expect`
records a failed check and carries on (the report shows every finding); `checks.require` stops
the scenario there. Any exception fails the scenario with its message.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

SCENARIOS: list[Scenario] = []


@dataclass
class Scenario:
    name: str
    title: str
    function: Callable
    flavour: str
    mode: str  # "dev", "deb" or "any": which installation it needs


def scenario(name: str, title: str, flavour: str = "minimal", mode: str = "any"):
    """Registers a scenario. `flavour`: the root it boots (roots.FLAVOURS); `mode`: "dev" for
    scenarios of the development build (scripts/test), "deb" for the package (scripts/test-package),
    "any" for both."""

    def register(function: Callable) -> Callable:
        if any(existing.name == name for existing in SCENARIOS):
            raise ValueError(f"two scenarios are named {name}")
        SCENARIOS.append(Scenario(name, title, function, flavour, mode))
        return function

    return register


class ScenarioStopped(Exception):
    pass


@dataclass
class Finding:
    ok: bool
    what: str
    detail: str = ""


@dataclass
class Checks:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def expect(self, condition: object, what: str, detail: object = "") -> bool:
        self.findings.append(Finding(bool(condition), what, "" if condition else str(detail)))
        return bool(condition)

    def require(self, condition: object, what: str, detail: object = "") -> None:
        if not self.expect(condition, what, detail):
            raise ScenarioStopped(what)

    def note(self, text: str) -> None:
        """A measurement or observation for the report (not a check)."""
        self.notes.append(text)

    @property
    def failed(self) -> bool:
        return any(not finding.ok for finding in self.findings)


@dataclass
class Outcome:
    scenario: Scenario
    checks: Checks
    seconds: float
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.checks.failed


def run_scenario(chosen: Scenario, host, log: Callable[[str], None]) -> Outcome:
    log(f"--- scenario {chosen.name}: {chosen.title}")
    checks = Checks()
    started = time.monotonic()
    error = None
    try:
        chosen.function(host, checks)
    except ScenarioStopped:
        pass
    except Exception as exception:  # the scenario's failure, reported with its trace
        error = f"{type(exception).__name__}: {exception}\n" + "".join(traceback.format_tb(exception.__traceback__)[-3:])
    outcome = Outcome(chosen, checks, time.monotonic() - started, error)
    for finding in checks.findings:
        log(f"    {'ok' if finding.ok else 'FAILED'}: {finding.what}")
        if finding.detail:
            log("        " + finding.detail.replace("\n", "\n        "))
    for note in checks.notes:
        log(f"    note: {note}")
    if error:
        log("    ERROR: " + error.rstrip().replace("\n", "\n        "))
    log(f"    scenario {chosen.name}: {'passed' if outcome.passed else 'FAILED'} ({outcome.seconds:.1f} s)")
    return outcome
