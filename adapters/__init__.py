"""Platform adapters: each verifies, normalizes and sends; everything durable is in the core."""
