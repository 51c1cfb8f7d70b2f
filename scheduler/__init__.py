"""Cron jobs as events: each fire is ``cron:{job}:{scheduled UTC time}`` through the inbox.

Where things are (docs/cron.md is the user's side):

- ``tether/cron.py`` (the ground floor: config validates with it too) cron expression →
                 APScheduler trigger; fire-time iteration (DST-safe)
- ``jobs.py``    ``jobs:`` config → :class:`~tether.scheduler.jobs.Job`, fire events, ledger names
- ``ledger.py``  which missed fires run or are skipped (``catch_up``, ``grace``): pure
- ``runner.py``  :class:`~tether.scheduler.runner.Scheduler`: APScheduler wakeups → the
                 inbox's accept (an ``Intake``)
- ``reminders.py`` reminders made in chat: stored, capped, run on a scheduler of their own
- ``bounds.py``  how often a reminder may fire (a crontab's shortest gap) and the caps
- ``cli.py``     ``tether jobs list`` / ``tether jobs run ID``

The built-in handler of fires (``text``, ``handler``, ``prompt`` → the agent, ``reflect``,
reminders) is a floor above, in ``gateway/agent/cron.py``: this folder imports nothing of
the gateway.
"""
