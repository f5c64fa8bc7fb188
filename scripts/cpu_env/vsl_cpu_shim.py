"""verl-sglang-lora CPU test environment shim.

Installed by scripts/setup_cpu_env.sh into .venv's site-packages as
``_vsl_cpu_shim.py`` plus ``_vsl_cpu_shim.pth`` (one line: ``import _vsl_cpu_shim``), so
it is active in every interpreter started from .venv: pytest, ``PYTHONPATH=.cache/...``
subprocesses and Ray workers alike.  It does exactly one thing:

PyPI ships only CUDA builds of torchvision for Linux.  Beside the CPU torch wheel, the
real torchvision Python package installs fine but its compiled ops library
(``torchvision/_C.so``, linked against libtorch_cuda.so) cannot load, and torchvision
then dies at import on an unguarded ``torch.library.register_fake("torchvision::nms")``
(and ``"torchvision::qnms"``): ``RuntimeError: operator torchvision::nms does not exist``.
transformers 5.x needs an importable torchvision for ``AutoImageProcessor`` (which every
SGLang release here registers into at import time of ``sglang.srt.configs``).

When -- and only when -- ``torchvision/_C*.so`` fails to load, this shim defines the two
op *schemas* (no kernels) immediately before torchvision's own code runs.  Everything
else is the real torchvision.  ``torchvision.ops.nms`` still raises ("Couldn't load
custom C++ ops"); no code path under test calls it.  Nothing happens at interpreter
start beyond adding a meta-path finder (torch is imported only when torchvision is).

Set ``VSL_NO_CPU_SHIM=1`` to disable it.  See docs/cpu_environment.md.
"""
import importlib.machinery
import os
import sys

_LIB = None  # keeps the schema registrations alive for the life of the process


def _define_torchvision_schemas(pkg_dir):
    global _LIB
    if _LIB is not None:
        return
    import torch

    libs = sorted(f for f in os.listdir(pkg_dir) if f.startswith("_C") and f.endswith(".so"))
    if libs:
        try:
            torch.ops.load_library(os.path.join(pkg_dir, libs[0]))
            return  # the real ops load (a CPU or matching CUDA build): nothing to do
        except (OSError, ImportError, RuntimeError):
            pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIB = lib


class _TorchvisionFinder:
    """Finds ``torchvision`` like the normal path finder, then runs the schema fix first."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "torchvision":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not spec.submodule_search_locations:
            return spec
        loader = spec.loader
        pkg_dir = list(spec.submodule_search_locations)[0]
        orig_exec_module = loader.exec_module

        def exec_module(module):
            _define_torchvision_schemas(pkg_dir)
            orig_exec_module(module)

        loader.exec_module = exec_module
        return spec

    @classmethod
    def invalidate_caches(cls):
        pass


if not os.environ.get("VSL_NO_CPU_SHIM") and _TorchvisionFinder not in sys.meta_path:
    sys.meta_path.insert(0, _TorchvisionFinder)
