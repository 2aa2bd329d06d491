"""speco3.interop: joining the VO desktop (SAMP with TOPCAT, SPLAT-VO, Aladin) without Qt.

``SampLink`` (`speco3.interop.samp`) is the client; `speco3.interop.messages` builds outgoing parameters and
checks incoming ones; `speco3.interop.hubs` reads the hub's lockfile; `speco3.interop.files` writes the VOTable/FITS files peers read; `speco3.interop.tables`
builds the candidate table sent to TOPCAT. pyvo is imported only when SAMP is switched on. The specutils bridge
lives with the Spectrum type (`speco3.spectra.specutils_io`: ``to_specutils`` / ``from_specutils``).
"""

from __future__ import annotations

from speco3.interop.hubs import Peer, Peers, SampError, Status
from speco3.interop.messages import Highlight, LoadTable, Malformed, PointAt, SelectRows
from speco3.interop.samp import SampLink

__all__ = ["Highlight", "LoadTable", "Malformed", "Peer", "Peers", "PointAt", "SampError", "SampLink", "SelectRows",
           "Status"]
