"""``http.ui`` (the web console) and ``platforms.web`` (the web chat).

The console is an admin surface on the gateway's HTTP server, so it is off unless it is
enabled *with* a credential: ``password_hash`` (an scrypt hash, made with ``python -m
tether.gateway.web.passwd``) or ``token`` (a long random string, best given through the
environment: ``token: ${TETHER_UI_TOKEN}``). Enabled without either is a config error
naming ``http.ui``, never a console that anyone on the port could open.
"""

from __future__ import annotations

import re
from typing import Self

from pydantic import Field, SecretStr, field_validator, model_validator

from tether.config.section import Section

#: ``scrypt$N$r$p$salt$hash`` with salt and hash in URL-safe base64 (no padding).
PASSWORD_HASH = re.compile(
    r"scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9_-]{16,})\$([A-Za-z0-9_-]{32,})"
)
#: A token shorter than this is a password, and would be guessed: use password_hash.
MIN_TOKEN = 16


class UiConfig(Section):
    """The web console under ``/ui``: dashboard, events, dead letters, conversations, jobs."""

    enabled: bool = False
    #: ``scrypt$N$r$p$salt$hash`` (``python -m tether.gateway.web.passwd`` makes one).
    password_hash: SecretStr | None = None
    #: An admin token typed at the login page instead of a password (16+ characters).
    token: SecretStr | None = None
    #: How long a login lasts, in seconds.
    session_seconds: float = Field(default=12 * 3600.0, gt=0)
    #: Wrong logins one client address may make within ``login_window`` seconds; more are
    #: answered 429 until the window has passed.
    login_attempts: int = Field(default=5, ge=1)
    login_window: float = Field(default=300.0, gt=0)

    @field_validator("password_hash")
    @classmethod
    def _hash_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not PASSWORD_HASH.fullmatch(value.get_secret_value()):
            raise ValueError(
                "should be scrypt$N$r$p$salt$hash;"
                " make one with python -m tether.gateway.web.passwd"
            )
        return value

    @field_validator("token")
    @classmethod
    def _token_length(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_TOKEN:
            raise ValueError(f"should be at least {MIN_TOKEN} characters (or use password_hash)")
        return value

    @model_validator(mode="after")
    def _credential_when_enabled(self) -> Self:
        if self.enabled and self.password_hash is None and self.token is None:
            raise ValueError(
                "enabled: true needs an admin credential: password_hash"
                " (python -m tether.gateway.web.passwd) or token"
            )
        return self


class WebChatConfig(Section):
    """A chat page at ``/ui/chat`` that talks to the agent through the full pipeline.

    Behind the console's login (it needs ``http.ui.enabled``): a way to try an agent
    without creating a bot account anywhere, not a public chat widget.
    """

    enabled: bool = False
