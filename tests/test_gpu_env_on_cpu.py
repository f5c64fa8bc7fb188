"""The examples' set-up (verl_sglang_lora.tools.gpu_env) and the preflight's split checks, on this CPU host.

The set-up is run for real against a stand-in base python (a shell script on the command line, not the machine's):
it answers the interpreter probe as the H200's python would, makes a fake env whose ``python -m pip`` logs its argv
(and fails on request), and lets the env's package check pass or fail on request. So the decisions are tested
through the real code paths -- reuse when the stamp matches, rebuild when the constraints change, bundle vs index,
refusals and their one-line messages -- and so is scripts/offline_bundle/install.sh's reassembly and checksum, with
no real install (a stand-in pip; it is not SGLang's wire contract).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from verl_sglang_lora.tools import gpu_env, preflight

ROOT = Path(__file__).resolve().parents[1]
H200 = {"version": "3.12.3", "tag": "cp312", "torch": "2.11.0+cu130", "venv": False, "pip": True}
FAKE = """#!/usr/bin/env bash
# stand-in interpreter: probe answer, venv, pip and the package check logged to $FAKE_LOG
if [ "$1" = "-c" ]; then echo "$FAKE_PROBE"; exit 0; fi
if [ "$1" = "-" ]; then cat >/dev/null; echo "installed: (stand-in)"; exit 0; fi
echo "$0 $*" >> "$FAKE_LOG"
case "$2" in
  venv) mkdir -p "${@: -1}/bin" && ln -sf "$FAKE_SELF" "${@: -1}/bin/python";;
  pip) exit "${FAKE_PIP_RC:-0}";;
  verl_sglang_lora.tools.preflight) exit "${FAKE_CHECK_RC:-0}";;
  *) exit 99;;
esac
"""
PINS = "torch==2.11.0\nverl==0.9.1\nsglang==0.5.12  # --no-deps\nsglang-kernel==0.4.2.post2  # --no-deps\n"


class Host:
    """A stand-in base python, a constraints file and an env folder under tmp_path."""

    def __init__(self, tmp_path: Path, **probe: object) -> None:
        self.tmp = tmp_path
        self.python = tmp_path / "python3"
        self.python.write_text(FAKE)
        self.python.chmod(0o755)
        self.log = tmp_path / "calls.log"
        self.log.touch()
        self.constraints = tmp_path / "verl0.9.1-sglang0.5.12.txt"
        self.constraints.write_text(PINS)
        self.env = tmp_path / "gpu-env"
        self.probe = {**H200, "executable": str(self.python), **probe}

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if not k.startswith("VSL_")}  # only what the test sets
        full.update(FAKE_LOG=str(self.log), FAKE_SELF=str(self.python), FAKE_PROBE=json.dumps(self.probe),
                    PYTHONPATH=str(ROOT), **env)
        cmd = [sys.executable, "-m", "verl_sglang_lora.tools.gpu_env", "--skip-gpu-check", "--base-python",
               str(self.python), "--env", str(self.env), "--constraints", str(self.constraints), *args]
        return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=60)

    def calls(self) -> list[str]:
        return [line.split(" ", 1)[1] for line in self.log.read_text().splitlines()]


def one_failure(proc: subprocess.CompletedProcess) -> str:
    """Exit 2 and a last stderr line that names the step and the fix; no traceback, nothing on stdout."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("verl-sglang-lora set-up: ") and "Fix: " in last, proc.stderr
    return last


