"""Cron jobs and reminders: the ledger, catch-up, many jobs."""
