"""What the docs' plot scripts share: their command line (``--out``), matplotlib without a display, the save."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def out_path(doc: str, default: Path, argv: list[str] | None) -> Path:
    """The PNG to write: ``--out``, else ``default`` (``doc``: the script's docstring, its ``--help``)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=default)
    return ap.parse_args(argv).out


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display on a build or GPU host)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out: Path) -> int:
    """Lay out, write ``out`` and name it; the scripts' exit status."""
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0
