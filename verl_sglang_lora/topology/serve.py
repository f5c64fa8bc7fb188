"""``python -m verl_sglang_lora.topology.serve KWARGS_JSON``: one frozen model's SGLang engine.

Why not ``sglang.launch_server`` flags: the group overrides are ``ServerArgs`` field values (lists, dicts, booleans
that default to true); rendering them as flags would lose some. The engine is built from the exact kwargs, the same
way verl builds the actor's ``ServerArgs``, and the kwargs are printed first so the launched arguments are on record.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Sequence

PRINT_PREFIX = "sglang_lora topology: launching frozen engine with ServerArgs"


def serve_command(server_args: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", __name__, json.dumps(server_args, sort_keys=True)]


def main(argv: Sequence[str]) -> None:
    from verl_sglang_lora.install_advice import require_sglang

    kwargs = json.loads(argv[0])
    print(f"{PRINT_PREFIX} {json.dumps(kwargs, sort_keys=True)}", flush=True)
    require_sglang("python -m verl_sglang_lora.topology.serve")
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils import kill_process_tree

    try:
        from sglang.srt.plugins import load_plugins  # SGLang's own entry point loads its plugins first
        load_plugins()
    except ImportError:
        pass
    server_args = ServerArgs(**kwargs)
    try:
        launch_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main(sys.argv[1:])
