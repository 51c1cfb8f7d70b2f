"""Slack: the pure half so far — payloads in, events or skip reasons out.

What is here (issue 34, in progress):

- :mod:`.normalize` (with :mod:`.interactions` and :mod:`.fields`) — pure: an Events API
  body, a slash command or a ``block_actions`` payload in, an ``Event`` or a ``Dropped``
  out. Keys are ``sl:{api_app_id}:…``, so two agents with their own Slack apps in one
  channel each get their own event. This is what the tests and the fuzzers call.

Not built yet, and so not selectable in ``platforms:``: the ingress (Socket Mode and the
Events API over HTTP), sends with the outbox key in the message's metadata and their
reconciliation after a crash, edits, files. Nothing here imports slack_sdk, so the
normalizer runs on any install.
"""
