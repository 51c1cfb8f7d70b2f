"""Credentials inside values that are not secrets as a whole: URLs and named entries.

A ``memory.store`` URL, an LLM ``base_url`` or a proxy carries its password in the
userinfo (``postgresql://tether:PASSWORD@db/tether``) or in a query parameter
(``?api_key=…``); a ``headers`` or ``env`` map carries one under a name such as
``Authorization``. Such a value stays printable — ``tether check`` must still show which
host and database are meant — so these helpers find only the secret parts: for the log
redactor (:meth:`Settings.secrets`) and to mask them in place (:meth:`Settings.masked`,
config errors). One set of rules for both, so what is masked is what is scrubbed.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

MASK = "***"

#: Names whose value is a credential: ``token``, ``app_secret``, ``api_keys``,
#: ``Authorization``, ``X-Api-Key``, ``password``, a SAS ``sig``, ... Matched on a whole
#: word of the name, so ``max_tokens`` or ``keepalive`` are not secrets.
SECRET_NAME = re.compile(
    r"(?:^|[_.-])(?:token|secret|keys?|password|passwd|pwd|auth|authorization|signature|sig"
    r"|credentials?)(?:[_-]hash)?$",
    re.IGNORECASE,
)

# A URL anywhere in a string (an env value may be ``--db=postgresql://…``): its authority
# (``user:password@host:port``), path and query, each ending where the URL grammar says.
_URL = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"
    r"(?P<authority>[^/?#\s]*)(?P<path>[^?#\s]*)(?:\?(?P<query>[^#\s]*))?"
)


def secret_name(name: object) -> bool:
    """Whether a value stored under ``name`` (a key, a header, a query parameter) is a
    credential."""
    return isinstance(name, str) and SECRET_NAME.search(name) is not None


def url_secrets(text: str) -> list[str]:
    """The credentials in the URLs in ``text``: each password and each secret-named query
    value, as written (percent-encoded) and decoded, since a library's error may show either.
    """
    if "://" not in text:  # no URL (most config strings): skip the regex
        return []
    found: list[str] = []
    for url in _URL.finditer(text):
        password = _password(url["authority"])
        if password:
            found += [password, unquote(password)]
        for name, value in _query_items(url["query"]):
            if value and secret_name(unquote_plus(name)):
                found += [value, unquote_plus(value)]
    return [secret for secret in found if secret]


def mask_urls(text: str) -> str:
    """``text`` with every URL's password and secret-named query values replaced by ``***``;
    the scheme, user, host, port, path and other parameters stay as written."""
    return _URL.sub(_masked_url, text) if "://" in text else text


def _masked_url(url: re.Match[str]) -> str:
    authority, query = url["authority"], url["query"]
    if _password(authority):
        userinfo, _, hostport = authority.rpartition("@")
        authority = f"{userinfo.partition(':')[0]}:{MASK}@{hostport}"
    masked = url.group()[: url.start("authority") - url.start()] + authority + url["path"]
    if query is None:
        return masked
    items = [
        f"{name}={MASK}" if value and secret_name(unquote_plus(name)) else item
        for item, (name, value) in zip(query.split("&"), _query_items(query), strict=True)
    ]
    return f"{masked}?{'&'.join(items)}"


def _password(authority: str) -> str:
    """The password of ``user:password@host`` (the last ``@`` ends the userinfo, as in
    urllib), or ``""``."""
    userinfo, at, _ = authority.rpartition("@")
    return userinfo.partition(":")[2] if at else ""


def _query_items(query: str | None) -> list[tuple[str, str]]:
    """``a=1&b=2`` → ``[("a", "1"), ("b", "2")]``, one pair per ``&``-item, undecoded."""
    if query is None:
        return []
    return [(name, value) for name, _, value in (item.partition("=") for item in query.split("&"))]
