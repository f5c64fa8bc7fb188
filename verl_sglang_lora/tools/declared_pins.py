"""What one installed distribution declares it needs of another, against what is installed beside it.

The GPU stack is installed with ``--no-deps`` (no resolver can put SGLang beside verl), so a declared pin is never
enforced and a broken pair shows up only at import, inside a Ray worker, after the GPUs are taken (megatron-bridge
0.5.1's ``transformers<5.9`` under SGLang 0.5.23's transformers 5.19 did exactly that on the H200). Read from the
installed metadata, so it holds for whatever releases are there.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Optional, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class UnmetPin:
    dist: str
    dist_version: str
    requirement: str  # as declared, e.g. "transformers<5.9.0,>=5.8.1"
    installed: str  # the version of the required distribution that is installed


def _distribution(name: str, path: Optional[Sequence[str]]) -> Optional[importlib.metadata.Distribution]:
    """The first distribution of that name on ``path`` (default: sys.path), as the import system would find it."""
    where = {"path": list(path)} if path is not None else {}
    return next(iter(importlib.metadata.distributions(name=name, **where)), None)


def unmet_requirement(dist: str, on: str, path: Optional[Sequence[str]] = None) -> Optional[UnmetPin]:
    """``dist``'s unconditional requirement on ``on`` when the installed ``on`` does not satisfy it; None when it
    does, when either is not installed, or when ``dist`` declares nothing about ``on``. Requirements behind an extra
    are not the base install's and are skipped; environment markers are evaluated here."""
    owner, needed = _distribution(dist, path), _distribution(on, path)
    if owner is None or needed is None:
        return None
    try:
        installed = Version(needed.version)
    except InvalidVersion:
        return None
    for line in owner.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != canonicalize_name(on):
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if not req.specifier.contains(installed, prereleases=True):
            return UnmetPin(owner.metadata["Name"], owner.version, f"{req.name}{req.specifier}", needed.version)
    return None
