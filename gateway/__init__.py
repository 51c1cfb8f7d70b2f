"""Tether's core: routing, lanes, the durable pipeline, the outbox, the agent and the CLI.

A bot author imports from the package root instead (``from tether import Context,
Router``); this package's ``__init__`` imports nothing, so that loading one module of
the core (``tether.gateway.ops.logs``, say) does not load them all.
"""
