"""The verl and SGLang releases the plugin is checked against: one list (``releases.json``), read by setup.py, the
CPU test scripts, the compatibility matrix, the doctor and the tests."""

from __future__ import annotations

import json
from pathlib import Path

_DATA = json.loads((Path(__file__).with_name("releases.json")).read_text())

SGLANG_RELEASES: tuple[str, ...] = tuple(_DATA["sglang"])
VERL_RELEASES: tuple[str, ...] = tuple(_DATA["verl"])
VENV_VERL: str = _DATA["venv_verl"]  # the CPU test venv's own verl (the others run from release dirs)
VENV_SGLANG: str = _DATA["venv_sglang"]
