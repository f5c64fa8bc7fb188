"""A stand-in for TransformerEngine, for CPU tests only: TE's real package loads CUDA libraries at import.

megatron-core and megatron-bridge import TE at module level (megatron-bridge's LoRA layers unconditionally), so
their pure-Python code cannot even be imported on a CPU host without something named ``transformer_engine``. This
package answers every ``transformer_engine.*`` import and attribute with an inert placeholder: a lower-case name is a
submodule (callable, returning a placeholder), a capitalised one a class whose attributes are placeholders. Nothing
here computes. A test that uses it must build its model from megatron-core's local (non-TE) layer spec and check
bytes, so that a placeholder reached on a path that matters shows up as a wrong or missing tensor, not a pass.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "2.17.1"  # the Megatron carry's TE (scripts/offline_bundle/requirements-megatron.lock)


class _Placeholder:
    """What any TE call returns: falsy, iterable as a pair, usable as a context manager."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, *args, **kwargs) -> "_Placeholder":
        return _Placeholder()

    def __getattr__(self, name: str) -> "_Placeholder":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter((_Placeholder(), _Placeholder()))

    def __enter__(self) -> "_Placeholder":
        return self

    def __exit__(self, *exc) -> bool:
        return False


class _PlaceholderClass(type):
    """Metaclass of TE's stand-in classes: class attributes (``Foo.apply``) are placeholders too."""

    def __getattr__(cls, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


class _StandinModule(types.ModuleType):
    def __call__(self, *args, **kwargs) -> _Placeholder:  # a lower-case TE function reached as a "submodule"
        return _Placeholder()


def _module_getattr(module_name: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].islower():
            return importlib.import_module(f"{module_name}.{name}")
        return _PlaceholderClass(name, (object,), {"__module__": module_name, "__init__": _Placeholder.__init__})

    return __getattr__


class _StandinFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandinModule(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module) -> None:
        pass


sys.meta_path.insert(0, _StandinFinder())
__getattr__ = _module_getattr(__name__)