def test_builds_from_the_index_once_then_reuses_it(tmp_path: Path) -> None:
    host = Host(tmp_path)
    first = host.run("--bundle", "none")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(host.env / "bin" / "python")  # stdout: only the python to run with
    calls = host.calls()
    assert calls[0] == f"-m venv --system-site-packages {host.env}"  # the host's CUDA torch stays visible
    assert calls[1].startswith(f"-m pip install -c {host.constraints} {ROOT}[gpu] ")  # README, Install
    assert calls[2] == f"-m pip install --no-deps -c {host.constraints} sglang sglang-kernel"
    assert calls[3] == f"-m verl_sglang_lora.tools.preflight --packages-only --constraints {host.constraints}"
    assert "torch: the host's 2.11.0+cu130 (the tested 2.11.0)" in first.stderr
    assert "[3/6] install the tested set from the package index" in first.stderr  # each long phase announced
    stamp = json.loads((host.env / gpu_env.STAMP).read_text())
    assert stamp["constraints_sha256"] == hashlib.sha256(host.constraints.read_bytes()).hexdigest()
    assert stamp["python"] == "3.12.3" and stamp["source"] == "package index"
    assert not (host.env / gpu_env.PARTIAL).exists()

    t0 = time.monotonic()
    again = host.run("--bundle", "none")
    assert again.returncode == 0 and again.stdout.strip() == str(host.env / "bin" / "python")
    assert time.monotonic() - t0 < 5 and f"reusing {host.env}: stamp matches" in again.stderr
    assert host.calls() == calls  # nothing ran


def test_a_pair_with_a_requirements_file_installs_it_then_verl_and_the_plugin_without_a_resolve(tmp_path: Path) -> None:
    """SGLang 0.5.23's pair (README, Install): its transformers is outside verl 0.9.1's declared range, so the resolve
    takes the requirements file and verl goes in --no-deps, with this package (whose own verl requirement would
    bring that range back)."""
    host = Host(tmp_path)
    host.constraints = tmp_path / "verl0.9.1-sglang0.5.23.txt"
    # a pin no interpreter has, so that the python running the test never passes for the tested set itself
    host.constraints.write_text("torch==2.14.1\nsglang==0.5.23\ntransformers==5.19.0\nvsl-absent==0.0.1\n"
                                "verl==0.9.1  # --no-deps\n")
    (tmp_path / "requires").mkdir()
    requires = tmp_path / "requires" / host.constraints.name
    requires.write_text("torch==2.14.1\nsglang==0.5.23\ntransformers==5.19.0\naccelerate\n")
    proc = host.run("--bundle", "none")
    assert proc.returncode == 0, proc.stderr
    calls = host.calls()
    assert calls[1].startswith(f"-m pip install -c {host.constraints} -r {requires} ")
    assert calls[2] == f"-m pip install --no-deps -c {host.constraints} verl {ROOT}"
    assert "install verl, this plugin (--no-deps)" in proc.stderr
    assert host.run("--bundle", "none").returncode == 0 and len(host.calls()) == len(calls)  # reused
    requires.write_text(requires.read_text() + "peft\n")  # the requirements file alone changed: built again
    again = host.run("--bundle", "none")
    assert again.returncode == 0 and "requirements file of verl0.9.1-sglang0.5.23.txt changed" in again.stderr


def test_the_default_pair_is_the_one_marked_for_the_gpu_extra(tmp_path: Path) -> None:
    (tmp_path / "constraints").mkdir()
    for pair, mark in (("verl0.9.1-sglang0.5.12", "# extra: gpu\n"), ("verl0.9.1-sglang0.5.23", "")):
        (tmp_path / "constraints" / f"{pair}.txt").write_text(f"# header\n{mark}verl==0.9.1\n")
    assert gpu_env.default_constraints(tmp_path).name == "verl0.9.1-sglang0.5.12.txt"
    assert gpu_env.default_constraints(ROOT).name == "verl0.9.1-sglang0.5.12.txt"  # the checkout's own
    (tmp_path / "constraints" / "verl0.9.1-sglang0.5.12.txt").write_text("verl==0.9.1\n")
    with pytest.raises(gpu_env.SetupError, match="VSL_CONSTRAINTS=FILE"):
        gpu_env.default_constraints(tmp_path)


