"""speco3.gui: the PySide6 + pyqtgraph desktop app (windows, panels, workers)."""

from __future__ import annotations

from speco3.render.qtcompat import pin_singletons

pin_singletons()
