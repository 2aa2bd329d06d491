"""Download a model from the Hugging Face Hub — only when the user asks — and install it.

This is the only module that imports huggingface-hub, and only inside `pull`. A repository holding GGUF files is
imported directly (text file for the asked quantization + projector); a repository holding a safetensors
checkpoint is downloaded and then handed to the caller's ``convert`` step (the application passes
`speco3_converters.build.build_model`; this package sits below the converter and never imports it). Every downloaded file is
checked against the repository's own checksums (sha256 of LFS files, git blob id of small files). Downloads go to
``<store>/downloads/`` and resume where they stopped.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speco3_base.fileio import Progress, no_progress, sha256_file
from speco3_models import catalog
from speco3_models.catalog import QUANTS, format_bytes
from speco3_models.errors import DownloadError, ModelStoreError, OfflineError, OperationCancelled
from speco3_models.installed import InstalledModel, Provenance

if TYPE_CHECKING:
    from speco3_models.store import ModelStore

logger = logging.getLogger(__name__)

ALTERNATIVES = ("Without a network you can install a model with 'spec-o3 models import TEXT.gguf MMPROJ.gguf' "
                "(a GGUF text model and its projector copied to this machine) or 'spec-o3 convert HF_DIR' "
                "(a Hugging Face checkpoint folder copied to this machine).")
_TRUE = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """Whether the user switched the hub off (``HF_HUB_OFFLINE``; ``SPECO3_OFFLINE`` for this app only)."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "SPECO3_OFFLINE"))


def _progress_bar(progress: Progress, label: str):
    """A tqdm class that forwards byte counts to ``progress`` and prints nothing."""
    from tqdm.auto import tqdm

    class _Bar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["file"] = io.StringIO()
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            progress(label, int(self.n), int(self.total or 0))

        def update(self, n=1):
            out = super().update(n)
            progress(label, int(self.n), int(self.total or 0))
            return out

    return _Bar


def _git_blob_sha1(path: Path) -> str:
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _choose_gguf(files: list[str], quant: str) -> tuple[str, str]:
    ggufs = [f for f in files if f.lower().endswith(".gguf")]
    projs = [f for f in ggufs if "mmproj" in Path(f).name.lower()]
    texts = [f for f in ggufs if f not in projs and quant.lower() in Path(f).name.lower().replace("-", "_")]
    if not projs:
        raise DownloadError(f"the repository has GGUF files but no vision projector (mmproj*.gguf): {', '.join(ggufs)}")
    if not texts:
        have = ", ".join(f for f in ggufs if f not in projs)
        raise DownloadError(f"no {quant} text model in the repository (it has: {have}); choose one with --quant")
    proj = sorted(projs, key=lambda f: ("f16" not in f.lower(), len(f)))[0]
    return sorted(texts, key=len)[0], proj


