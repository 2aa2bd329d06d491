"""A folder that is read-only for real, also for root (who ignores permission bits), for the read-only-place tests.

* not root: the folder's permissions (``0o555``) are enough; the kernel enforces them.
* root: a small tmpfs is mounted on the folder, filled, then remounted read-only (``mount -o remount,ro``); every
  write in it fails with EROFS, whoever writes. It is unmounted when the context ends.

Either way the context checks that creating a file in the folder really fails before it yields, so a test never
passes on a folder that was writable after all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")


def _probe_fails(folder: Path) -> bool:
    try:
        (folder / ".probe").write_bytes(b"x")
    except OSError as exc:
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    (folder / ".probe").unlink()
    return False


@contextlib.contextmanager
def read_only_folder(folder: Path, fill: Callable[[Path], None] | None = None) -> Iterator[str]:
    """Make ``folder`` (created) read-only, after ``fill(folder)`` has written what it should hold; yields how
    (``"permissions"`` or ``"tmpfs remounted ro"``). Raises RuntimeError when root cannot mount (no CAP_SYS_ADMIN):
    the tests that need it then fail with that reason instead of passing on a writable folder."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        if fill is not None:
            fill(folder)
        os.chmod(folder, 0o555)
        try:
            if not _probe_fails(folder):
                raise RuntimeError(f"{folder}: still writable with mode 0555")
            yield "permissions"
        finally:
            os.chmod(folder, 0o755)
        return
    if shutil.which("mount") is None:
        raise RuntimeError("running as root without mount(8): cannot make a folder read-only for root")
    _run("mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(folder))
    try:
        if fill is not None:
            fill(folder)
        _run("mount", "-o", "remount,ro", str(folder))
        if not _probe_fails(folder):
            raise RuntimeError(f"{folder}: still writable after remount,ro")
        yield "tmpfs remounted ro"
    finally:
        _run("umount", "-l", str(folder))
