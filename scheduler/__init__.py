"""Cron jobs as events (see the scheduler issue); nothing here yet is imported by the core."""
