"""The durable engine: pipeline, lanes, outbox, /stop, crashes, chaos, scale-out."""
