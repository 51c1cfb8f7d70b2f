"""Tool calls a person approves first: the card, the durable wait, the decision.

A tool needs approval when it says so (``@router.tool(approval=True)``), when its MCP
server lists it (``mcp.servers.NAME.approval: ["delete_*"]``), or when
``agent.tools.approvals.require`` names it (any tool, the built-ins included, by name or
shell pattern). Before such a call runs, :func:`gate` posts an approval card — the tool,
the exact arguments, a short hash of them, Approve / Deny — to the conversation or to
``agent.tools.approvals.to`` (an ops chat, a DM), and the turn waits durably for a press
(``gateway/handler/asking.py``). The press resumes the turn; the model's rounds replay
from their steps, so the same call reaches the same place and reads the decision:

- **approved**: the call runs — once, through the tool step's own marks
  (``gateway/tools/execute.py``) — and only if its arguments hash to the approved hash:
  arguments that differ from what was approved (a model asked again that chose other
  ones) are never run on that approval; a new card asks for them.
- **denied**: the model reads ``denied by NAME``; **expired**: it reads that no approver
  answered in time. Both are stored as the call's outcome, so no re-run asks again.

Who may decide is ``agent.tools.approvals.approvers``: ``admins`` (the people
``access.admins`` names — a chat named there does not make its members approvers — the
owner, the console), ``asker`` (the person the turn answers), or ``platform:user``
patterns. It fails closed: with nobody configured the call is denied without a card,
and a press by anyone else is refused with a notice (``approval.refused``). Each request
and decision is the wait's row (``tether approvals list``, the console's approvals page),
a log line (``approval.requested/approved/denied/expired``) and a count in
``tether_approvals_total{tool,outcome}``.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from tether import metrics
from tether.buttons import Button
from tether.config.schema import Settings
from tether.config.tools import ApprovalsConfig
from tether.errors import GatewayError
from tether.events import Event, Target
from tether.gateway.core.waits import Waits
from tether.gateway.handler.asking import wait_for
from tether.gateway.handler.context import turn_of
from tether.gateway.handler.tool import Tool
from tether.gateway.tools import bounds
from tether.memory.waits import Wait

if TYPE_CHECKING:
    from tether.gateway.builtin.access import Access
    from tether.gateway.handler.context import Context

ADMINS, ASKER = "admins", "asker"
APPROVE, DENY = "approve", "deny"
#: How much of the arguments the card shows (the hash covers all of them).
_CARD_ARGUMENTS = 1500


def arguments_hash(name: str, text: str) -> str:
    """The short hash a card shows and a decision is bound to: the tool and the exact
    argument text the model sent."""
    digest = hashlib.sha256(f"{name}\0{text}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:12]


def needs_approval(tool: Tool | None, name: str, config: ApprovalsConfig) -> bool:
    if tool is not None and tool.approval:
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in config.require)


async def gate(
    ctx: Context, tool: Tool | None, name: str, text: str, log: Any, *, replay: bool = False
) -> str | None:
    """None when the call may run (approved for exactly ``text``); else the text the
    model reads (denied, expired). Suspends the turn while no decision exists.
    ``replay``: a stored call passing its wait again (the trace, the card's outbox key);
    what it decided was logged and counted when it was decided."""

    config = bounds.limits(ctx).approvals
    if not needs_approval(tool, name, config):
        return None
    hashed = arguments_hash(name, text)
    if not config.approvers:
        if not replay:
            log.warning("approval.denied", reason="no approvers configured", hash=hashed)
            metrics.APPROVALS.labels(name, "denied").inc()
        return (
            f"denied: {name} needs a person's approval and no approver is configured"
            " (agent.tools.approvals.approvers); it was not run"
        )
    while True:  # each stored decision for other arguments is passed by; then a new card
        wait = await _ask(ctx, config, name, text, hashed)
        answer = wait.answer or {}
        decided_by = str(answer.get("name") or answer.get("sender") or "an approver")
        if wait.status == "answered" and wait.detail.get("hash") != hashed:
            if not replay:
                log.warning("approval.invalidated", wait=wait.id, approved=wait.detail.get("hash"))
            continue
        if wait.status == "answered" and answer.get("decision") == "approved":
            return None
        if wait.status == "answered":
            return f"denied by {decided_by}: the person did not approve this call; it was not run"
        if wait.status == "expired":
            if not replay:
                metrics.APPROVALS.labels(name, "expired").inc()
                log.warning("approval.expired", wait=wait.id, hash=hashed)
            return (
                f"expired: no approver answered within {config.timeout:g}s; {name} was not"
                " run. Ask again if it is still wanted"
            )
        return f"cancelled: the approval of {name} was cancelled; it was not run"


async def _ask(ctx: Context, config: ApprovalsConfig, name: str, text: str, hashed: str) -> Wait:
    """The decision at this run's next wait, or the card and a suspended turn."""
    event = ctx.event
    asker = f"{event.platform}:{event.sender.id}" if event.sender else ""
    who = (event.sender.name or event.sender.id) if event.sender else "someone"
    shown = text if len(text) <= _CARD_ARGUMENTS else text[:_CARD_ARGUMENTS] + "…"
    minutes = config.timeout / 60
    card = (
        f"Approval needed: the agent wants to run {name}\n"
        f"Arguments: {shown}\n"
        f"Hash: {hashed}\n"
        f"Asked by {who} in {event.conversation.target().key}; expires in {minutes:g} min.\n"
        f"Approvers: {', '.join(config.approvers)}"
    )
    target = None if config.to == "chat" else Target.parse(config.to)
    buttons = [[Button("Approve", data=APPROVE), Button("Deny", data=DENY)]]
    detail = {
        "tool": name,
        "arguments": text if len(text) <= 16_384 else shown,
        "hash": hashed,
        "approvers": list(config.approvers),
        "asker": asker,
    }
    turn = turn_of(ctx)
    return await wait_for(
        ctx,
        turn.asking,
        turn.store,
        "approval",
        card,
        target=target,
        buttons=buttons,
        sender=None,
        timeout=config.timeout,
        detail=detail,
        quote=False,
        same_question=False,
    )


def check_target(settings: Settings, platforms: Collection[str]) -> None:
    """``agent.tools.approvals.to`` must name an enabled platform, or every card would
    fail at the send and the turn die: said at ``tether check``, start and reload."""
    to = settings.agent.tools.approvals.to
    platform = to.partition(":")[0]
    if to != "chat" and platform not in platforms:
        enabled = ", ".join(sorted(platforms)) or "none"
        raise GatewayError(
            f"agent.tools.approvals.to: {to!r}: platform {platform!r} is not enabled"
            f" (enabled: {enabled})"
        )


# -- deciding: what a press on a card does (wired into Waits by the gateway) -----------


def attach(waits: Waits, access: Callable[[], Access]) -> None:
    """Let presses on approval cards be decided: ``access`` is the gateway's current
    access lists (a reload replaces them), for ``admins``."""

    async def may_decide(wait: Wait, event: Event) -> bool:
        who = f"{event.platform}:{event.sender.id}" if event.sender else ""
        for rule in wait.detail.get("approvers") or []:
            if rule == ADMINS and await access().is_admin(event, person=True):
                return True
            if rule == ASKER and who and who == wait.detail.get("asker"):
                return True
            if rule not in (ADMINS, ASKER) and who and fnmatch.fnmatchcase(who, str(rule)):
                return True
        return False

    waits.may_decide = may_decide
    waits.decision = decision


def decision(wait: Wait, event: Event, choice: str) -> tuple[dict[str, Any], str] | None:
    """What a press on ``wait``'s card records, and what its chat is told; None for a
    press that is neither of the card's two buttons."""
    choices = wait.detail.get("choices") or []
    index = int(choice) if choice.isdigit() else -1
    if not 0 <= index < len(choices) or choices[index][1] not in (APPROVE, DENY):
        return None
    approved = choices[index][1] == APPROVE
    sender = event.sender
    name = (sender.name or sender.id) if sender else "someone"
    answer = {
        "decision": "approved" if approved else "denied",
        "text": choices[index][0],
        "sender": f"{event.platform}:{sender.id}" if sender else "",
        "name": name,
        "key": event.key,
        "hash": wait.detail.get("hash"),
    }
    tool = wait.detail.get("tool", "the tool")
    verb = "Approved" if approved else "Denied"
    return answer, f"{verb} by {name}: {tool} ({wait.detail.get('hash')})."


def audit_row(wait: Wait) -> dict[str, Any]:
    """One approval as ``tether approvals list --json`` and the console show it."""
    answer = wait.answer or {}
    outcome = answer.get("decision") if wait.status == "answered" else wait.status
    return {
        "wait": wait.id,
        "event": wait.event_key,
        "tool": wait.detail.get("tool"),
        "hash": wait.detail.get("hash"),
        "arguments": wait.detail.get("arguments"),
        "asked_by": wait.detail.get("asker"),
        "chat": wait.chat,
        "requested": wait.created,
        "deadline": wait.deadline,
        "outcome": "pending" if wait.status == "open" else outcome,
        "decided_by": answer.get("sender") or None,
        "decided_name": answer.get("name") or None,
        "decided": wait.resolved,
    }
