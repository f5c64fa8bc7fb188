"""The weight-update session helpers (``sglang_contract/update_session.py``) against each SGLang release's own code.

Each release runs in its own interpreter with ``.cache/sglang/V`` first on PYTHONPATH (scripts/sglang_release.sh),
all started at once. The requests are the release's own structs; SGLang's answers come from the release's own
scheduler-side handlers (``compat_probe.ReleaseWeightUpdater``: its session check and update check; the model runner
behind them is a recorder, it needs CUDA). A refusal SGLang cannot be made to give twice in a row (a begin refused
again after the close) is a recorder's, on the same structs: that is the retry logic only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_sglang_lora.releases import SGLANG_RELEASES
from tests.conftest import per_release_fixture, release_result

ROOT = Path(__file__).resolve().parents[1]
BEGIN, UPDATE, END = "begin_weight_update", "update_weights_from_tensor", "end_weight_update"
SESSION = {"0.5.8": False, "0.5.12": False, "0.5.18": False, "0.5.23": True}  # docs/compatibility.md

_SCRIPT = r"""
import asyncio, json, sys
sys.path.append(sys.argv[1])
from verl_sglang_lora.tools.compat_probe import ReleaseWeightUpdater
from verl_sglang_lora.sglang_contract.installed import weight_update_session
from verl_sglang_lora.sglang_contract.update_session import HeldSession, begin_request, end_request, update_session
from verl_sglang_lora.runtime.resident.requests import update_request
from verl_sglang_lora.runtime.resident.requests import detach_request

UPDATE = "update_weights_from_tensor"
out = {"weight_update_session": weight_update_session()}


class Sglang:
    # the release's handlers behind the call the plugin makes; records each request by method and struct
    def __init__(self, refuse_updates=False):
        self.release = ReleaseWeightUpdater()
        self.release.refuse_updates = refuse_updates
        self.sent = []

    async def __call__(self, method, request):
        self.sent.append(method)
        return await self.release.call(method, request)

    def state(self):
        return {"sent": self.sent, "open": self.release.session_open(), "runner": self.release.runner_calls}


def update():
    return update_request(detach_request("verl_lora_slot0"), "pkg.loader")


def run(coro):
    try:
        asyncio.run(coro)
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]


async def body(call, fail):
    async with update_session(call) as opened:  # the release's own answer: a session or none
        await call(UPDATE, update())
        if fail:
            raise ValueError("the body failed")


for name, fail in (("ok", False), ("body_failed", True)):
    call = Sglang()
    error = run(body(call, fail))
    out[name] = {**call.state(), "error": error}

if weight_update_session():  # a session left open in SGLang (its end was lost): SGLang refuses the next begin
    call = Sglang()
    asyncio.run(call.release.call("begin_weight_update", begin_request()))
    error = run(body(call, False))
    out["left_open"] = {**call.state(), "error": error}

# one session held across writes, closed on demand; a relaunched server holds none
call, held = Sglang(), HeldSession()
steps = {}
async def held_writes(n):
    for _ in range(n):
        await held.run(call, UPDATE, update())
asyncio.run(held_writes(3))
steps["three_writes"] = {"sent": list(call.sent), "open": call.release.session_open(), "held": held.is_open}
asyncio.run(held.close(call))
asyncio.run(held.close(call))  # closing a closed session sends nothing
steps["closed_twice"] = {"sent": list(call.sent), "open": call.release.session_open(), "held": held.is_open}
asyncio.run(held_writes(1))
steps["next_write"] = {"sent": list(call.sent), "open": call.release.session_open(), "held": held.is_open}
held.forget()  # the server was relaunched: the new SGLang holds no session, nothing is closed
call = Sglang()
asyncio.run(held_writes(1))
steps["relaunched"] = {"sent": list(call.sent), "open": call.release.session_open(), "held": held.is_open}
out["held"] = steps

call, held = Sglang(refuse_updates=True), HeldSession()
out["held_refused"] = {**call.state(), "error": run(held.run(call, UPDATE, update())), "held": held.is_open}

call, held = Sglang(), HeldSession(False)  # an update outside any session: SGLang's update check
out["outside_session"] = {**call.state(), "error": run(held.run(call, UPDATE, update()))}

