"""Hide installed modules from one test, as if their extra were not installed."""

from __future__ import annotations

import sys
from typing import Any

import pytest


def _hidden(fullname: str, names: tuple[str, ...]) -> bool:
    return any(fullname == n or fullname.startswith(n + ".") for n in names)


class _Blind:
    """One ``sys.meta_path`` finder that does not see the hidden names (``find_spec`` returns None for them)."""

    def __init__(self, finder: Any, names: tuple[str, ...]) -> None:
        self._finder = finder
        self._names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if _hidden(fullname, self._names):
            return None
        find = getattr(self._finder, "find_spec", None)
        return None if find is None else find(fullname, path, target)

    def __getattr__(self, attr: str) -> Any:  # invalidate_caches and the like go to the finder itself
        return getattr(self._finder, attr)


def hide_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """For the rest of the test, each top-level ``name`` and its submodules are as on a machine without them:
    not in ``sys.modules`` (those imported already are taken out) and found by no ``sys.meta_path`` finder, so
    ``import <name>`` raises ModuleNotFoundError and ``importlib.util.find_spec(<name>)`` returns None. Undone with
    ``monkeypatch``.

    Mapping a name to None in ``sys.modules`` (the import system's own "do not import" marker) hides it from both
    as well, but it is a state no real machine is in: third-party code that looks the name up there finds None
    instead of nothing (scipy's array API helpers then fail on ``getattr(None, "Tensor")`` while torch is hidden,
    unless an earlier test filled their cache)."""
    for key in [k for k in sys.modules if _hidden(k, names)]:
        monkeypatch.delitem(sys.modules, key)
    monkeypatch.setattr(sys, "meta_path", [_Blind(f, names) for f in sys.meta_path])
