"""The code a config names, imported: plugin routers and cron jobs' handlers.

``plugins: ["mybot.handlers:router"]`` and ``jobs[i].handler: "mybot.jobs:report"`` are
imported from the config file's directory (:mod:`tether.config.plugin_path`), once per
process. Every failure is one line naming the key (``plugins[0]``, ``jobs[2].handler``):
a plugin's own bug at import is the operator's to see, not a traceback through ours.
"""

from __future__ import annotations

import inspect

from tether.config import plugin_path
from tether.config.schema import Settings
from tether.errors import GatewayError, JobError
from tether.gateway.handler.routing import Handler, Router

_handlers: dict[str, Handler] = {}


def import_router(key: str, spec: str) -> Router:
    """The router ``spec`` names (``package.module:router``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GatewayError(f"{key}: {spec!r} should be 'package.module:router'")
    try:
        module = plugin_path.import_module(module_name)
    except ImportError as exc:
        raise GatewayError(f"{key}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:
        raise GatewayError(
            f"{key}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    router = getattr(module, attr, None)
    if not isinstance(router, Router):
        raise GatewayError(f"{key}: {spec!r} is not a tether.Router")
    return router


def import_handler(spec: str) -> Handler:
    """``package.module:function`` → the async callable, imported once per process."""
    found = _handlers.get(spec)
    if found is not None:
        return found
    module_name, _, attr = spec.partition(":")
    try:
        module = plugin_path.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import {module_name!r}: {exc}") from None
    function = getattr(module, attr, None)
    if function is None:
        raise AttributeError(f"{module_name!r} has no {attr!r}")
    if not callable(function):
        raise TypeError(f"{spec!r} is not callable")
    call = getattr(function, "__call__", None)  # noqa: B004 - async callable objects too
    if not (inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)):
        raise TypeError(f"{spec!r} should be an async function taking the Context")
    handler: Handler = function
    _handlers[spec] = handler
    return handler


def check_job_handlers(settings: Settings) -> None:
    """Every job's ``handler`` imports, so that a typo fails at start, not at 18:00."""
    for index, config in enumerate(settings.jobs):
        if config.handler is None:
            continue
        try:
            import_handler(config.handler)
        except (ImportError, AttributeError, TypeError) as exc:
            raise JobError(f"jobs[{index}].handler: {exc}") from None
