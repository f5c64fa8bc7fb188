"""Introspection of the installed SGLang: its version and the fields its request structs declare."""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StructField:
    name: str
    annotation: Any
    required: bool


def sglang_version() -> str | None:
    """The installed SGLang release, or None when SGLang is not importable."""
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return None


def struct_fields(cls: type) -> dict[str, StructField]:
    """Declared fields of an SGLang request class, whether it is a dataclass (<=0.5.12) or msgspec (>=0.5.18)."""
    if dataclasses.is_dataclass(cls):
        hints = _hints(cls)
        return {
            f.name: StructField(
                f.name,
                hints.get(f.name, f.type),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        }
    try:
        import msgspec

        if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
            return {
                f.name: StructField(
                    f.name, f.type, f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT
                )
                for f in msgspec.structs.fields(cls)
            }
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"{cls!r} is neither a dataclass nor a msgspec.Struct; cannot read its fields")


def is_msgspec_struct(cls: type) -> bool:
    try:
        import msgspec

        return isinstance(cls, type) and issubclass(cls, msgspec.Struct)
    except ImportError:  # pragma: no cover
        return False


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:
        return {}


@functools.lru_cache(maxsize=None)
def io_struct(name: str) -> type:
    """A class from ``sglang.srt.managers.io_struct`` of the installed release, with a clear error if absent."""
    try:
        from sglang.srt.managers import io_struct as module
    except Exception as exc:  # a half-installed SGLang can raise KeyError on re-import
        raise ImportError(
            "SGLang is not importable in this process "
            f"({exc}); install the tested set: `pip install '.[gpu]' -c constraints/verl0.9.1-sglang0.5.12.txt` plus SGLang with `--no-deps` (README, Install)."
        ) from exc
    try:
        return getattr(module, name)
    except AttributeError as exc:
        raise ImportError(f"sglang {sglang_version()} has no io_struct.{name}; see docs/compatibility.md") from exc


def weight_update_session() -> bool:
    """Whether the installed SGLang takes tensor updates only inside ``begin/end_weight_update`` (0.5.23 on)."""
    try:
        io_struct("BeginWeightUpdateReqInput")
    except ImportError:
        return False
    return True


def server_args_fields() -> frozenset[str]:
    """The field names the installed ``ServerArgs`` declares (its command-line flags, with ``_`` for ``-``); a
    dataclass up to 0.5.18, a msgspec struct on 0.5.23."""
    from sglang.srt.server_args import ServerArgs

    return frozenset(struct_fields(ServerArgs))


def cuda_graph_max_bs_field() -> str:
    """The ``ServerArgs`` field that caps the decode CUDA-graph batch size.

    Up to 0.5.12 one flag (``cuda_graph_max_bs``); by 0.5.18 it is split into ``_decode`` / ``_prefill`` and the old
    name is gone, so a launch that passes it fails (argparse calls the abbreviation ambiguous)."""
    fields = server_args_fields()
    for name in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        if name in fields:
            return name
    raise ImportError(f"sglang {sglang_version()} ServerArgs declares no cuda_graph_max_bs field; see docs/compatibility.md")


if __name__ == "__main__":  # `python3 -m verl_sglang_lora.sglang_contract.installed cuda-graph-flag` (device scripts)
    import sys

    if sys.argv[1:] != ["cuda-graph-flag"]:
        raise SystemExit("usage: python3 -m verl_sglang_lora.sglang_contract.installed cuda-graph-flag")
    from verl_sglang_lora.install_advice import require_sglang

    require_sglang("python3 -m verl_sglang_lora.sglang_contract.installed cuda-graph-flag")
    print("--" + cuda_graph_max_bs_field().replace("_", "-"))
