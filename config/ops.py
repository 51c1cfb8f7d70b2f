"""``ops:``: the gateway watching itself (``ops.watchdog``) and telling someone
(``ops.alerts``).

Every threshold has a default that stays quiet on a healthy gateway, so the watchdog
can run everywhere without configuration; an operator only has to say where alerts go.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from tether.config.section import Section
from tether.events import Target


class WatchdogConfig(Section):
    """What the watchdog samples, and from which value on each check counts as tripped."""

    enabled: bool = True
    #: Seconds between two rounds of checks (outbox age, dead letters, store writes,
    #: disconnected platforms): cheap reads, but reads, so not on every event.
    interval: float = Field(default=10.0, gt=0)
    #: Seconds between two samples of the event loop's lag: a timer that notes how late
    #: it woke, which costs nothing measurable.
    lag_interval: float = Field(default=0.5, gt=0)
    #: Lag in seconds above which ``/readyz`` fails and the ``loop_lag`` alert trips.
    loop_lag: float = Field(default=1.0, gt=0)
    #: Seconds a lag spike keeps counting: a loop blocked once for 2 s is reported for
    #: this long, so a probe or a person can still see it after the loop is free again.
    lag_window: float = Field(default=30.0, gt=0)
    #: Seconds a platform may stay disconnected before its alert trips.
    disconnected: float = Field(default=300.0, gt=0)
    #: Seconds the oldest unsent outbox row may wait before the alert trips.
    outbox_age: float = Field(default=600.0, gt=0)
    #: Dead letters within the last hour above which the alert trips.
    dead_letters_per_hour: int = Field(default=10, ge=0)
    #: Seconds one small store write may take before the alert trips.
    store_write: float = Field(default=2.0, gt=0)


class AlertsConfig(Section):
    """Where a tripped check is told, and how often at most."""

    #: ``platform:chat[:thread]``: one message when a check trips, one when it clears.
    #: Without it, alerts are still logged and listed by ``tether status``.
    deliver: str | None = None
    #: Seconds: one alert (and one recovery) per check within a window, however often
    #: it flaps; a restart inside the window does not send it again.
    window: float = Field(default=3600.0, gt=0)

    @field_validator("deliver")
    @classmethod
    def _target(cls, value: str | None) -> str | None:
        if value is not None:
            Target.parse(value)  # its ValueError names the expected shape
        return value

    @property
    def target(self) -> Target | None:
        return Target.parse(self.deliver) if self.deliver else None


class OpsConfig(Section):
    watchdog: WatchdogConfig = WatchdogConfig()
    alerts: AlertsConfig = AlertsConfig()