def pull(store: ModelStore, name: str, quant: str | None = None, *, convert: Callable[..., Any] | None = None,
         revision: str | None = None, progress: Progress | None = None, keep_checkpoint: bool = False,
         install_name: str | None = None, make_default: bool = False, token: str | None = None) -> InstalledModel:
    """Download ``name`` (a catalog model or a Hugging Face repo id) and install it at ``quant``.

    Parameters
    ----------
    store : ModelStore
        Where the model is installed.
    convert : callable, optional
        ``convert(store, checkpoint_dir, *, quant, name, progress, provenance, catalog_id, make_default)``
        returning an object with ``.model``: builds an installed model from a downloaded safetensors checkpoint
        (`speco3_converters.build.build_model`). Without it only repositories holding GGUF files can be pulled.

    Raises
    ------
    OfflineError
        ``HF_HUB_OFFLINE``/``SPECO3_OFFLINE`` is set or the hub cannot be reached; the message names the
        offline alternatives (``models import``, ``convert``).
    DownloadError
        Unknown repository or revision, missing files, not enough disk space, or a checksum mismatch.
    """
    progress = progress or no_progress
    entry = catalog.find(name)
    if entry is None and "/" not in name:
        catalog.get(name)  # raises, naming the known models
    repo_id = entry.repo_id if entry else name
    quant = (quant or (entry.recommended_quant if entry else "Q4_K_M")).upper()
    revision = revision or (entry.revision if entry else None)
    target = install_name or (entry.install_name(quant) if entry else None)
    if target and any(m.name == target for m in store.list()):
        raise ModelStoreError(f"{target} is already installed; remove it first or choose another name (--name)")
    if entry is not None and quant not in QUANTS:
        raise ModelStoreError(f"unknown quantization {quant!r}; choose one of {', '.join(QUANTS)}")
    if hub_offline():
        raise OfflineError(f"cannot download {repo_id}: offline mode is on (HF_HUB_OFFLINE). {ALTERNATIVES}")
    try:
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError as exc:
        raise ModelStoreError(f"downloading needs huggingface-hub (pip install 'spec-o3[hub]'): {exc}. "
                              f"{ALTERNATIVES}") from exc
    try:
        info = HfApi(token=token).model_info(repo_id, revision=revision, files_metadata=True)
    except HfHubHTTPError as exc:
        raise DownloadError(f"the hub refused {repo_id}@{revision or 'main'}: {exc}") from exc
    except Exception as exc:  # connection refused, DNS failure, timeout, proxy errors: all mean "no network"
        raise OfflineError(f"cannot reach the Hugging Face Hub to download {repo_id} ({type(exc).__name__}: {exc}). "
                           f"{ALTERNATIVES}") from exc
    sha = info.sha or revision or "main"
    siblings = {s.rfilename: s for s in (info.siblings or [])}
    files = sorted(siblings)
    is_gguf = any(f.lower().endswith(".gguf") for f in files)
    if is_gguf:
        wanted = list(_choose_gguf(files, quant))
    else:
        layout = entry or catalog.catalog()[0]  # any Qwen2.5-VL checkpoint has the files the catalog lists
        patterns, required, optional = layout.weight_patterns, layout.required_files, layout.optional_files
        missing = [f for f in required if f not in siblings]
        weights = [f for f in files if any(fnmatch.fnmatch(f, p) for p in patterns)]
        if missing or not weights:
            raise DownloadError(f"{repo_id}@{sha[:12]} is not a usable checkpoint: missing "
                                f"{', '.join(missing + ([] if weights else ['*.safetensors']))}")
        wanted = [f for f in files if f in required or f in optional] + weights
        if quant not in QUANTS:
            raise ModelStoreError(f"unknown quantization {quant!r}; choose one of {', '.join(QUANTS)}")
        if convert is None:
            raise ModelStoreError(f"{repo_id} holds a safetensors checkpoint, which must be converted, and no "
                                  "converter was given; use 'spec-o3 models pull', or pass "
                                  "convert=speco3_converters.build.build_model")
    total = sum(siblings[f].size or 0 for f in wanted)
    dest = store.downloads_dir() / repo_id.replace("/", "--") / sha[:12]
    free = store.disk_free()
    need = total * (2 if not is_gguf else 1)
    if need > free:
        raise DownloadError(f"{repo_id} needs about {format_bytes(need)} of disk space in {store.root} "
                            f"(download{' and conversion' if not is_gguf else ''}); {format_bytes(free)} free")
    logger.info("pulling %s@%s: %d files, %s", repo_id, sha[:12], len(wanted), format_bytes(total))
    arrived: dict[str, str] = {}
    for f in wanted:
        sib = siblings[f]
        try:
            local = Path(hf_hub_download(repo_id, f, revision=sha, local_dir=dest, token=token,
                                         tqdm_class=_progress_bar(progress, f"download {f}")))
        except OperationCancelled:
            raise
        except HfHubHTTPError as exc:
            raise DownloadError(f"download of {f} from {repo_id} failed: {exc}") from exc
        except Exception as exc:
            raise OfflineError(f"download of {f} from {repo_id} was interrupted ({type(exc).__name__}: {exc}); "
                               f"run the same command again to resume. {ALTERNATIVES}") from exc
        lfs = getattr(sib, "lfs", None)
        expected = getattr(lfs, "sha256", None) if lfs else None
        if expected:
            actual = sha256_file(local, progress, f"sha256 {f}")
        elif getattr(sib, "blob_id", None):
            expected, actual = sib.blob_id, _git_blob_sha1(local)
        else:
            expected = actual = None
        if expected != actual:
            local.unlink(missing_ok=True)
            raise DownloadError(f"{f} from {repo_id} does not match the repository's checksum ({actual} ≠ "
                                f"{expected}); the damaged file was deleted, run the command again")
        if lfs is not None and expected and actual is not None:
            arrived[str(local.resolve())] = actual
    source = f"{repo_id}@{sha}"
    prov = Provenance("pulled", source, details={"files": wanted, "quant": quant})
    if is_gguf:
        text, proj = (dest / w for w in wanted)
        model = store.import_pair(text, proj, target, copy=False, move=True, progress=progress, provenance=prov,
                                  catalog_id=entry.name if entry else None, make_default=make_default,
                                  known_sha256=arrived)
        shutil.rmtree(dest, ignore_errors=True)  # only the hub's download bookkeeping is left there
    else:
        assert convert is not None  # checked before the download (a checkpoint needs the converter)
        model = convert(store, dest, quant=quant, name=target, progress=progress, provenance=prov,
                        catalog_id=entry.name if entry else None, make_default=make_default).model
        if not keep_checkpoint:
            shutil.rmtree(dest, ignore_errors=True)
    return model