def test_rebuilds_when_the_constraints_or_the_python_change_or_when_asked(tmp_path: Path) -> None:
    host = Host(tmp_path)
    assert host.run("--bundle", "none").returncode == 0
    (host.env / "leftover").write_text("")
    host.constraints.write_text(PINS.replace("verl==0.9.1", "verl==0.9.2"))
    proc = host.run("--bundle", "none")
    assert proc.returncode == 0, proc.stderr
    assert "the constraints changed since it was built" in proc.stderr and "remove the old env" in proc.stderr
    assert not (host.env / "leftover").exists() and len(host.calls()) == 8  # built twice

    host.probe["version"] = "3.12.4"
    proc = host.run("--bundle", "none")
    assert "it was built on python 3.12.3" in proc.stderr and len(host.calls()) == 12

    proc = host.run("--bundle", "none", VSL_REBUILD="1")
    assert "rebuilding, as asked (VSL_REBUILD=1)" in proc.stderr and len(host.calls()) == 16


def test_a_failed_pip_ends_with_one_message_then_the_next_run_starts_again(tmp_path: Path) -> None:
    host = Host(tmp_path)
    last = one_failure(host.run("--bundle", "none", FAKE_PIP_RC="1"))
    assert "install the tested set from the package index failed" in last
    assert "VSL_BUNDLE=DIR" in last and "docs/offline_bundle.md" in last  # the air-gapped way out
    assert not (host.env / gpu_env.STAMP).exists() and (host.env / gpu_env.PARTIAL).exists()

    proc = host.run("--bundle", "none")  # a half-built env is ours: removed and built again
    assert proc.returncode == 0 and "no finished env" in proc.stderr and (host.env / gpu_env.STAMP).exists()


def test_an_env_that_fails_the_package_check_gets_no_stamp(tmp_path: Path) -> None:
    host = Host(tmp_path)
    last = one_failure(host.run("--bundle", "none", FAKE_CHECK_RC="2"))
    assert "check the env has the tested set failed" in last and "VSL_REBUILD=1" in last
    assert not (host.env / gpu_env.STAMP).exists()


def test_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.env.mkdir()
    (host.env / "precious.txt").write_text("mine")
    last = one_failure(host.run("--bundle", "none"))
    assert "was not made by this set-up" in last and "VSL_GPU_ENV=DIR" in last
    assert (host.env / "precious.txt").exists() and host.calls() == []


