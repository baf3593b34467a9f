"""Hide installed modules from one test, as if their extra were not installed."""

from __future__ import annotations

import sys

import pytest


def hide_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """For the rest of the test, ``import <name>`` raises ImportError and ``importlib.util.find_spec(<name>)`` returns
    None, for each top-level ``name`` and its submodules imported already: ``sys.modules`` maps them to None (the
    import system's own marker of a module that must not be imported). Undone with ``monkeypatch``."""
    for name in names:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, key, None)
        monkeypatch.setitem(sys.modules, name, None)
