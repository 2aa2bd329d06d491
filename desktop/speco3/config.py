"""User folders of the application (defined in `speco3_base.dirs`, shared with the model store)."""

from __future__ import annotations

from speco3_base.dirs import (
    cache_dir,
    config_dir,
    data_dir,
    ensure,
    log_dir,
    take_cache_notice,
    writable_cache,
)

__all__ = ["cache_dir", "config_dir", "data_dir", "ensure", "log_dir", "take_cache_notice", "writable_cache"]
