"""What plugin code touches: the handler's context, routers, tools, files, plugins.

- ``context.py``      :class:`Context`: the event, its memory, reply/send/step/download
- ``routing.py``      :class:`Router`: which handler answers an event, and middlewares
- ``task_llm.py``     ``ctx.llm``: the model as one event sees it, within its budgets
- ``files.py``        what ``ctx.reply(files=...)`` takes, stored before the checkpoint
- ``tool.py``         what a tool is (a name, a schema, a run), whatever its source
- ``python_tool.py``  a tool from a Python function (``@router.tool``)
- ``plugins.py``      the routers and job handlers a config names, imported

A bot author imports these names from ``tether``, never from here: the files may move.
"""
