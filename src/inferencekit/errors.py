"""The one error type for everything a user can fix.

``OpError`` carries a message that says what went wrong, the offending value and what to do.
The CLI prints it on one line and exits 2 (argparse's usage-error code); nothing else is caught,
so any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["OpError", "EXIT_OK", "EXIT_FAIL", "EXIT_USAGE", "EXIT_UNPROVEN"]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_UNPROVEN = 3


class OpError(Exception):
    """A user error: bad flag, bad file, a URL that does not answer before the first request."""
