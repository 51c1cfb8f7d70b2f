"""The stores: one contract over SQLite, in-memory and PostgreSQL, health, batching, tokens."""
