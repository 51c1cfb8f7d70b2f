"""The gateway: the durable engine, the handler API, the agent, and what builds them.

One subpackage per concern, in floors, lowest first; each imports only the floors below
it (and ``memory/``, ``config/``, ``adapters/``, ``scheduler/`` and ``tether/`` beneath
all of them). ``tests/project/test_layout.py`` holds the order.

- ``ops/``      logs, the HTTP server, watchdog and alerts, systemd, the event loop
- ``llm/``      the model client: routes, fallbacks, key pools, breakers, streaming
- ``handler/``  what plugin code touches: Context, Router, ``ctx.llm``, files, tools,
                plugin loading
- ``core/``     the durable engine: inbox, throttle, dispatcher and lanes, pipeline,
                outbox, edits and files, ``/stop``, the sweep
- ``builtin/``  what every gateway answers: access, the built-in commands, echo
- ``tools/``    the tool loop, exactly-once calls, built-in tools, MCP, reminders
- ``web/``      the web console and the web chat page
- ``agent/``    the ``llm`` agent's turn, streaming, vision, reflection, cron fires,
                several agents and their rooms
- the composition root, on top: ``assembly.py`` (the parts a config makes, one builder
  for start and reload), ``app.py`` (``Gateway``: start and stop in the order that
  keeps the promise), ``reload.py``, ``serve.py`` (``tether run``), ``cli.py`` and
  ``inspection.py`` (the ``tether`` command), ``init.py`` (``tether init``)

A bot author imports from the package root instead (``from tether import Context,
Router``); this package's ``__init__`` imports nothing, so that loading one module of
the gateway (``tether.gateway.ops.logs``, say) does not load them all.
"""
