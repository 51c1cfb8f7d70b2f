"""Operations: the gateway seen from outside — logs, health, alerts, the process around it.

- ``logs.py``          structlog set up once: JSON lines (or a console on a TTY), scrubbed
- ``http.py``, ``http_guard.py``  the one HTTP server: probes, metrics, webhook routes, and
                       what one client may hold on it
- ``watchdog.py``, ``alerts.py``  the gateway watching its own health, and telling someone
- ``systemd.py``       ``sd_notify``: ``Type=notify`` and the service watchdog
- ``runtime.py``       the event loop (uvloop where it imports) and the heap
- ``start_errors.py``  what stops a start, said in one line that names the config key

The lowest floor of the gateway: it imports nothing else of it, so every floor above
may log, serve and report.
"""
