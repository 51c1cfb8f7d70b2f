"""Slack: payloads in, events or skip reasons out; ``chat.postMessage`` exactly once.

What is here (issue 34):

- :mod:`.normalize` (with :mod:`.interactions` and :mod:`.fields`) — pure: an Events API
  body, a slash command or a ``block_actions`` payload in, an ``Event`` or a ``Dropped``
  out. Keys are ``sl:{api_app_id}:…``, so two agents with their own Slack apps in one
  channel each get their own event. This is what the tests and the fuzzers call.

Also here: :mod:`.send` (``chat.postMessage`` with the outbox key in ``metadata``, read
back before a send that may already have happened; :mod:`.mrkdwn`), :mod:`.ingress` (the
Events API over HTTP), :mod:`.adapter` and :mod:`.config` (``SlackConfig``, defined with
the other platforms' in ``config/platforms.py``). Enabled by ``platforms.slack`` (and an
agent's ``agents[i].platforms.slack``); docs/slack.md. Files are still to come. Only
the adapter modules import slack_sdk.
"""
