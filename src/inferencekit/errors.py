"""The one error type for everything a user can fix.

``OpError`` carries a message that says what went wrong, the offending value and what to do.
The CLI prints it on one line and exits 2 (argparse's usage-error code); nothing else is caught,
so any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno

__all__ = ["OpError", "StorageError", "STORAGE_ERRNOS", "storage_message", "EXIT_OK", "EXIT_FAIL", "EXIT_USAGE",
           "EXIT_UNPROVEN"]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_UNPROVEN = 3


class OpError(Exception):
    """A user error: bad flag, bad file, a URL that does not answer before the first request."""


# The write errors that mean "this storage cannot take more", not a bug: full disk, quota, read-only
# filesystem, no permission.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})


def storage_message(exc: OSError, path: object = None) -> str:
    """``exc`` as one line: the file (``path`` when the error names none) and the reason."""
    name = exc.filename or path
    where = f" {name}" if name else ""
    return f"cannot write{where}: {exc.strerror or exc}"


class StorageError(Exception):
    """The run dir stopped taking writes during a run (disk full, read-only): sending stopped, what had
    reached disk is kept, and ``--resume`` finishes the run once the cause is fixed. The CLI prints the
    message on one line and exits 3 (the run is incomplete: at best UNPROVEN).

    The ``OSError`` that stopped the run is its ``__cause__``.

    Attributes:
        progress: what is on disk and what was lost, for the JSON document (``{"level", "on_disk",
            "lost"}`` for a load level).
    """

    def __init__(self, message: str, cause: OSError | None = None, progress: dict[str, object] | None = None):
        super().__init__(message)
        self.__cause__ = cause
        self.progress = dict(progress or {})