if weight_update_session():
    class Recorder:  # refusals the release cannot give on demand, on the release's own structs (retry logic)
        def __init__(self, refuse):
            self.sent, self.refuse = [], set(refuse)
        async def __call__(self, method, request):
            self.sent.append(f"{method}:{type(request).__name__}")
            if method in self.refuse:
                raise RuntimeError(f"{method} refused")
            return True, "Success"

    every_begin = Recorder({"begin_weight_update"})
    out["every_begin_refused"] = {"sent": every_begin.sent, "error": run(body(every_begin, False))}
    no_end, held = Recorder({"end_weight_update"}), HeldSession()
    asyncio.run(held.run(no_end, UPDATE, update()))
    out["end_refused"] = {"sent": no_end.sent, "error": run(held.close(no_end)), "held": held.is_open}
    out["structs"] = {"begin": type(begin_request()).__name__, "selector": begin_request().selector,
                      "all": begin_request("all").selector, "end": type(end_request()).__name__}
print(json.dumps(out))
"""


runs = per_release_fixture(SGLANG_RELEASES, ["-c", _SCRIPT, str(ROOT)])


def _result(runs: dict, version: str) -> dict:
    return release_result(runs, version)


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_update_session_closes_what_it_opened_whatever_happens(runs, version):
    out = _result(runs, version)
    assert out["weight_update_session"] is SESSION[version]
    if not SESSION[version]:  # nothing to open: the update alone, which the release takes outside any session
        assert out["ok"] == {"sent": [UPDATE], "open": None, "runner": ["update"], "error": None}
        assert out["body_failed"]["sent"] == [UPDATE] and "the body failed" in out["body_failed"]["error"]
        return
    assert out["ok"] == {"sent": [BEGIN, UPDATE, END], "open": False,
                         "runner": ["begin", "update", "end:post_load=False"], "error": None}
    assert out["body_failed"]["sent"] == [BEGIN, UPDATE, END] and out["body_failed"]["open"] is False
    assert "the body failed" in out["body_failed"]["error"]
    # SGLang still held a session (a lost end): its refused begin makes the plugin end that one and begin again
    assert out["left_open"] == {"sent": [BEGIN, END, BEGIN, UPDATE, END], "open": False, "error": None,
                                "runner": ["begin", "end:post_load=True", "begin", "update", "end:post_load=False"]}
    # a begin refused again after the close: the close is sent once more and the refusal raised
    begin, end = f"{BEGIN}:BeginWeightUpdateReqInput", f"{END}:EndWeightUpdateReqInput"
    assert out["every_begin_refused"]["sent"] == [begin, end, begin, end]
    assert "begin_weight_update refused" in out["every_begin_refused"]["error"]
    assert out["structs"] == {"begin": "BeginWeightUpdateReqInput", "selector": "target", "all": "all",
                              "end": "EndWeightUpdateReqInput"}


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_held_session_opens_once_and_closes_on_demand_or_failure(runs, version):
    out = _result(runs, version)
    held = out["held"]
    if not SESSION[version]:  # the release has no session: only the updates are sent, nothing is held
        assert held["three_writes"] == {"sent": [UPDATE] * 3, "open": None, "held": False}
        assert held["closed_twice"]["sent"] == [UPDATE] * 3 and held["next_write"]["sent"] == [UPDATE] * 4
        assert held["relaunched"]["sent"] == [UPDATE]
        assert out["held_refused"]["sent"] == [UPDATE] and "the runner refused" in out["held_refused"]["error"]
        return
    assert held["three_writes"] == {"sent": [BEGIN, UPDATE, UPDATE, UPDATE], "open": True, "held": True}
    assert held["closed_twice"] == {"sent": [BEGIN, UPDATE, UPDATE, UPDATE, END], "open": False, "held": False}
    assert held["next_write"] == {"sent": [BEGIN, UPDATE, UPDATE, UPDATE, END, BEGIN, UPDATE], "open": True,
                                  "held": True}
    assert held["relaunched"] == {"sent": [BEGIN, UPDATE], "open": True, "held": True}
    # a refused write closes the session in SGLang too
    refused = out["held_refused"]
    assert refused["sent"] == [BEGIN, UPDATE, END] and refused["open"] is False and refused["held"] is False
    assert "the runner refused the update" in refused["error"]
    # a refused close is loud
    assert out["end_refused"]["held"] is False and "end_weight_update refused" in out["end_refused"]["error"]


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_an_update_outside_a_session_is_refused_exactly_where_the_release_has_sessions(runs, version):
    """``weight_update_session()`` against the release's own update check: where it says no session is needed, the
    release takes an update sent outside one; where it says one is needed, the release refuses that update."""
    out = _result(runs, version)["outside_session"]
    assert out["sent"] == [UPDATE]
    if SESSION[version]:
        assert "must run between begin_weight_update() and end_weight_update()" in out["error"]
        assert out["runner"] == []
    else:
        assert out["error"] is None and out["runner"] == ["update"]