def bundle(where: Path, batches: dict[str, list[str]], corrupt: str = "") -> Path:
    """carry_plan's layout: wheel files spread over b0, b1, ...; SHA256SUMS in the last batch."""
    sums = []
    for batch, wheels in batches.items():
        (where / batch).mkdir(parents=True)
        for name in wheels:
            data = name.encode()
            (where / batch / name).write_bytes(data)
            sums.append(f"{hashlib.sha256(data if name != corrupt else b'other').hexdigest()}  {name}")
    (where / list(batches)[-1] / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return where


WHEELS = {"b0": ["ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"],
          "b1": ["verl-0.9.1-py3-none-any.whl", "sglang_kernel-0.4.2.post2-cp310-abi3-manylinux2014_x86_64.whl"]}


def test_installs_the_offline_bundle_through_its_install_script(tmp_path: Path) -> None:
    host = Host(tmp_path)
    whl = bundle(tmp_path / "whl", WHEELS)
    proc = host.run(VSL_BUNDLE=str(whl))
    assert proc.returncode == 0, proc.stderr
    calls = host.calls()
    assert calls[0] == f"-m venv --system-site-packages --without-pip {host.env}"  # the host's pip does it
    # install.sh reassembled the two batches, checked every sha256 and called pip once, offline, into the target
    target = host.env / gpu_env.BUNDLE_SITE
    assert calls[1].startswith("-m pip install -q --no-index --no-deps") and f"--target {target}" in calls[1]
    assert calls[1].count(".whl") == 3 and "install.sh: 3 wheels in" in proc.stderr
    pth = host.env / "lib" / "python3.12" / "site-packages" / "vsl-offline-bundle.pth"
    assert pth.read_text().strip() == f"import site; site.addsitedir({str(target)!r})"  # ahead of the host's
    assert calls[2].startswith("-m verl_sglang_lora.tools.preflight --packages-only")
    assert not (host.env / ".bundle").exists()  # the staging copy is gone
    assert json.loads((host.env / gpu_env.STAMP).read_text())["source"] == f"{whl / 'b0'}, {whl / 'b1'}"


def test_a_broken_bundle_fails_in_install_sh_with_the_fix(tmp_path: Path) -> None:
    host = Host(tmp_path)
    whl = bundle(tmp_path / "whl", WHEELS, corrupt="verl-0.9.1-py3-none-any.whl")
    last = one_failure(host.run(VSL_BUNDLE=str(whl)))
    assert "install the offline bundle (scripts/offline_bundle/install.sh) failed" in last
    assert "carry every batch and SHA256SUMS" in last
    assert not any(c.startswith("-m pip") for c in host.calls())


@pytest.mark.parametrize("probe, words", [
    ({"torch": "2.9.1+cu128"}, "has 2.9.1+cu128, not the tested 2.11.0"),
    ({"torch": None}, "has none, not the tested 2.11.0"),
])
def test_the_bundle_carries_no_torch_so_a_host_without_the_tested_one_is_refused(tmp_path, probe, words) -> None:
    host = Host(tmp_path, **probe)
    last = one_failure(host.run(VSL_BUNDLE=str(bundle(tmp_path / "whl", WHEELS))))
    assert "choose torch failed" in last and words in last and "VSL_SKIP_SETUP=1" in last
    assert host.calls() == [] and not host.env.exists()


def test_a_bundle_that_carries_the_pinned_torch_gives_the_env_its_own(tmp_path: Path) -> None:
    """SGLang 0.5.23's bundle carries torch 2.14.1 (in build.py's parts): the host's 2.11 is shadowed, not refused."""
    whl = bundle(tmp_path / "whl", {"b0": ["torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl.part00"]})
    found = gpu_env.find_bundle(str(whl))
    said = gpu_env.torch_decision({"torch": "2.11.0+cu130", "executable": "python3"}, "2.14.1", found)
    assert "the offline bundle's 2.14.1" in said and "2.11.0+cu130" in said
    with pytest.raises(gpu_env.SetupError, match="carries no torch 2.11.0"):  # a bundle without the pinned one
        gpu_env.torch_decision({"torch": "2.9.1", "executable": "python3"}, "2.11.0", found)


@pytest.mark.parametrize("layout, words", [
    ({"site": ["/nonexistent/site-packages"], "pip": True}, "names no existing site-packages"),
    ({"pip": False}, "has pip"),
])
def test_a_venv_python_the_env_cannot_be_layered_over_is_refused_before_anything_is_built(tmp_path, layout,
                                                                                          words) -> None:
    under = tmp_path / "python3-under"  # the interpreter under the venv (answers the same stand-in probe)
    under.write_text(FAKE)
    under.chmod(0o755)
    site = tmp_path / "venv-site"
    site.mkdir()
    host = Host(tmp_path, venv=True, base_executable=str(under), **{"site": [str(site)], **layout})
    last = one_failure(host.run(VSL_BUNDLE=str(bundle(tmp_path / "whl", WHEELS))))
    assert words in last and "VSL_SKIP_SETUP=1" in last
    assert host.calls() == [] and not host.env.exists()


def test_from_the_index_a_different_host_torch_is_said_and_pip_brings_the_tested_one(tmp_path: Path) -> None:
    host = Host(tmp_path, torch="2.9.1+cu128")
    proc = host.run("--bundle", "none", "--dry-run")
    assert proc.returncode == 0
    assert "pip installs torch==2.11.0 from the index into the env" in proc.stderr
    assert host.calls() == [] and not host.env.exists()  # a dry run changes nothing
    printed = proc.stdout.strip().splitlines()
    assert printed[0] == f"+ {host.python} -m venv --system-site-packages {host.env}"
    assert any(f"-m pip install -c {host.constraints}" in line for line in printed)
    assert printed[-1] == str(host.env / "bin" / "python")


def test_a_bundle_for_another_python_is_refused_when_named_and_skipped_when_found(tmp_path, monkeypatch,
                                                                                   capsys) -> None:
    host = Host(tmp_path, version="3.11.7", tag="cp311")
    last = one_failure(host.run(VSL_BUNDLE=str(bundle(tmp_path / "whl", WHEELS))))
    assert "built for cp312, this python is cp311" in last and "VSL_BUNDLE=none" in last

    repo = tmp_path / "repo"
    bundle(repo / ".whl", WHEELS)
    found = gpu_env.find_bundle(None, repo=repo, device_dir=tmp_path / "nowhere")
    assert found is not None and found.origin == "found" and [d.name for d in found.dirs] == ["b0", "b1"]
    assert gpu_env.bundle_python_tags(found) == {"cp312"}  # abi3 / py3 wheels fit any python

    # found in the checkout's .whl/ but for cp312: said, and the index is used instead (in-process: the checkout
    # is swapped for a temporary one)
    monkeypatch.setattr(gpu_env, "REPO", repo)
    monkeypatch.setattr(gpu_env, "DEVICE_BUNDLE", tmp_path / "nowhere")
    monkeypatch.delenv("VSL_BUNDLE", raising=False)
    monkeypatch.setenv("FAKE_PROBE", json.dumps(host.probe))
    code = gpu_env.main(["--skip-gpu-check", "--dry-run", "--base-python", str(host.python), "--env", str(host.env),
                         "--constraints", str(host.constraints)])
    out, err = capsys.readouterr()
    assert code == 0 and f"found an offline bundle in {repo / '.whl' / 'b0'}" in err and "cp311" in err
    assert "source: the package index" in err and "install.sh" not in out


def test_bundle_choice(tmp_path: Path) -> None:
    assert gpu_env.find_bundle("none", repo=tmp_path, device_dir=tmp_path) is None
    assert gpu_env.find_bundle(None, repo=tmp_path, device_dir=tmp_path / "x") is None  # nothing: the index
    device = tmp_path / "whl"
    device.mkdir()
    (device / "SHA256SUMS").write_text("")
    assert gpu_env.find_bundle(None, repo=tmp_path, device_dir=device).dirs == [device]  # docs' /tmp/whl
    with pytest.raises(gpu_env.SetupError, match="has no SHA256SUMS"):
        gpu_env.find_bundle(str(tmp_path / "empty"), repo=tmp_path)
    parts = tmp_path / "r" / ".whl" / "parts"  # build.py's output wins over batches made from it
    bundle(tmp_path / "r" / ".whl", WHEELS)
    parts.mkdir()
    (parts / "SHA256SUMS").write_text("")
    assert gpu_env.find_bundle(None, repo=tmp_path / "r", device_dir=device).dirs == [parts]


def test_uses_this_python_when_it_has_the_tested_set(tmp_path: Path, monkeypatch) -> None:
    constraints = tmp_path / "c.txt"
    constraints.write_text(f"pytest=={md.version('pytest')}\n")
    monkeypatch.setattr(preflight, "MODULES", {})
    args = argparse.Namespace(
        constraints=str(constraints), megatron=False, skip_gpu_check=True, gpus=1, env=str(tmp_path / "env"),
        base_python="/nonexistent", bundle="none", rebuild=False, dry_run=False)
    assert gpu_env.setup(args) == sys.executable
    assert not (tmp_path / "env").exists()


def test_megatron_says_its_stack_is_not_in_the_set(tmp_path: Path) -> None:
    host = Host(tmp_path)
    proc = host.run("--bundle", "none", "--dry-run", "--megatron")
    assert proc.returncode == 0
    assert "Megatron stack (megatron-core, megatron-bridge, transformer-engine) is not in the tested set" in proc.stderr
    assert "docs/megatron_gpu.md" in proc.stderr


def test_standalone_set_up_checks_the_gpu_first_and_builds_nothing(tmp_path: Path) -> None:
    host = Host(tmp_path)
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}  # no nvidia-smi here
    proc = subprocess.run([sys.executable, "-m", "verl_sglang_lora.tools.gpu_env", "--env", str(host.env)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nothing was built: no usable CUDA GPU" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not host.env.exists()


# ---------------------------------------------------------------- the preflight's parts

def test_package_check_names_every_pin_off_the_tested_set(tmp_path: Path, monkeypatch) -> None:
    constraints = tmp_path / "c.txt"
    constraints.write_text(f"pytest=={md.version('pytest')}\nnot-a-real-package==1.0  # --no-deps\npytest==0.1\n")
    assert [p.no_deps for p in preflight.tested_set(constraints)] == [False, True, False]
    monkeypatch.setattr(preflight, "MODULES", {})
    (problem,) = preflight.package_problems(constraints)
    assert "not-a-real-package missing (tested 1.0)" in problem
    assert f"pytest {md.version('pytest')} (tested 0.1)" in problem
    assert f"pytest {md.version('pytest')} (tested {md.version('pytest')})" not in problem
    assert "Fix: pip install '.[gpu]' -c" in problem


def test_megatron_check_names_the_stack_and_the_attention_backend(tmp_path: Path) -> None:
    """This CPU venv has no Megatron stack: the example's last check stops with what to install, not silently."""
    if importlib.util.find_spec("megatron") is not None or importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("this host has (part of) the Megatron stack")
    flash = preflight.megatron_problems("flash")
    assert len(flash) == 2 and "megatron-bridge" in flash[0] and "docs/megatron_gpu.md" in flash[0]
    assert "not part of the tested set" in flash[0] and "ATTN_BACKEND=unfused" in flash[1]
    assert len(preflight.megatron_problems("unfused")) == 1
    proc = subprocess.run([sys.executable, "-m", "verl_sglang_lora.tools.preflight", "--packages-only", "--megatron",
                           "--attn-backend", "unfused"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the Megatron stack is not installed" in proc.stderr


def test_a_hung_driver_is_reported_not_waited_for(tmp_path: Path, monkeypatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/usr/bin/env bash\nsleep 30\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(preflight, "NVIDIA_SMI_TIMEOUT_S", 0.5)
    t0 = time.monotonic()
    problem = preflight.driver_problem(1)
    assert problem is not None and "did not answer within" in problem and time.monotonic() - t0 < 5


def tiny_wheel(where: Path, dist: str, version: str, module: str, extra: dict[str, str] | None = None) -> Path:
    """A pure-Python wheel with one empty module (plus ``extra`` files), enough for pip to install and
    importlib.metadata to find."""
    import zipfile

    info = f"{dist}-{version}.dist-info"
    files = {f"{module}/__init__.py": "", **(extra or {}),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    path = where / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def tiny_bundle(tmp_path: Path, extra_pins: str = "") -> tuple[Path, Path]:
    """An offline bundle of tiny wheels named as the run's packages (with SHA256SUMS), and constraints pinning them."""
    pins = {"verl": ("0.9.1", "verl"), "sglang": ("0.5.12", "sglang"), "ray": ("2.60.0", "ray"),
            "transferqueue": ("0.1.11", "transfer_queue")}
    whl = tmp_path / "whl"
    whl.mkdir()
    # like nvidia-cutlass-dsl (SGLang 0.5.23): its modules are found only through the .pth file it installs
    pth = {"ray": {"ray_dsl.pth": "ray_dsl/packages\n", "ray_dsl/packages/ray_dsl_module.py": ""}}
    sums = [f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}"
            for w in (tiny_wheel(whl, d, v, m, pth.get(d)) for d, (v, m) in pins.items())]
    (whl / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    constraints = tmp_path / "c.txt"
    constraints.write_text(extra_pins + "".join(f"{d}=={v}{'  # --no-deps' if d == 'sglang' else ''}\n"
                                                for d, (v, _) in pins.items()))
    return whl, constraints


def test_a_real_bundle_install_is_seen_first_by_the_env_and_passes_its_check(tmp_path: Path) -> None:
    """The real path end to end, with tiny wheels named as the run's packages: venv from this interpreter, the
    host's pip through install.sh, the .pth, then the env's own package check against the pins."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    if subprocess.run([str(base), "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip(f"{base} has no pip")
    whl, constraints = tiny_bundle(tmp_path)
    env = tmp_path / "gpu-env"
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("VSL_")}
    run_env.update(PYTHONPATH=str(ROOT), VSL_BUNDLE=str(whl))
    cmd = [sys.executable, "-m", "verl_sglang_lora.tools.gpu_env", "--skip-gpu-check", "--base-python", str(base),
           "--env", str(env), "--constraints", str(constraints)]
    proc = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    env_python = proc.stdout.strip()
    assert env_python == str(env / "bin" / "python")
    where = subprocess.run([env_python, "-c", "import verl, transfer_queue, ray_dsl_module; print(verl.__file__)"],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert where.stdout.startswith(str(env / gpu_env.BUNDLE_SITE)), where.stderr  # the bundle's .pth files ran too
    again = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "reusing" in again.stderr


def test_a_python_that_is_a_venv_layers_the_env_over_it_so_its_torch_is_seen(tmp_path: Path) -> None:
    """The H200 host's ``python3`` is a venv holding the CUDA torch (/opt/torch/.venv), its interpreter has none. The
    env is made from the interpreter, the venv's site-packages stay visible behind the bundle (a .pth file), torch
    is decided on the venv's, and the stamp names the venv. Real run: this suite's venv plays the host's."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the suite does not run in a venv here")
    torch_version = md.version("torch")
    base = Path(getattr(sys, "_base_executable", sys.executable))
    if subprocess.run([str(base), "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip(f"{base} has no pip")
    whl, constraints = tiny_bundle(tmp_path, extra_pins=f"torch=={torch_version.split('+')[0]}\n")
    env = tmp_path / "gpu-env"
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("VSL_")}
    run_env.update(PYTHONPATH=str(ROOT), VSL_BUNDLE=str(whl))
    cmd = [sys.executable, "-m", "verl_sglang_lora.tools.gpu_env", "--skip-gpu-check", "--base-python",
           sys.executable, "--env", str(env), "--constraints", str(constraints)]
    proc = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert f"{sys.executable} is a venv" in proc.stderr and f"seen through {sys.executable}" in proc.stderr
    env_python = proc.stdout.strip()
    where = subprocess.run([env_python, "-c", "import torch, verl; print(torch.__file__); print(verl.__file__)"],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    torch_file, verl_file = where.stdout.split()
    assert torch_file.startswith(sys.prefix)  # the venv's torch, through the .pth
    assert verl_file.startswith(str(env / gpu_env.BUNDLE_SITE))  # the bundle ahead of the venv's own verl
    assert json.loads((env / gpu_env.STAMP).read_text())["parent_venv"] == sys.prefix  # however python is spelled
    # the venv's own .pth files run in the env too (addsitedir, not a bare path): this suite's venv has one
    parent_pth = Path(sysconfig.get_paths()["purelib"]) / "_vsl_cpu_shim.pth"
    if parent_pth.exists():
        ran = subprocess.run([env_python, "-c", "import sys; print('_vsl_cpu_shim' in sys.modules)"],
                             capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
        assert ran.stdout.strip() == "True", ran.stderr
    again = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "reusing" in again.stderr, again.stderr
