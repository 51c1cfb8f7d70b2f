"""``platforms.slack`` until the lead wires it into ``config/schema.py``: the tokens, how
events arrive, and the policy the normalizer applies.

Socket Mode (the default) needs the app-level token (``xapp-…``, scope
``connections:write``) and no public URL; the Events API needs the signing secret and
a route on the gateway's HTTP server. Both need the bot token (``xoxb-…``) to send.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator


class SlackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bot_token: SecretStr
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    mode: Literal["socket", "events"] = "socket"
    #: The Web API's base (tests point it at the fake).
    api_base: str = "https://slack.com/api/"
    #: Where the Events API, slash commands and interactivity post (``mode: events``).
    events_path: str = "/slack/events"
    #: Oldest request timestamp accepted, seconds (Slack's advice: 5 minutes).
    max_age: float = 300.0
    timeout: float = 10.0
    answer_channels: Literal["mentioned", "all"] = "mentioned"
    ignore_bots: bool = True
    rate_limits: bool = True
    #: How many recent messages of the target are read back for an outbox key.
    reconcile_depth: int = 100

    @model_validator(mode="after")
    def _tokens_for_the_mode(self) -> SlackConfig:
        if self.mode == "socket" and self.app_token is None:
            raise ValueError("mode: socket needs app_token (an xapp-… app-level token)")
        if self.mode == "events" and self.signing_secret is None:
            raise ValueError("mode: events needs signing_secret (Basic Information page)")
        return self
