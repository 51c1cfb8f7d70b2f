"""The PostgreSQL store's own parts: array binds, group commits, advisory locks."""
