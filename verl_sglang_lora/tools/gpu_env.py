"""The examples' set-up: the tested GPU stack in one environment, built once, reused after.

    python -m verl_sglang_lora.tools.gpu_env [--megatron] [--dry-run] [--rebuild] [--skip-gpu-check]

Prints the python the run should use as the last line of stdout; every progress line, and pip's own output, goes to
stderr. In order:
1. this python already has the tested set (the preflight's package check against the constraints file): use it;
2. the env (``VSL_GPU_ENV``, default ``.venv-gpu`` in the checkout) carries a stamp for the same constraints file
   (sha256) and the same python: reuse it (well under a second);
3. else (re)build it: ``python -m venv --system-site-packages``, so the host's CUDA torch is seen (where this python is
   itself a venv -- the H200 host's ``python3`` is ``/opt/torch/.venv`` -- the env is made from its interpreter and a
   .pth file keeps the venv's site-packages visible behind the env's own), then the tested set
   from the offline bundle (``VSL_BUNDLE=DIR``: a folder with SHA256SUMS, or carry_plan's ``b*/`` batches; found by
   itself in ``.whl/`` or ``/tmp/whl``; ``VSL_BUNDLE=none`` forces the index) through
   scripts/offline_bundle/install.sh, or from the package index with the constraints file (README, Install); then
   the preflight's package check in the new env, then the stamp.
Torch: the constraints pin the torch the set was tested with. Where the host's torch is that version (any local
label, e.g. +cu130), the env uses it. Where it is not (or absent), from the index pip installs the pinned torch into
the env (a multi-GB CUDA wheel; the host's stays as it is); an offline bundle that carries no torch at that version
(SGLang 0.5.12's: the host's is used) cannot, so that case is
refused with the fix. A step that fails ends the set-up with one line naming the step and the fix; exit code 2.

A Python module rather than a shell script so that its decisions (stamp, source, torch) are plain functions the CPU
tests call, and so that it can reuse the preflight's checks in-process; it needs only the standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from verl_sglang_lora.tools import preflight

REPO = Path(__file__).resolve().parents[2]
STAMP = "vsl-gpu-env.json"  # written last, only after the env passed the package check
PARTIAL = "vsl-gpu-env.partial"  # written first: a dir with it is ours to remove after a failed build
BUNDLE_SITE = "offline-site"  # install.sh's --target inside the env, put on sys.path by a .pth file
INSTALL_SH = REPO / "scripts" / "offline_bundle" / "install.sh"
DEVICE_BUNDLE = Path("/tmp/whl")  # where docs/offline_bundle.md's device calls copy the batches
# What SGLang and verl import at run time that the tested set leaves to the GPU image (the lock's header) and
# SGLang's --no-deps install does not pull: installed from the index only where missing, unpinned.
IMAGE_PACKAGES = ["numpy", "pandas", "pyarrow", "aiohttp", "requests", "psutil", "uvloop", "prometheus-client",
                  "pyyaml", "peft", "accelerate", "huggingface-hub", "safetensors", "scipy", "pillow", "einops",
                  "ninja", "msgpack", "protobuf"]
PROBE = ("import json, sys, importlib.metadata as m, importlib.util as u\n"
         "try:\n    t = m.version('torch')\nexcept m.PackageNotFoundError:\n    t = None\n"
         "print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3], 'tag': 'cp%d%d' % sys.version_info[:2],"
         " 'executable': sys.executable, 'torch': t, 'venv': sys.prefix != sys.base_prefix,"
         " 'base_executable': getattr(sys, '_base_executable', sys.executable),"
         " 'prefix': sys.prefix,"
         " 'site': sorted({__import__('sysconfig').get_paths()[k] for k in ('purelib', 'platlib')}),"
         " 'pip': u.find_spec('pip') is not None}))")
PARENT_PTH = "vsl-parent-venv.pth"  # the site-packages of the venv the env is layered over (e.g. the host's torch)


class SetupError(Exception):
    """One step failed: the one line the user sees."""

    def __init__(self, step: str, why: str, fix: str | None) -> None:
        # fix=None: `why` carries its own fix (the preflight's messages do)
        super().__init__(f"{step}: {why}" if fix is None else f"{step} failed: {why}. Fix: {fix}")


def say(msg: str) -> None:
    print(f"gpu_env: {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


DEFAULT_MARK = "# extra: gpu"  # constraints/generate.py marks the default pair's file (the `gpu` extra)


def default_constraints(repo: Path = REPO) -> Path:
    """The default tested pair's constraints file (SGLang 0.5.12, verl 0.9.1's pin); VSL_CONSTRAINTS picks another."""
    files = sorted((repo / "constraints").glob("verl*-sglang*.txt"))
    default = [f for f in files if DEFAULT_MARK in f.read_text(encoding="utf-8").splitlines()]
    if len(default) != 1:
        raise SetupError("find the constraints file", f"expected one constraints/verl*-sglang*.txt with "
                         f"'{DEFAULT_MARK}' in {repo}, found {[f.name for f in default]} of {[f.name for f in files]}",
                         "VSL_CONSTRAINTS=FILE names the tested set to install")
    return default[0]


def requires_file(constraints: Path) -> Path | None:
    """A pair's requirements file (constraints/requires/<pair>.txt), where no resolver can take this package beside
    it: installed with the constraints, then the --no-deps packages and this package without a resolve."""
    path = constraints.parent / "requires" / constraints.name
    return path if path.is_file() else None


def probe(python: str) -> dict:
    """Version, wheel tag, torch and pip of an interpreter, without importing torch."""
    try:
        proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=60)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise SetupError(f"ask {python} what it is", f"{type(exc).__name__}: {exc}",
                         "PYTHON=/path/to/python3 (3.10-3.12; the GPU runs used 3.12)") from None


# ---------------------------------------------------------------- the env's stamp

def wanted_stamp(constraints: Path, base: dict) -> dict:
    requires = requires_file(constraints)  # None (absent from the stamp's comparison) for the default pair
    return {"constraints": constraints.name, "constraints_sha256": sha256(constraints),
            "requires_sha256": sha256(requires) if requires else None,
            "python": base["version"], "base_python": base["executable"], "parent_venv": base.get("parent_prefix")}


def stamp_verdict(env: Path, want: dict) -> tuple[bool, str]:
    """(reuse?, why): the env is reused only when its stamp names the same constraints bytes and python."""
    stamp = env / STAMP
    if not (env / "bin" / "python").exists() or not stamp.exists():
        return False, f"no finished env in {env}"
    try:
        have = json.loads(stamp.read_text(encoding="utf-8"))
    except ValueError:
        return False, f"{stamp} is unreadable"
    if have.get("constraints_sha256") != want["constraints_sha256"]:
        return False, (f"the constraints changed since it was built ({have.get('constraints')} "
                       f"{str(have.get('constraints_sha256'))[:12]} -> {want['constraints']} "
                       f"{want['constraints_sha256'][:12]})")
    if have.get("requires_sha256") != want["requires_sha256"]:
        return False, f"the requirements file of {want['constraints']} changed since it was built"
    if (have.get("python"), have.get("base_python")) != (want["python"], want["base_python"]):
        return False, (f"it was built on python {have.get('python')} ({have.get('base_python')}), this is "
                       f"{want['python']} ({want['base_python']})")
    if have.get("parent_venv") != want.get("parent_venv"):
        return False, f"it was layered over {have.get('parent_venv')}, this python is {want.get('parent_venv')}"
    return True, f"stamp matches ({want['constraints']}, python {want['python']}, built {have.get('built', '?')})"


# ---------------------------------------------------------------- where the wheels come from

@dataclass
class Bundle:
    dirs: list[Path]  # one folder with SHA256SUMS, or carry_plan's batches (one of them has it)
    origin: str  # "VSL_BUNDLE" or "found"

    def describe(self) -> str:
        return ", ".join(str(d) for d in self.dirs)

    def carries(self, name: str, version: str) -> bool:
        """Whether a wheel of ``name==version`` is among the batches (whole, or in build.py's parts)."""
        prefix = f"{name.replace('-', '_')}-{version}-".lower()
        return any(f.name.lower().startswith(prefix) and ".whl" in f.name for d in self.dirs for f in d.iterdir())


def _bundle_at(path: Path) -> list[Path] | None:
    if (path / "SHA256SUMS").is_file():
        return [path]
    batches = sorted(d for d in path.glob("b*") if d.is_dir() and d.name[1:].isdigit())
    if any((d / "SHA256SUMS").is_file() for d in batches):
        return batches
    return None


def find_bundle(explicit: str | None, repo: Path | None = None, device_dir: Path | None = None) -> Bundle | None:
    """VSL_BUNDLE=DIR wins (and must be a bundle); VSL_BUNDLE=none forces the index; else a bundle built in this
    checkout (.whl/parts, or the .whl/b* batches) or carried to the device's documented place (/tmp/whl)."""
    if explicit is not None and explicit.strip().lower() in ("none", "0", "no", "network", "index"):
        return None
    if explicit:
        dirs = _bundle_at(Path(explicit).resolve())
        if dirs is None:
            raise SetupError("find the offline bundle", f"VSL_BUNDLE={explicit} has no SHA256SUMS, nor b*/ batches "
                             "with one", "point VSL_BUNDLE at the folder the batches were copied into (all of them: "
                             "docs/offline_bundle.md), or VSL_BUNDLE=none to install from the package index")
        return Bundle(dirs, "VSL_BUNDLE")
    repo = repo or REPO
    for path in (repo / ".whl" / "parts", repo / ".whl", device_dir or DEVICE_BUNDLE):
        dirs = _bundle_at(path)
        if dirs is not None:
            return Bundle(dirs, "found")
    return None


WHEEL_ABI = re.compile(r"-(cp\d+)-(cp\d+m?)-[^-]+\.whl(\.part\d+)?$")


def bundle_python_tags(bundle: Bundle) -> set[str]:
    """The interpreter tags the bundle's version-specific wheels were built for (abi3 / py3 wheels fit any)."""
    tags = set()
    for d in bundle.dirs:
        for f in d.iterdir():
            m = WHEEL_ABI.search(f.name)
            if m:
                tags.add(m.group(2).rstrip("m"))
    return tags


def torch_decision(base: dict, pinned: str | None, bundle: Bundle | None) -> str:
    """What happens to torch, as a line to print; refuses where the offline bundle cannot give the env one."""
    host = base.get("torch")
    if pinned is None:
        return f"torch: not pinned by the constraints; the host's ({host or 'none'}) is what the env sees"
    if host and host.split("+", 1)[0] == pinned:
        seen = f"{base['parent']} ({PARENT_PTH})" if base.get("parent") else "--system-site-packages"
        return f"torch: the host's {host} (the tested {pinned}), seen through {seen}"
    if bundle is not None and bundle.carries("torch", pinned):  # SGLang 0.5.23's bundle: its own torch 2.14.1
        return (f"torch: the offline bundle's {pinned} (the tested one), ahead of the host's {host or 'none'} "
                "on the env's path")
    if bundle is not None:
        raise SetupError("choose torch", f"the offline bundle carries no torch {pinned} (the host's is used) and "
                         f"{base['executable']} has {host or 'none'}, not the tested {pinned}",
                         f"install torch {pinned} (a CUDA build for this driver) into that python, or install "
                         "from the package index (VSL_BUNDLE=none, network needed), or run on your own env with "
                         "VSL_SKIP_SETUP=1 (untested)")
    return (f"torch: the host has {host or 'none'}, not the tested {pinned}: pip installs torch=={pinned} from the "
            "index into the env (a multi-GB CUDA wheel; the host's torch stays as it is)")


# ---------------------------------------------------------------- the build

@dataclass
class Step:
    name: str
    fix: str
    argv: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    action: Callable[[], None] | None = None
    note: str = ""  # what the user waits for

    def show(self) -> str:
        if self.argv is None:
            return f"# {self.name}"
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def _stage(batches: list[Path], into: Path) -> None:
    """carry_plan's batches into one folder, as install.sh wants them (hard links: no second copy of 130 MiB)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for d in batches:
        for f in d.iterdir():
            if f.is_file():
                try:
                    os.link(f, into / f.name)
                except OSError:
                    shutil.copy2(f, into / f.name)


def build_steps(env: Path, base: dict, constraints: Path, pins: list[preflight.Pin], bundle: Bundle | None,
                stamp: dict) -> list[Step]:
    base_py, env_py = base["executable"], str(env / "bin" / "python")
    site = env / "lib" / f"python{'.'.join(base['version'].split('.')[:2])}" / "site-packages"
    steps = []
    if env.exists():
        steps.append(Step(f"remove the old env {env}", f"remove {env} by hand", action=lambda: shutil.rmtree(env)))
    venv_fix = (f"make {base_py} able to create venvs (Debian/Ubuntu: apt-get install python3-venv), or "
                "PYTHON=another python, or VSL_SKIP_SETUP=1 with your own env")
    if bundle is not None and base.get("parent") and not base.get("pip_python"):
        raise SetupError("install the offline bundle", f"neither {base['parent']} nor {base_py} has pip",
                         f"{base_py} -m ensurepip (or pip installed into the venv), or VSL_SKIP_SETUP=1 with your "
                         "own env")
    # with the bundle no pip in the env: install.sh runs the host python's pip with --target, then a .pth puts that
    # target ahead of the host's site-packages (its transformers / tokenizers are shadowed, its torch is used)
    without_pip = ["--without-pip"] if bundle is not None else []
    steps.append(Step("create the env", venv_fix,
                      argv=[base_py, "-m", "venv", "--system-site-packages", *without_pip, str(env)]))
    steps.append(Step("mark the env as being built", f"check that {env.parent} is writable",
                      action=lambda: (env.mkdir(parents=True, exist_ok=True), (env / PARTIAL).write_text(""))))
    parent_site = base.get("parent_site") or []
    if parent_site:
        steps.append(Step(f"let the env see {base['parent']}'s packages behind its own ({PARENT_PTH})",
                          f"check that {site} is writable",
                          # addsitedir, not a bare path: the venv's own .pth files (editable installs, ...) run too
                          action=lambda: (site.mkdir(parents=True, exist_ok=True), (site / PARENT_PTH).write_text(
                              "".join(f"import site; site.addsitedir({d!r})\n" for d in parent_site)))))
    if bundle is not None:
        src = bundle.dirs[0]
        if len(bundle.dirs) > 1:
            src = env / ".bundle"
            steps.append(Step(f"stage the bundle's {len(bundle.dirs)} batches in {src}", f"check the space in {env}",
                              action=lambda: _stage(bundle.dirs, src)))
        target = env / BUNDLE_SITE
        steps.append(Step("install the offline bundle (scripts/offline_bundle/install.sh)",
                          "carry every batch and SHA256SUMS (docs/offline_bundle.md, Build here, carry, install "
                          "there), or VSL_BUNDLE=none to install from the package index",
                          argv=["bash", str(INSTALL_SH), str(src), str(target)],
                          env={"PYTHON": base.get("pip_python") or base_py},
                          note="checks sha256, then pip --no-index --no-deps; about a minute"))
        steps.append(Step(f"put {target} on the env's path (a .pth file: no PYTHONPATH needed)",
                          f"check that {site} is writable",
                          action=lambda: (site.mkdir(parents=True, exist_ok=True),
                                          # addsitedir: the bundle's own .pth files run too (SGLang 0.5.23's
                                          # nvidia-cutlass-dsl finds its modules through one)
                                          (site / "vsl-offline-bundle.pth").write_text(
                                              f"import site; site.addsitedir({str(target)!r})\n"))))
        if len(bundle.dirs) > 1:
            steps.append(Step(f"remove {src}", f"remove {src} by hand", action=lambda: shutil.rmtree(src)))
    else:
        net_fix = ("check the network / pip's index settings (pip config list), or on an air-gapped host give "
                   "the offline bundle: VSL_BUNDLE=DIR (docs/offline_bundle.md)")
        # README, Install: the gpu extra (or the pair's requirements file) with the constraints, then the packages
        # marked --no-deps (SGLang and its kernels; verl beside SGLang 0.5.23, with this package) without a resolve
        requires = requires_file(constraints)
        resolved = ["-r", str(requires)] if requires else [f"{REPO}[gpu]"]
        steps.append(Step("install the tested set from the package index", net_fix,
                          argv=[env_py, "-m", "pip", "install", "-c", str(constraints), *resolved, *IMAGE_PACKAGES],
                          note="pip resolves and downloads; minutes, more when torch comes too"))
        no_deps = [p.name for p in pins if p.no_deps]
        if no_deps or requires:
            said = ", ".join(no_deps + (["this plugin"] if requires else []))
            steps.append(Step(f"install {said} (--no-deps)", net_fix,
                              argv=[env_py, "-m", "pip", "install", "--no-deps", "-c", str(constraints), *no_deps,
                                    *([str(REPO)] if requires else [])]))
    paths = [str(REPO), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    pythonpath = os.pathsep.join(dict.fromkeys(p for p in paths if p))  # the checkout first, once
    verify_fix = (f"the bundle does not hold {constraints.name}'s set: build it again from the same lock "
                  "(docs/offline_bundle.md), or VSL_BUNDLE=none to install from the package index" if bundle else
                  "pip left other versions than the pins (named above): VSL_REBUILD=1 builds the env again")
    steps.append(Step("check the env has the tested set", verify_fix,
                      argv=[env_py, "-m", "verl_sglang_lora.tools.preflight", "--packages-only", "--constraints",
                            str(constraints)], env={"PYTHONPATH": pythonpath}))

    def write_stamp() -> None:
        record = {**stamp, "source": bundle.describe() if bundle else "package index",
                  "built": time.strftime("%Y-%m-%d %H:%M:%S")}
        (env / STAMP).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        (env / PARTIAL).unlink(missing_ok=True)

    steps.append(Step("record the stamp", f"check that {env} is writable", action=write_stamp))
    return steps


def run_steps(steps: list[Step]) -> None:
    for i, step in enumerate(steps, 1):
        say(f"[{i}/{len(steps)}] {step.name}" + (f" ({step.note})" if step.note else "") + " ...")
        t0 = time.monotonic()
        if step.action is not None:
            try:
                step.action()
            except OSError as exc:
                raise SetupError(step.name, f"{type(exc).__name__}: {exc}", step.fix) from None
        else:
            try:  # the tool's own output goes to stderr: stdout carries only the python the example runs
                rc = subprocess.run(step.argv, env={**os.environ, **step.env}, stdout=sys.stderr).returncode
            except OSError as exc:
                raise SetupError(step.name, f"{type(exc).__name__}: {exc}", step.fix) from None
            if rc != 0:
                cmd = shlex.join(step.argv[:6]) + (" ..." if len(step.argv) > 6 else "")
                raise SetupError(step.name, f"`{cmd}` exited with {rc} (its output is above)", step.fix)
        if time.monotonic() - t0 > 5:
            say(f"    done in {time.monotonic() - t0:.0f} s")


def setup(args: argparse.Namespace) -> str:
    """The python the example should run with; builds the env when needed."""
    constraints = Path(args.constraints or os.environ.get("VSL_CONSTRAINTS") or default_constraints()).resolve()
    if not constraints.is_file():
        raise SetupError("find the constraints file", f"{constraints} does not exist",
                         "VSL_CONSTRAINTS=FILE, one of constraints/verl*-sglang*.txt")
    if args.megatron:
        say(f"the Megatron stack (megatron-core, megatron-bridge, transformer-engine) is not in the tested set "
            f"{constraints.name}: this set-up does not install it; the check after it says what to install "
            f"({preflight.MEGATRON_DOC})")
    if not args.skip_gpu_check:
        problems = preflight.gpu_problems(args.gpus)
        if problems:  # no env is built where the run cannot start
            raise SetupError("nothing was built", problems[0], None)
    pins = preflight.tested_set(constraints)
    if not preflight.package_problems(constraints):
        say(f"{sys.executable} has the tested set of {constraints.name}: using it")
        return sys.executable

    env = Path(args.env or os.environ.get("VSL_GPU_ENV") or REPO / ".venv-gpu").absolute()
    base = probe(args.base_python)
    if base["venv"] and base.get("base_executable") not in (None, base["executable"]):
        # venv makes the env from the interpreter under a venv; the venv's own packages (on the H200 host: its CUDA
        # torch, /opt/torch/.venv) stay visible through a .pth file, behind the env's and the bundle's
        parent = base
        say(f"{parent['executable']} is a venv: the env is made from its interpreter {parent['base_executable']} and "
            f"sees this venv's packages too ({PARENT_PTH})")
        under = probe(parent["base_executable"])
        site_dirs = [d for d in parent.get("site") or [] if os.path.isdir(d)]
        if not site_dirs:
            raise SetupError("layer the env over the venv", f"{parent['executable']} names no existing site-packages "
                             f"({parent.get('site')})", "PYTHON=a python whose packages are where it says, or "
                             "VSL_SKIP_SETUP=1 with your own env")
        pip_python = next((p["executable"] for p in (parent, under) if p.get("pip")), None)
        base = {**under, "torch": parent.get("torch") or under.get("torch"), "parent": parent["executable"],
                "parent_prefix": parent.get("prefix"), "parent_site": site_dirs, "pip_python": pip_python}
    stamp = wanted_stamp(constraints, base)
    reuse, why = stamp_verdict(env, stamp)
    if reuse and not args.rebuild:
        say(f"reusing {env}: {why}")
        return str(env / "bin" / "python")
    if env.exists() and any(env.iterdir()) and not ((env / STAMP).exists() or (env / PARTIAL).exists()):
        raise SetupError("create the env", f"{env} exists and was not made by this set-up (no {STAMP})",
                         "remove it, or choose another folder with VSL_GPU_ENV=DIR")
    say(("rebuilding, as asked (VSL_REBUILD=1)" if args.rebuild and reuse else f"building the env: {why}")
        + f"; {env} from {base['executable']} (python {base['version']})")

    bundle_arg = args.bundle if args.bundle is not None else os.environ.get("VSL_BUNDLE")
    bundle = find_bundle(bundle_arg)
    if bundle is not None:
        tags = bundle_python_tags(bundle) - {base["tag"]}
        if tags:
            why_not = f"its wheels are built for {', '.join(sorted(tags))}, this python is {base['tag']}"
            if bundle.origin == "VSL_BUNDLE":
                raise SetupError("choose the wheels", f"VSL_BUNDLE={bundle_arg}: {why_not}",
                                 "PYTHON=/path/to/the python the bundle was built for (build.py --python-version), "
                                 "or VSL_BUNDLE=none to install from the package index")
            say(f"found an offline bundle in {bundle.describe()}, but {why_not}: installing from the package index")
            bundle = None
    if bundle is not None:
        how = "VSL_BUNDLE" if bundle.origin == "VSL_BUNDLE" else "found; VSL_BUNDLE=none uses the index instead"
        say(f"source: the offline bundle in {bundle.describe()} ({how})")
    else:
        say(f"source: the package index, pinned by {constraints} (no usable offline bundle)")
    torch_pin = next((p.version for p in pins if p.name == "torch"), None)
    say(torch_decision(base, torch_pin, bundle))
    steps = build_steps(env, base, constraints, pins, bundle, stamp)
    if args.dry_run:
        for step in steps:
            print(f"+ {step.show()}")
        return str(env / "bin" / "python")
    run_steps(steps)
    say(f"ready: {env} (the next run reuses it)")
    return str(env / "bin" / "python")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", help="the env folder (VSL_GPU_ENV; default .venv-gpu in the checkout)")
    p.add_argument("--constraints", help="the tested set (VSL_CONSTRAINTS; default the default pair's constraints/*.txt)")
    p.add_argument("--bundle", help="offline bundle folder, or 'none' for the package index (VSL_BUNDLE)")
    p.add_argument("--base-python", default=sys.executable, help="the python the env is made from (default: this)")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--megatron", action="store_true", help="say that the Megatron stack is not part of the set")
    p.add_argument("--rebuild", action="store_true", default=os.environ.get("VSL_REBUILD") == "1",
                   help="build the env again even where its stamp matches (VSL_REBUILD=1)")
    p.add_argument("--skip-gpu-check", action="store_true", help="the caller has checked the GPU already")
    p.add_argument("--dry-run", action="store_true", help="print the commands it would run, change nothing")
    args = p.parse_args(argv)
    try:
        python = setup(args)
    except SetupError as exc:
        print(f"verl-sglang-lora set-up: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a half-built env keeps its PARTIAL mark: the next run removes and rebuilds it
        print("verl-sglang-lora set-up: interrupted; the next run starts the env again", file=sys.stderr)
        return 130
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
