"""The web console and web chat, in a real browser too."""
