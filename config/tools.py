"""``agent.tools``: which built-in tools the model may call, and ``agent.max_tool_rounds``.

Each built-in is switched on by default and off with ``false``; an unknown name is an
error naming its key path (``agent.tools.remembr``), like every other typo. Tools from
Python (``@router.tool``) and MCP servers are not switched here: configuring them is
already the choice.
"""

from __future__ import annotations

from tether.config.section import Section

#: Rounds of tool calls one turn may make before the model must answer without tools.
DEFAULT_MAX_TOOL_ROUNDS = 8


class ToolsConfig(Section):
    #: ``remember``: save a fact the person asked to keep (like ``/remember``).
    remember: bool = True
    #: ``forget``: retire saved facts that match a text (like ``/forget``).
    forget: bool = True
    #: ``schedule``: a one-off reminder or a recurring job, made from chat.
    schedule: bool = True
    #: ``list_schedules``: the jobs this conversation made.
    list_schedules: bool = True
    #: ``cancel_schedule``: stop one of them.
    cancel_schedule: bool = True

    def enabled(self, name: str) -> bool:
        """Whether built-in ``name`` is on (a name this section does not know is off)."""
        return bool(getattr(self, name, False)) if name in type(self).model_fields else False
