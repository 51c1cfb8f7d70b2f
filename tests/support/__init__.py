"""What many test modules share, one module per concern (tests import these; fixtures
live in tests/fixtures.py):

- ``config``     settings on a temporary store; reading the store's rows directly
- ``gateway``    ``running``, the one way a test runs a gateway; a scheduler on a clock
- ``processes``  ``tether`` subprocesses: spawned, killed, and the plugin control socket
- ``advisory``   PostgreSQL's lane locks: which session holds one; ending that session
- ``telegram``, ``feishu``, ``discord``, ``llm``  settings for each fake server, and
                 what a platform posts to a gateway
- ``web``        a browser's session with the console
"""
