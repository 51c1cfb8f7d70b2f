"""A tool from a Python function: its JSON schema from the signature and docstring.

``@router.tool`` hands the function here. The parameters become a pydantic model, so the
schema the model sees and the validation of what it sends are one definition: a
parameter's annotation is its type, its default makes it optional, and its description
comes from the docstring's ``Args:`` section (Google style); the docstring's first
paragraph describes the tool. A parameter annotated ``Context`` (or named ``ctx``) is
given the handler's context and is not part of the schema.

Arguments the model got wrong (missing, wrong type, unknown) never reach the function:
the validation errors go back to the model as the tool's result (:class:`ToolError`), so
it can correct itself on its next round.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tether.errors import ToolError
from tether.gateway.handler.tool import DEFAULT_TIMEOUT, Tool

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

ToolFunction = Callable[..., Awaitable[Any]]

#: ``name (type): text`` or ``name: text`` lines of a docstring's ``Args:`` section.
_ARG_LINE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples):\s*$"
)


def python_tool(
    fn: ToolFunction,
    *,
    name: str | None = None,
    idempotent: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    approval: bool = False,
) -> Tool:
    """The :class:`Tool` that calls ``fn`` with validated arguments, cancelled after
    ``timeout`` seconds (None: bounded only by the turn's ``pipeline.handler_timeout``)
    by the tool loop, which runs every call in a task of its own so that a function
    that swallows the cancellation is left behind instead of holding the turn
    (``gateway/tools/deadline.py``).

    Raises TypeError at registration for what can never work: a function that is not
    async, ``*args``/``**kwargs``, or a parameter without an annotation.
    """
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@router.tool: {fn.__qualname__} must be an async function")
    tool_name = name or fn.__name__
    description, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    from tether.gateway.handler.context import Context  # not at the top: context → routing → here

    # ``Context`` is often imported for type checking only: resolve its name anyway.
    hints = typing.get_type_hints(fn, localns={"Context": Context}, include_extras=True)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"@router.tool: {fn.__qualname__} may not take *args or **kwargs")
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if _is_context(annotation) or (
            param.name == "ctx" and annotation is inspect.Parameter.empty
        ):
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            raise TypeError(
                f"@router.tool: parameter {param.name!r} of {fn.__qualname__} needs a type"
                " annotation (it becomes the JSON schema the model sees)"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=arg_docs.get(param.name)))
    model: type[BaseModel] = create_model(
        f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    parameters = model.model_json_schema()
    parameters.pop("title", None)
    for prop in parameters.get("properties", {}).values():
        prop.pop("title", None)

    async def run(ctx: Context, arguments: dict[str, Any]) -> str:
        try:
            values = model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {tool_name}: {_errors(exc)}") from None
        kwargs = {field: getattr(values, field) for field in fields}
        if context_param is not None:
            kwargs[context_param] = ctx
        return result_text(await fn(**kwargs))

    return Tool(
        name=tool_name,
        description=description or tool_name,
        parameters=parameters,
        run=run,
        idempotent=idempotent,
        source="python",
        extra={"function": f"{fn.__module__}.{fn.__qualname__}"},
        timeout=timeout,
        approval=approval,
    )


def result_text(value: Any) -> str:
    """What the model reads: text as is, nothing as ``done``, anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return "done"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str, ensure_ascii=False)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and each argument's description from an ``Args:`` section
    (continuation lines joined)."""
    paragraphs = doc.strip().split("\n\n", 1)
    description = " ".join(line.strip() for line in paragraphs[0].splitlines()).strip()
    args: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in doc.splitlines():
        section = _SECTION.match(line)
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters")
            current = None
            continue
        if not in_args:
            continue
        match = _ARG_LINE.match(line)
        if match and len(line) - len(line.lstrip()) <= 4:
            current = match.group(1).lstrip("*")
            args[current] = match.group(2).strip()
        elif current and line.strip():
            args[current] = f"{args[current]} {line.strip()}".strip()
        elif not line.strip():
            current = None
    if description.startswith(("Args:", "Arguments:", "Parameters:")):
        description = ""
    return description, args


def _is_context(annotation: Any) -> bool:
    from tether.gateway.handler.context import Context

    return isinstance(annotation, type) and issubclass(annotation, Context)


def _errors(exc: ValidationError) -> str:
    """Pydantic's errors in one line the model can act on: ``where: what`` each."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
