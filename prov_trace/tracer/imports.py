"""Watch for modules being imported, so pending targets resolve the moment their module exists.

A finder sits first on ``sys.meta_path`` and answers only for the watched module
names: it asks the rest of ``sys.meta_path`` for the real spec and wraps the
loader for the one ``exec_module`` call. After that call the module's
``__loader__`` and ``__spec__.loader`` are put back to the real loader, so the
imported module carries no trace of the watcher.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Callable


class _ChainedLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, on_loaded: Callable[[str], None]):
        self._loader = loader
        self._on_loaded = on_loaded

    def __getattr__(self, name: str):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            # Leave the module as the real loader made it.
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
        self._on_loaded(module.__name__)


class ImportWatcher(importlib.abc.MetaPathFinder):
    """Calls `on_loaded(name)` after each watched module finishes executing."""

    def __init__(self, on_loaded: Callable[[str], None]):
        self._on_loaded = on_loaded
        self._watched: set[str] = set()
        self._local = threading.local()
        self._installed = False

    def watch(self, name: str) -> None:
        self._watched.add(name)

    def unwatch(self, name: str) -> None:
        self._watched.discard(name)

    @property
    def watched(self) -> frozenset[str]:
        return frozenset(self._watched)

    def install(self) -> None:
        if not self._installed:
            sys.meta_path.insert(0, self)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            self._installed = False

    def find_spec(self, fullname, path, target=None):
        if fullname not in self._watched:
            return None
        busy = getattr(self._local, "busy", None)
        if busy is None:
            busy = self._local.busy = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            busy.discard(fullname)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ChainedLoader(spec.loader, self._on_loaded)
        return spec
