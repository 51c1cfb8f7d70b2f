"""A bot's own tests get Tether's test kit as a pytest plugin (``fake_model``)."""

pytest_plugins = ["tether.testing.plugin"]
