"""Platform adapters: each verifies, normalizes and sends; everything durable is in the core.

Every platform is a package with the same rooms:

- ``normalize.py`` — pure: a platform payload in, an :class:`~tether.events.Event` or a
  :class:`~tether.adapters.kit.Dropped` (a skip with its reason) out; no I/O and no
  adapter instance, so tests and fuzzers call it directly;
- the ingress (``ingress.py``; Feishu: ``webhook.py`` and ``long_connection.py``) — the
  poll loop, webhook route or gateway connection; it acknowledges only after the inbox
  commit;
- ``send.py`` — the outbound calls and the classification of their errors;
- ``adapter.py`` — the :class:`~tether.adapters.base.Adapter` that wires them, loaded
  lazily by the package, so that importing ``normalize`` does not import the platform's
  library.

``base.py`` says what an adapter is; ``kit.py`` holds what every adapter needs once
(``Dropped``, ``describe``, ``open_with_retries``); ``console.py`` and ``loopback.py``
are the terminal chat and the in-process adapter that tests and benches drive.
"""
