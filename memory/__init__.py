"""Durable state: the store protocol, its SQLite and in-memory implementations, and
conversation memory built on top of them."""
