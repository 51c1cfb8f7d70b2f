"""Operations: metrics, watchdog, logs, systemd, start faults, the HTTP server."""
