"""Errors of the model store, raised on purpose with a message a user can act on.

`speco3_base.errors.ModelFileError` (a single file is missing, corrupt or of the wrong kind) stays the error of
`speco3_models.gguf_check`; the classes here cover the store as a whole.
"""

from __future__ import annotations

from speco3_base.errors import Speco3Error

HOW_TO_GET_A_MODEL = (
    "get one with 'spec-o3 models pull spec-o3-7b' (downloads the checkpoint and converts it here), "
    "'spec-o3 models import TEXT.gguf MMPROJ.gguf' (a GGUF text model and its vision projector you already have) "
    "or 'spec-o3 convert HF_DIR' (a Hugging Face checkpoint folder on this machine)"
)


class ModelStoreError(Speco3Error):
    """The model store cannot do what was asked (unknown name, clash, unreadable manifest, ...)."""


class ModelNotInstalledError(ModelStoreError):
    """No installed model matches the request."""


class OfflineError(ModelStoreError):
    """A download was asked for but there is no network (or the user chose offline mode)."""


class DownloadError(ModelStoreError):
    """A download started but did not complete or did not match the repository's checksums."""


class OperationCancelled(ModelStoreError):
    """The user cancelled a long operation (a progress callback raised it); nothing half-done is kept."""
