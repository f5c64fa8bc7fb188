"""SGLang's LoRA kernel backends: which the installed release declares, and which one the plugin launches with.

The plugin's default is the first of ``FASTEST_FIRST`` the installed SGLang declares; ``engine_kwargs.sglang.
lora_backend`` wins where set. The order comes from the throughput benchmark (docs/benchmarks.md, "LoRA serving
throughput"; ``python -m verl_sglang_lora.tools.lora_throughput``): decode tokens/s of a Qwen3-8B-shaped model with a
rank-32 adapter on every linear module, 64 x 256 tokens. On SGLang 0.5.23: triton_v2 8,159, triton 6,595 and csgmv
(that release's default) 4,870 tok/s; csgmv also slows requests without an adapter to 0.60 of the plain model. On
0.5.12: triton 5,598 and csgmv 4,999.

Where the default stays SGLang's own:
- A release that declares neither backend.
- A release whose argument check expands the ``all`` target set at launch. That is 0.5.8: it drops embed_tokens /
  lm_head only under csgmv, so another backend would add embedding LoRA on pool buffers it never initialises.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any, Mapping

logger = logging.getLogger(__name__)

FASTEST_FIRST = ("triton_v2", "triton")
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


def plugin_lora_backend(declared: list[str] | None = None) -> str | None:
    """The backend the plugin launches with where the user names none: the first of ``FASTEST_FIRST`` among
    ``declared`` (default: the installed SGLang's choices, where it resolves ``all`` from the model); None leaves
    SGLang's own default."""
    if declared is None:
        from verl_sglang_lora.sglang_contract.target_modules import sglang_reads_all_linear_string

        try:
            import sglang  # noqa: F401 - no SGLang here (a CPU preflight): SGLang's default applies at launch
        except ImportError:
            return None
        if not sglang_reads_all_linear_string():  # the `all` set is fixed at launch, per backend (0.5.8)
            return None
        try:
            declared, _ = declared_lora_backends()
        except Exception as exc:  # noqa: BLE001 - a parser the plugin cannot read: say so, keep SGLang's default
            logger.warning("sglang_lora: cannot read --lora-backend's choices from the installed SGLang (%s: %s); "
                           "launching with SGLang's default LoRA backend", type(exc).__name__, exc)
            return None
    return next((b for b in FASTEST_FIRST if b in declared), None)


def triton_v2_refusal(args: Mapping[str, Any]) -> str | None:
    """Why SGLang 0.5.23 would refuse ``--lora-backend triton_v2`` with these final launch arguments
    (``arg_groups/lora_hook.py``, ``_check_v2_lora_modes``; for expert LoRA, ``FusedMoEWithLoRA`` in
    ``lora/layers.py``), or None."""
    # expert LoRA (the only launch that sets experts_shared_outer_loras=False, launch_args.py): SGLang pairs triton_v2
    # with a LoRA MoE runner only, and the plugin launches with the MoE runner SGLang picks
    runner = str(args.get("moe_runner_backend") or "auto")
    if args.get("experts_shared_outer_loras") is False and not runner.startswith("lora_"):
        return f"expert LoRA on the MoE runner {runner} (it pairs triton_v2 with --moe-runner-backend lora_*)"
    dp = int(args.get("dp_size") or 1)
    attn_dp = int(args.get("attn_dp_size") or (dp if args.get("enable_dp_attention") else 1))
    for refused, mode in ((attn_dp > 1, "DP attention"), (bool(args.get("enable_two_batch_overlap")), "two-batch overlap"),
                          (bool(args.get("enable_pdmux")), "PD multiplexing"),
                          (os.environ.get("SGLANG_EXPERIMENTAL_LORA_OPTI", "").lower() in ("1", "true"),
                           "SGLANG_EXPERIMENTAL_LORA_OPTI")):
        if refused:
            return mode
    return None


def launch_backend(default: str, args: Mapping[str, Any]) -> str:
    """The plugin's ``default`` for these final launch arguments: triton (declared wherever triton_v2 is) where
    SGLang would refuse triton_v2."""
    if default == "triton_v2" and (why := triton_v2_refusal(args)):
        logger.warning("sglang_lora: LoRA backend triton instead of triton_v2, which SGLang refuses with %s", why)
        return "triton"
    return default


def chosen_backend(default: str | None, args: Mapping[str, Any]) -> str | None:
    """The backend a launch with these arguments gets: the one they name (``engine_kwargs.sglang`` or a topology
    override), else the plugin's ``default`` fitted to them; None leaves SGLang's own default."""
    if args.get("lora_backend") is not None:
        return args["lora_backend"]
    return launch_backend(default, args) if default else None
