"""How to install what the plugin needs, and the one-line stop of a command that needs SGLang when it is missing.

Imports nothing beyond the standard library, so a command can check for SGLang before anything heavy is loaded.
"""

from __future__ import annotations

import importlib
import sys

# The default tested pair's constraints file (docs/install.md, The tested sets). It pins what SGLang imports at
# `import sglang` time -- torchvision and triton included -- which an install of SGLang with --no-deps leaves out.
DEFAULT_CONSTRAINTS = "constraints/verl0.9.1-sglang0.5.12.txt"
# The packages that file marks `# --no-deps` (their own metadata pins a stack verl 0.9.1 cannot resolve beside).
SGLANG_NO_DEPS = ("sglang", "sglang-kernel", "flashinfer-python", "torch-memory-saver")
INSTALL_GPU_SET = f"pip install '.[gpu]' -c {DEFAULT_CONSTRAINTS}"
INSTALL_SGLANG = f"pip install --no-deps -c {DEFAULT_CONSTRAINTS} {' '.join(SGLANG_NO_DEPS)}"
# Where the commands run: `.` and the constraints file are this checkout's (the package is not on a package index).
SGLANG_ADVICE = (f"in the verl-sglang-lora checkout: {INSTALL_GPU_SET}, then {INSTALL_SGLANG} "
                 "(not `pip install sglang` nor verl[sglang]: their pins do not resolve beside verl 0.9.1)")

# doctor's exit code for an environment that lacks a package (tools/doctor.py, EXIT_ENVIRONMENT)
EXIT_ENVIRONMENT = 3


def require_sglang(command: str) -> None:
    """Import SGLang, or end ``command`` with one line naming the missing module and the install commands.

    Without this the command died later with a traceback from deep inside (or from a server subprocess that exited),
    which named neither the package nor how to install it."""
    try:
        importlib.import_module("sglang")
    except ImportError as exc:  # ModuleNotFoundError too: sglang itself, or a module it imports (torchvision, ...)
        missing = f"No module named '{exc.name}'" if isinstance(exc, ModuleNotFoundError) and exc.name else \
            " ".join(str(exc).split())  # one line
        print(f"{command}: needs SGLang, and `import sglang` fails here ({missing}); install it {SGLANG_ADVICE}",
              file=sys.stderr, flush=True)
        raise SystemExit(EXIT_ENVIRONMENT) from None
