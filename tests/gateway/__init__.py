"""The gateway's floors, and its composition root: reload, the CLI's first hour."""
