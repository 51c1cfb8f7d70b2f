"""The project as a whole: its layout, manual, public surface, install, secrets, test kit."""
