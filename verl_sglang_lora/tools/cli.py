"""``verl-sglang-lora`` command line. Only argparse is imported here so ``--help`` is instant; each command
imports its module when it runs."""

from __future__ import annotations

import argparse
import sys

from verl_sglang_lora import __version__

DOCTOR_HELP = """Check a verl config for rollout.name=sglang_lora against the installed verl / SGLang, on a CPU-only
machine, before any GPU is allocated. The overlay (hydra.searchpath=[pkg://verl_sglang_lora.configs]
+sglang_lora=default) is added for you; pass the same Hydra overrides as your training command.
Exit code 1 when any check FAILs."""


def doctor_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-sglang-lora doctor", description=DOCTOR_HELP)
    parser.add_argument(
        "--config-name",
        default="ppo_trainer",
        help="verl trainer config: ppo_trainer (FSDP) or ppo_megatron_trainer (Megatron); default ppo_trainer",
    )
    parser.add_argument(
        "--ray", action="store_true", help="also check registration inside a Ray worker (slower; off by default)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. actor_rollout_ref.model.lora_rank=32")
    return parser


def top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-sglang-lora", description="verl-sglang-lora tools")
    parser.add_argument("--version", action="version", version=f"verl-sglang-lora {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("doctor", help="preflight a config on a CPU-only machine", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "doctor":
        top_parser().parse_args(argv or ["--help"])  # prints help / usage errors and exits
        return 2
    # intermixed: options may follow the Hydra overrides, as in a training command line
    args = doctor_parser().parse_intermixed_args(argv[1:])
    from verl_sglang_lora.tools.doctor import run_doctor

    code, report = run_doctor(args.overrides, config_name=args.config_name, ray=args.ray)
    print(report, flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
