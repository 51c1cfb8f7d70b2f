"""A careless handler that leaks the bot token in the forms an exact-string mask misses:
the secret half alone, percent-encoded in a URL, and escaped inside JSON text.

Each form must be scrubbed anyway: from log lines, the dead letter, and `tether dead`.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from tether import Context, Fatal, Router

router = Router("leaky_forms")


@router.text(r"^leak forms$")
async def leak_forms(ctx: Context) -> None:
    token = os.environ["TG_TOKEN"]
    half = token.split(":", 1)[1]
    encoded = quote(token, safe="")
    ctx.log.info(
        "leaky.forms",
        half=half,
        url=f"https://proxy.example/bot{encoded}/getMe",
        body=json.dumps({"text": f"token\n{token}"}),
    )
    ctx.memory.add("user", f"the secret half is {half}")
    raise Fatal(f"POST https://proxy.example/bot{encoded}/sendMessage failed: key {half}")
