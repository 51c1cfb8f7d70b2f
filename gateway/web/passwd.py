"""The console's password hashes: scrypt from the standard library, no new dependency.

Make one for ``http.ui.password_hash``::

    python -m tether.gateway.web.passwd          # asks for the password twice

The hash is ``scrypt$N$r$p$salt$hash`` (salt and hash URL-safe base64): the parameters
travel with it, so a later Tether can raise the cost without breaking old hashes.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import sys

from tether.config.console import PASSWORD_HASH

#: 2**15 * 8 * 128 bytes = 32 MiB and ~0.1 s per check: slow for a guesser, fine for a login.
N, R, P = 2**15, 8, 1


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * 1024 * 1024, dklen=32
    )


def hash_password(password: str, *, n: int = N, r: int = R, p: int = P) -> str:
    salt = os.urandom(16)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(_scrypt(password, salt, n, r, p))}"


def verify_password(password: str, stored: str) -> bool:
    """True when ``password`` is the one ``stored`` was made from (constant-time compare)."""
    match = PASSWORD_HASH.fullmatch(stored)
    if match is None:
        return False
    n, r, p = (int(match[i]) for i in (1, 2, 3))
    try:
        derived = _scrypt(password, _unb64(match[4]), n, r, p)
    except (ValueError, MemoryError):  # parameters scrypt refuses: no password matches
        return False
    return hmac.compare_digest(derived, _unb64(match[5]))


def main() -> int:
    first = getpass.getpass("console password: ")
    if len(first) < 8:
        print("use at least 8 characters", file=sys.stderr)
        return 1
    if getpass.getpass("again: ") != first:
        print("the two passwords differ", file=sys.stderr)
        return 1
    print(hash_password(first))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
