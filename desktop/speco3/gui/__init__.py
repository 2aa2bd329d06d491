"""PySide6 desktop application (the only place with widgets)."""
