"""A careless handler: it logs the bot token and fails with the token in the error.

Secrets must be scrubbed anyway: from log lines, tracebacks and dead-letter snapshots.
"""

from __future__ import annotations

import os

from tether import Context, Fatal, Router

router = Router("leaky")


@router.text(r"^leak$")
async def leak(ctx: Context) -> None:
    token = os.environ["TG_TOKEN"]
    ctx.log.info("leaky.debug", token=token, url=f"https://api.telegram.org/bot{token}/getMe")
    ctx.memory.add("user", f"my token is {token}")
    raise Fatal(f"request to https://api.telegram.org/bot{token}/sendMessage failed")
