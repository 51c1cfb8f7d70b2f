"""``http.ui`` (the web console) and ``platforms.web`` (the web chat).

The console is an admin surface on the gateway's HTTP server, so it is off unless it is
enabled *with* a credential: ``password_hash`` (an scrypt hash, made with ``python -m
tether.gateway.web.passwd``) or ``token`` (a long random string, best given through the
environment: ``token: ${TETHER_UI_TOKEN}``). Enabled without either is a config error
naming ``http.ui``, never a console that anyone on the port could open.

Nor one whose password and cookie cross a network in plain text: a console on an
``http.host`` other than a loopback address (``0.0.0.0``, a LAN address, a name) is
refused by ``tether check`` and at start (:func:`exposure_problem`) unless
``behind_tls_proxy`` says a reverse proxy terminates TLS in front of it (the gateway
serves plain HTTP only). And it answers only to the host names in ``allowed_hosts``
(the ``Host`` header), so a page on another site cannot reach it through DNS
rebinding: a name of theirs that resolves to 127.0.0.1 is still their name.
"""

from __future__ import annotations

import ipaddress
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
#: An ``allowed_hosts`` entry: a host name (``*.`` for its subdomains) or an IP address.
HOST_NAME = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
#: The names a browser on this machine uses for it: what the console answers by default.
LOOPBACK_HOSTS = ["localhost", "127.0.0.1", "::1"]


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
    #: A reverse proxy in front terminates TLS (the browser uses HTTPS to reach it):
    #: what lets the console listen on an ``http.host`` that is not loopback.
    behind_tls_proxy: bool = False
    #: The host names the console answers to (the ``Host`` header, without its port;
    #: ``*.example.com`` for subdomains). Any other is refused, against DNS rebinding;
    #: behind a proxy that passes the browser's ``Host`` on, add the proxy's name.
    allowed_hosts: list[str] = Field(default_factory=lambda: list(LOOPBACK_HOSTS), min_length=1)

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

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        names = []
        for entry in value:
            name = entry.strip().lower().rstrip(".")
            if name.startswith("[") and name.endswith("]"):
                name = name[1:-1]
            if not (HOST_NAME.fullmatch(name) or _is_address(name)):
                raise ValueError(
                    f"{entry!r} is not a host name or an IP address"
                    " (no scheme, port or path: example.com, *.example.com, 10.0.0.5)"
                )
            names.append(name)
        return names

    def allows(self, host: str) -> bool:
        """Whether the console answers to a request whose ``Host`` header is ``host``."""
        name = bare_host(host)
        return any(
            name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:]))
            for allowed in self.allowed_hosts
        )

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


def bare_host(host: str) -> str:
    """``host`` as compared: lower case, without a port or an IPv6 address's brackets."""
    name = host.strip().lower().rstrip(".")
    if name.startswith("["):  # [::1] or [::1]:8080
        return name[1 : name.find("]")] if "]" in name else name[1:]
    if name.count(":") == 1:  # name:port (an IPv6 address has several colons)
        name = name.split(":", 1)[0]
    return name


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether the server bound to ``host`` is reachable from this machine only."""
    name = bare_host(host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposure_problem(host: str, ui: UiConfig) -> str | None:
    """Why the console may not run on ``http.host`` ``host`` (None: it may).

    The gateway serves plain HTTP. On loopback that stays on this machine; anywhere else
    the password or token typed at the login, and the session cookie on every request,
    cross the network readable by anyone on the path, unless a TLS proxy in front is
    what the browser talks to, which only the YAML can say."""
    if not ui.enabled or ui.behind_tls_proxy or is_loopback(host):
        return None
    return (
        f"http.ui: the console on http.host {host!r} (not a loopback address) would send"
        " its password or token and its session cookie over plain HTTP to every network"
        " that address reaches. Bind http.host to 127.0.0.1 and reach it through a TLS"
        " reverse proxy, then set http.ui.behind_tls_proxy: true (see docs/console.md)"
    )
