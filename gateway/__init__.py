"""Tether's core: events, routing, the durable pipeline, the outbox and the CLI.

What a bot author imports::

    from gateway import Context, Router, Retryable, Fatal
"""

from gateway.context import Context
from gateway.errors import Fatal, Retryable
from gateway.events import Attachment, Conversation, Event, Kind, OutMessage, Sender, Target
from gateway.routing import Router

__all__ = [
    "Attachment",
    "Context",
    "Conversation",
    "Event",
    "Fatal",
    "Kind",
    "OutMessage",
    "Retryable",
    "Router",
    "Sender",
    "Target",
]
