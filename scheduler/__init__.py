"""Cron jobs as events: each fire is ``cron:{job}:{scheduled UTC time}`` through the inbox.

Where things are (docs/cron.md is the user's side):

- ``cron.py``    cron expression → APScheduler trigger; fire-time iteration (DST-safe)
- ``jobs.py``    ``jobs:`` config → :class:`~tether.scheduler.jobs.Job`, fire events, ledger names
- ``ledger.py``  which missed fires run or are skipped (``catch_up``, ``grace``): pure
- ``runner.py``  :class:`~tether.scheduler.runner.Scheduler`: APScheduler wakeups → ``Inbox.accept``
- ``routing.py`` the built-in handler of fires: ``text``, ``handler``, ``prompt`` → the agent
- ``reminders.py`` reminders made in chat: stored, capped, run on a scheduler of their own
- ``bounds.py``  how often a reminder may fire (a crontab's shortest gap) and the caps
- ``cli.py``     ``tether jobs list`` / ``tether jobs run ID``

Kept import-free: ``tether.config.jobs`` imports ``tether.cron`` (validation).
"""
