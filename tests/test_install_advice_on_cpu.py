"""doctor's advice for a missing SGLang installs an SGLang that imports, as far as can be told without a network.

The advice is two commands through the default pair's constraints file: the ``gpu`` extra resolved under it, then
SGLang and its kernels with ``--no-deps``. ``--no-deps`` installs none of SGLang's own ``Requires-Dist``, so every
distribution ``import sglang`` imports must come from the first command: pinned by the file, or brought by the
resolver as a requirement of what it pins. What ``import sglang`` imports is read from SGLang's installed source:
the modules one ``import sglang`` executes (listed by a subprocess that imports it), and in each of them the import
statements that run whenever the module does (module level, also inside ``with``/class bodies and inside a ``try``
that does not catch ImportError; not under ``if``, in functions, or behind an ImportError guard). The resolver's
reach is the closure of the ``Requires-Dist`` this environment's installed distributions declare, for this platform.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import sglang_or_skip
from verl_sglang_lora.install_advice import INSTALL_GPU_SET, INSTALL_SGLANG, SGLANG_ADVICE

ROOT = Path(__file__).resolve().parents[1]
NO_DEPS_MARK = "# --no-deps"
IMPORT_GUARDS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Constraints:
    pins: dict[str, str]
    no_deps: frozenset[str]


def read_constraints(text: str) -> Constraints:
    pins, no_deps = {}, set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        pins[norm(name)] = version
        if NO_DEPS_MARK in line:
            no_deps.add(norm(name))
    return Constraints(pins, frozenset(no_deps))


def advised_constraints() -> Path:
    """The constraints file both advised commands name (one file)."""
    files = set(re.findall(r"-c (\S+\.txt)", SGLANG_ADVICE))
    assert len(files) == 1, f"the advice names {sorted(files)} constraints files: {SGLANG_ADVICE}"
    path = ROOT / files.pop()
    assert path.is_file(), path
    return path


def _guarded(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(ast.unparse(t).rsplit(".", 1)[-1] in IMPORT_GUARDS for t in types):
            return True
    return False


def unconditional_imports(body: list[ast.stmt]) -> list[tuple[str, int]]:
    """(module, line) of each absolute import that runs whenever this body does."""
    found: list[tuple[str, int]] = []
    for stmt in body:
        if isinstance(stmt, ast.Import):
            found += [(alias.name, stmt.lineno) for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            found.append((stmt.module, stmt.lineno))
        elif isinstance(stmt, ast.Try):
            if not _guarded(stmt):
                found += unconditional_imports(stmt.body) + unconditional_imports(stmt.orelse)
            found += unconditional_imports(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.ClassDef)):
            found += unconditional_imports(stmt.body)
    return found


@pytest.fixture(scope="module")
def import_time_needs() -> dict[str, str]:
    """distribution -> where ``import sglang`` imports it unconditionally (module:line)."""
    sglang_or_skip("sglang")
    code = ("import json, sys\nimport sglang\nprint(json.dumps({n: getattr(m, '__file__', None) for n, m in "
            "list(sys.modules.items()) if n == 'sglang' or n.startswith('sglang.')}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    executed = json.loads(proc.stdout.strip().splitlines()[-1])
    owners = md.packages_distributions()
    needs: dict[str, str] = {}
    unmapped = []
    for module, file in sorted(executed.items()):
        if not file or not file.endswith(".py"):
            continue
        for imported, line in unconditional_imports(ast.parse(Path(file).read_text(encoding="utf-8")).body):
            top = imported.split(".", 1)[0]
            if top in sys.stdlib_module_names or top in ("sglang", "__future__"):
                continue
            dists = owners.get(top)
            if not dists:
                unmapped.append(f"{top} ({module}:{line})")
                continue
            needs.setdefault(norm(dists[0]), f"{module}:{line}")
    assert not unmapped, f"imported by `import sglang` but owned by no installed distribution: {unmapped}"
    assert "torch" in needs and len(executed) > 5, (needs, len(executed))  # the reading found SGLang's imports
    return needs


def resolver_reach(constraints: Constraints) -> set[str]:
    """What the advice installs: every pin, plus the requirement closure of what the resolver installs (the plugin's
    own requirements and the pins but the --no-deps ones), from this environment's installed metadata."""
    from packaging.requirements import Requirement

    try:
        own = md.requires("verl-sglang-lora") or []
    except md.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed: the pins alone
        own = []
    plugin = [r for r in map(Requirement, own) if r.marker is None or r.marker.evaluate({"extra": ""})]
    todo = [(norm(r.name), frozenset(r.extras)) for r in plugin]
    todo += [(name, frozenset()) for name in constraints.pins if name not in constraints.no_deps]
    reached, seen = set(constraints.pins), set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        reached.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue  # pinned, not installed here: itself counts, its requirements cannot be read
        for req in map(Requirement, requires):
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((norm(req.name), frozenset(req.extras)))
    return reached


def uncovered(needs: dict[str, str], constraints: Constraints) -> list[str]:
    from packaging.requirements import Requirement

    declared = {norm(r.name) for r in map(Requirement, md.requires("sglang") or []) if "extra" not in str(r.marker)}
    reach = resolver_reach(constraints)
    return [f"{dist} (imported at {where}; {'declared by SGLang, skipped by --no-deps' if dist in declared else 'not declared by SGLang'})"
            for dist, where in sorted(needs.items()) if dist not in reach]


def test_the_advice_installs_sglang_through_the_constraints_file() -> None:
    path = advised_constraints()
    text = path.read_text(encoding="utf-8")
    constraints = read_constraints(text)
    assert INSTALL_GPU_SET in SGLANG_ADVICE and INSTALL_SGLANG in SGLANG_ADVICE
    assert INSTALL_GPU_SET.startswith("pip install '.[gpu]' -c ")
    assert "# extra: gpu" in text.splitlines(), "the gpu extra the first command installs is not this file's pins"
    # the second command: --no-deps, exactly the packages the file marks so, each of them pinned there
    words = INSTALL_SGLANG.split()
    assert words[:3] == ["pip", "install", "--no-deps"] and f"-c {path.relative_to(ROOT)}" in INSTALL_SGLANG
    packages = {norm(w) for w in words[5:]}
    assert packages == constraints.no_deps and "sglang" in packages, (packages, constraints.no_deps)
    # the SGLang it installs is the installed one these tests read (the pair's pin)
    assert constraints.pins["sglang"] == md.version("sglang").split("+")[0]


def test_the_constraints_file_covers_what_import_sglang_imports(import_time_needs) -> None:
    """Nothing ``import sglang`` imports is left to chance by the advice (``No module named 'torchvision'`` was
    what following it gave on a machine without torchvision)."""
    constraints = read_constraints(advised_constraints().read_text(encoding="utf-8"))
    missing = uncovered(import_time_needs, constraints)
    assert not missing, f"{advised_constraints().name} neither pins nor brings: {missing}"


def test_the_coverage_check_sees_a_dropped_pin(import_time_needs) -> None:
    """The check above can fail: without its torchvision line the file does not cover ``import sglang``."""
    assert "torchvision" in import_time_needs, import_time_needs
    text = advised_constraints().read_text(encoding="utf-8")
    dropped = "\n".join(ln for ln in text.splitlines() if not ln.startswith("torchvision=="))
    missing = uncovered(import_time_needs, read_constraints(dropped))
    assert [m.split(" ", 1)[0] for m in missing] == ["torchvision"], missing
