"""SGLang's LoRA kernel backends: which the installed release declares, and which one the plugin launches with.

The plugin's default is the first of ``FASTEST_FIRST`` the installed SGLang declares; ``engine_kwargs.sglang.
lora_backend`` wins where set. The order is measured, not assumed: decode tokens/s of a Qwen3-8B-shaped model with a
rank-32 adapter on every linear module, 64 x 256 tokens (docs/benchmarks.md, "LoRA serving throughput";
``python -m verl_sglang_lora.tools.lora_throughput``): on SGLang 0.5.23 triton_v2 8,159, triton 6,595, csgmv (that
release's default) 4,870 tok/s, csgmv also slowing requests without an adapter to 0.60 of the plain model; on 0.5.12
triton 5,598, csgmv 4,999. A release that declares neither keeps its own default.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

FASTEST_FIRST = ("triton_v2", "triton")
# SGLang 0.5.23 refuses triton_v2 at launch with these on (arg_groups/lora_hook.py, _check_v2_lora_modes): the
# plugin's default then moves to the next backend rather than fail the launch
TRITON_V2_REFUSES = ("enable_dp_attention", "enable_two_batch_overlap", "enable_pdmux")
LORA_BACKEND_SETTING = "actor_rollout_ref.rollout.engine_kwargs.sglang.lora_backend"


def declared_lora_backends() -> tuple[list[str], str]:
    """(choices of ``--lora-backend`` in the installed SGLang's CLI, its default).

    Both read from SGLang's own argparse definition (a dataclass ``ServerArgs`` up to 0.5.18, a msgspec struct on
    0.5.23: the parser is what every release has), so a new or removed backend shows up without a version table; a
    CLI without declared choices yields the default alone."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    action = next(a for a in parser._actions if "--lora-backend" in a.option_strings)
    default = str(action.default)
    return ([str(c) for c in action.choices] if action.choices else [default]), default


def plugin_lora_backend(declared: list[str] | None = None, launch: Mapping[str, Any] | None = None) -> str | None:
    """The backend the plugin launches with where the user names none: the first of ``FASTEST_FIRST`` among
    ``declared`` (default: the installed SGLang's choices) that the ``launch`` options (``engine_kwargs.sglang``)
    allow; None where SGLang is not importable or declares none."""
    if declared is None:
        try:
            declared, _ = declared_lora_backends()
        except Exception:  # no SGLang here (a CPU preflight): SGLang's own default applies at launch
            return None
    refused = {"triton_v2"} if any((launch or {}).get(k) for k in TRITON_V2_REFUSES) else set()
    return next((b for b in FASTEST_FIRST if b in declared and b not in refused), None)
