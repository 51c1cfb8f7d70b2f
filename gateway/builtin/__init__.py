"""What every gateway answers without a plugin: access, built-in commands, the echo agent.

- ``access.py``    who may talk to the bot: allow lists, admins, pairing, the owner code
- ``commands.py``  /start, /help, /usage, /remember, /forget
- ``people.py``    /link, /unlink: one person across platforms; whom a fact is about
- ``export.py``    /export: what the bot keeps of the person, sent to them as a zip
- ``stop.py``      the ``/stop`` command (its mechanism is :mod:`tether.gateway.core.stop`)
- ``presses.py``   button presses nothing handled: logged, never answered by the agent
- ``echo.py``      the ``echo`` agent, and what an edited message is answered with
"""
