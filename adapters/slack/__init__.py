"""Slack: the pure half so far — payloads in, events or skip reasons out.

What is here (issue 34, in progress):

- :mod:`.normalize` (with :mod:`.interactions` and :mod:`.fields`) — pure: an Events API
  body, a slash command or a ``block_actions`` payload in, an ``Event`` or a ``Dropped``
  out. Keys are ``sl:{api_app_id}:…``, so two agents with their own Slack apps in one
  channel each get their own event. This is what the tests and the fuzzers call.

Also here: :mod:`.send` (``chat.postMessage`` with the outbox key in ``metadata``, read
back before a send that may already have happened; :mod:`.mrkdwn`), :mod:`.ingress` (the
Events API over HTTP), :mod:`.adapter` and :mod:`.config` (``SlackConfig`` until
``platforms.slack`` is wired). Not selectable in ``platforms:`` yet; Socket Mode and
files are still to come. Only the adapter modules import slack_sdk.
"""
