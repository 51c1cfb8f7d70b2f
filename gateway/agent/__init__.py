"""The built-in agent: a conversation with a model, and agents that share a gateway.

- ``chat.py``        the ``llm`` agent's turn (:func:`converse`): prompt, tools, reply, memory
- ``streaming.py``   a reply shown while the model writes it, as one edited preview
- ``vision.py``      what the agent does with the files a person sends
- ``reflection.py``  the agent distilling its long-term memory from its conversations
- ``cron.py``        the handler of cron fires: text, handler, prompt, reflect, reminders
- ``accounts.py``    several agents (``agents:``): an adapter per account, a router each
- ``rooms.py``       agents in one group chat hearing each other through the gateway

The top floor below the composition root: it uses the tools, the handler API and the
engine; nothing below it knows it is there.
"""
