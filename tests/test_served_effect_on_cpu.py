"""The served-effect check: the policy SGLang served is the trained one, measured from the log-probs verl already
has on every step, on real verl ``DataProto`` batches.

The log-probs are synthetic but carry bf16's numerics: the trainer's ``old`` and ``ref`` and the rollout's log-probs
are each rounded through bfloat16, the rollout's on another path (a jitter of one bf16 ulp of the log-prob, as a
second engine's different kernels give), so the rollout-vs-trainer gap is bf16-sized. The adapter's per-token effect
is the sum of two halves (as if from two halves of the layers, correlated as effects of one trained adapter are).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from verl import DataProto  # noqa: E402

from verl_sglang_lora.runtime.settings import PluginSettings  # noqa: E402
from verl_sglang_lora.runtime.sync import served_effect as se  # noqa: E402
from verl_sglang_lora.verl_glue import trainer_metrics  # noqa: E402
from tests.conftest import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIN_SNR = PluginSettings().served_effect_min_snr


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.bfloat16().float()


def synth(served: str, seed: int = 0, b: int = 32, t: int = 96, effect: float = 0.1) -> dict[str, torch.Tensor]:
    """Log-probs of one step; ``served`` says what SGLang applied instead of (or as) the trained adapter."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(t // 3, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).long()
    base = -torch.rand(b, t, generator=g).pow(2) * 4  # the base model's log-probs of the sampled tokens
    shared = torch.randn(b, t, generator=g)
    half_a = effect * (0.7 * shared + 0.7 * torch.randn(b, t, generator=g))  # layers 0..L/2 of the adapter
    half_b = effect * (0.7 * shared + 0.7 * torch.randn(b, t, generator=g))  # layers L/2..L
    trained = half_a + half_b
    unrelated = effect * 1.4 * torch.randn(b, t, generator=g)  # another adapter of the same size, pointing elsewhere
    served_effect = {"trained": trained, "quarter": 0.25 * trained, "half": 0.5 * trained, "base": 0 * trained,
                     "negated": -trained, "half_loaded": half_a, "unrelated": unrelated,
                     "trained_plus_unrelated": trained + unrelated, "zero_b": 0 * trained}[served]
    if served == "zero_b":  # step 1: lora_B is zero, the trainer's adapter changes nothing either
        trained = torch.zeros_like(trained)
    jitter = base.abs() * 2.0 ** -8 * torch.randn(b, t, generator=g)
    return {
        se.REF: _bf16(base),
        se.OLD: _bf16(base + trained),
        se.ROLLOUT: _bf16(base + served_effect + jitter) * mask,
        se.MASK: mask,
    }


def judged(served: str, seed: int = 0, **kw: object) -> se.ServedEffect:
    """The verdict on ``served`` in a run whose first step (LoRA B zero) measured the noise floor."""
    check = se.ServedEffectCheck(MIN_SNR)
    assert check.step(synth("zero_b", seed=1000 + seed, **kw)).verdict == "inconclusive"
    assert check.floor is not None and check.floor > 0
    return check.step(synth(served, seed=seed, **kw))


def data_proto(tensors: dict[str, torch.Tensor], drop: tuple[str, ...] = ()) -> DataProto:
    """A batch as verl's trainer hands it to ``compute_data_metrics``: its own fields plus the log-probs."""
    b, r = tensors[se.MASK].shape
    p = 4
    full = {
        "token_level_scores": torch.ones(b, r), "token_level_rewards": torch.ones(b, r),
        "advantages": torch.zeros(b, r), "returns": torch.zeros(b, r),
        "prompts": torch.ones(b, p, dtype=torch.long), "responses": torch.ones(b, r, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(b, p, dtype=torch.long), tensors[se.MASK]], dim=1),
        **tensors,
    }
    return DataProto.from_dict(tensors={k: v for k, v in full.items() if k not in drop})


def run_config(**settings: object):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "trainer": {"use_v1": False},
        "actor_rollout_ref": {"rollout": {"name": "sglang_lora", "calculate_log_probs": True,
                                          "engine_kwargs": {"sglang_lora": dict(settings)}},
                              "actor": {"use_kl_loss": True}},
    })


@pytest.fixture(autouse=True)
def _fresh_state():
    trainer_metrics._warned.clear()
    trainer_metrics._check = trainer_metrics._CheckState()
    yield


# -- the math -------------------------------------------------------------------------------------------------------

def test_trained_adapter_served_passes() -> None:
    result = judged("trained")
    assert result.verdict == "pass", result.summary()
    assert result.error <= result.bound < 0.2 and abs(result.ratio - 1) < 0.05
    assert 0 < result.noise_rms < 0.2 * result.expected_rms  # a bf16-sized rollout-vs-trainer gap
    assert result.tokens == int(synth("trained")[se.MASK].sum())


def test_no_false_alarm_over_many_steps_near_the_noise() -> None:
    """The trained adapter served, its effect from below to a few times the noise floor: never a fail."""
    verdicts = [judged("trained", seed=s, effect=e).verdict for s in range(40) for e in (0.01, 0.05, 0.1)]
    assert "fail" not in verdicts
    assert verdicts.count("pass") >= 40  # the largest effect is conclusive


@pytest.mark.parametrize("served", ["base", "half", "quarter", "negated", "unrelated", "trained_plus_unrelated",
                                    "half_loaded"])
def test_a_wrong_adapter_fails(served: str) -> None:
    """Every adapter that is not the trained one fails, including those pointing away from the trained effect (an
    unrelated adapter of the same size, the trained one plus as much again of something else)."""
    for seed in range(5):
        result = judged(served, seed=seed)
        assert result.verdict == "fail", (served, result.summary())
        message = result.failure_message()
        assert f"relative error {result.error:.3g} (pass <= {result.bound:.3g})" in message
        assert "rsLoRA" in message and "partly loaded" in message


def test_the_slope_names_the_likely_cause() -> None:
    assert "base model" in judged("base").failure_message()
    assert "sign flipped" in judged("negated").failure_message()
    assert abs(judged("quarter").ratio - 0.25) < 0.05


def test_an_unrelated_adapter_is_not_called_inconclusive() -> None:
    """The verdict's effect-to-noise comes from the trained effect and the measured floor alone: a served adapter
    that disagrees with the trained one cannot push a step into inconclusive."""
    right, wrong = judged("trained"), judged("unrelated")
    assert right.snr == pytest.approx(wrong.snr) and right.snr >= MIN_SNR
    assert wrong.verdict == "fail"


def test_zero_effect_is_inconclusive_and_measures_the_floor() -> None:
    check = se.ServedEffectCheck(MIN_SNR)
    first = check.step(synth("zero_b"))
    assert first.verdict == "inconclusive" and "lora_B is zero" in first.reason and check.floor > 0
    tiny = check.step(synth("quarter", effect=1e-4))  # an effect far below the noise floor, even if wrong
    assert tiny.verdict == "inconclusive" and tiny.snr < MIN_SNR and "not above the noise" in tiny.reason


def test_without_a_floor_it_says_which_setting_gives_one() -> None:
    result = se.ServedEffectCheck(MIN_SNR).step(synth("base"))  # a resumed run: no zero-effect step
    assert result.verdict == "inconclusive" and "served_effect_noise_floor" in result.reason
    floor = judged("trained").noise_floor
    assert se.ServedEffectCheck(MIN_SNR, noise_floor=floor).step(synth("base")).verdict == "fail"


def test_inconclusive_after_conclusive_steps_is_an_error() -> None:
    check = se.ServedEffectCheck(MIN_SNR)
    check.step(synth("zero_b", seed=9))
    assert check.step(synth("trained")).verdict == "pass"
    for s in range(3):
        assert not check.stuck
        assert check.step(synth("trained", seed=s, effect=1e-4)).verdict == "inconclusive"
    assert check.stuck


def test_bypass_mode_is_inconclusive() -> None:
    tensors = synth("quarter")
    tensors[se.OLD] = tensors[se.ROLLOUT]  # algorithm.rollout_correction.bypass_mode=True copies them
    result = se.served_effect(*(tensors[k] for k in se.REQUIRED), 1e-4, MIN_SNR)
    assert result.verdict == "inconclusive" and "bypass_mode" in result.reason


def test_false_fail_rate_under_heavy_tailed_noise() -> None:
    """scripts/served_effect_sim.py at the example's batch (8 prompts x 4 samples, 64 tokens) and at 8 x 256: the
    trained adapter fails on no step of 2,000 at an effect-to-noise just above the decision threshold, and no wrong
    adapter passes there (the record of the full run: docs/results/served_effect_sim.json)."""
    sim = load_script(ROOT / "scripts" / "served_effect_sim.py", "served_effect_sim")
    for b, t in ((32, 64), (8, 256)):
        rows = sim.simulate(2000 if b == 32 else 1000, b, t, seed=1, arms=("trained",), levels=(12.0,))
        assert rows[0]["fails"] == 0 and rows[0]["passes"] > 0.9 * rows[0]["steps"], rows
    wrong = sim.simulate(200, 8, 256, seed=2, arms=sim.ARMS[1:], levels=(12.0,))
    assert all(r["passes"] == 0 for r in wrong), wrong


def test_metrics_are_the_documented_keys() -> None:
    metrics = judged("trained").metrics()
    assert set(metrics) == {"sglang_lora/served_effect_error", "sglang_lora/served_effect_bound",
                            "sglang_lora/served_effect_snr", "sglang_lora/served_effect_ratio",
                            "sglang_lora/served_noise_floor_rms", "sglang_lora/expected_effect_rms",
                            "sglang_lora/served_noise_rms", "sglang_lora/served_effect_verdict"}
    assert metrics["sglang_lora/served_effect_verdict"] == 1.0
    assert judged("base").metrics()["sglang_lora/served_effect_verdict"] == -1.0


# -- the glue: settings, modes, missing keys ------------------------------------------------------------------------

def test_fail_stops_the_run_by_default_and_warn_mode_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    batch = data_proto(synth("quarter"))
    floor = data_proto(synth("zero_b", seed=7))
    assert trainer_metrics.served_effect_metrics(floor, run_config(), False)["sglang_lora/served_effect_verdict"] == 0
    with pytest.raises(se.ServedEffectMismatch, match=r"relative error 0\.\d+ \(pass <= 0\.\d+\), slope k=0\.2"):
        trainer_metrics.served_effect_metrics(batch, run_config(), plugin_servers=False)
    with caplog.at_level(logging.ERROR):
        out = trainer_metrics.served_effect_metrics(batch, run_config(served_effect_check="warn"), False)
    assert out["sglang_lora/served_effect_verdict"] == -1.0
    assert any("not the trained one" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert trainer_metrics.served_effect_metrics(batch, run_config(served_effect_check="off"), False) == {}


def test_inconclusive_does_not_stop_the_run(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        out = trainer_metrics.served_effect_metrics(data_proto(synth("zero_b")), run_config(), False)
        trainer_metrics.served_effect_metrics(data_proto(synth("zero_b", seed=1)), run_config(), False)
    assert out["sglang_lora/served_effect_verdict"] == 0.0
    assert sum("inconclusive" in r.getMessage() for r in caplog.records) == 1  # said when it starts, not every step


@pytest.mark.parametrize("drop, named", [
    ((se.ROLLOUT,), "actor_rollout_ref.rollout.calculate_log_probs=True"),
    ((se.REF,), "actor_rollout_ref.actor.use_kl_loss=True"),
    ((se.ROLLOUT, se.REF), "algorithm.use_kl_in_reward=True"),
])
def test_missing_keys_are_said_once_naming_the_settings(drop, named, caplog: pytest.LogCaptureFixture) -> None:
    batch = data_proto(synth("quarter"), drop=drop)  # a wrong adapter, but the check cannot see it
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert trainer_metrics.served_effect_metrics(batch, run_config(), plugin_servers=False) == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "served-effect check NOT RUNNING" in warnings[0] and named in warnings[0]
    assert all(key in warnings[0] for key in drop)


def test_another_rollout_is_left_alone() -> None:
    config = run_config()
    config.actor_rollout_ref.rollout.name = "vllm"
    assert trainer_metrics.served_effect_metrics(data_proto(synth("base")), config, plugin_servers=True) == {}
    assert trainer_metrics.served_effect_metrics(data_proto(synth("base")), None, plugin_servers=False) == {}


def test_settings() -> None:
    assert PluginSettings().served_effect_check == "on"
    raw = {"engine_kwargs": {"sglang_lora": {"served_effect_check": False, "served_effect_min_snr": 5}}}
    settings = PluginSettings.from_rollout_config(raw)  # YAML 1.1's bare `off` arrives as False
    assert settings.served_effect_check == "off" and settings.served_effect_min_snr == 5
    with pytest.raises(ValueError, match=r"served_effect_check must be on, warn or off"):
        PluginSettings.from_rollout_config({"engine_kwargs": {"sglang_lora": {"served_effect_check": "maybe"}}})
    with pytest.raises(ValueError, match=r"served_effect_min_snr must be > 0"):
        PluginSettings.from_rollout_config({"engine_kwargs": {"sglang_lora": {"served_effect_min_snr": 0}}})


def test_overlay_carries_the_settings_as_strings() -> None:
    pytest.importorskip("hydra")
    from verl_sglang_lora.tools.doctor import compose_config

    cfg = compose_config("ppo_trainer", [])
    assert PluginSettings.from_rollout_config(cfg.actor_rollout_ref.rollout).served_effect_check == "on"
    cfg = compose_config("ppo_trainer", ["actor_rollout_ref.rollout.engine_kwargs.sglang_lora.served_effect_check=off"])
    assert PluginSettings.from_rollout_config(cfg.actor_rollout_ref.rollout).served_effect_check == "off"


@pytest.mark.parametrize("script, tree", [("run_qwen3_lora_fsdp.sh", "ppo_trainer"),
                                          ("run_qwen3_lora_megatron.sh", "ppo_megatron_trainer")])
def test_examples_give_the_check_its_keys(script: str, tree: str, tmp_path: Path) -> None:
    pytest.importorskip("hydra")
    from verl.trainer.ppo.utils import need_reference_policy

    from tests.test_examples_on_cpu import example_overrides
    from verl_sglang_lora.tools.doctor import compose_config

    cfg = compose_config(tree, [a for a in example_overrides(script, tmp_path) if not a.startswith("--")])
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    assert need_reference_policy(cfg)  # ref_log_prob: with LoRA, the actor with its adapter disabled
    assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0  # ... and the loss is what it was without it


# -- through verl's own functions -----------------------------------------------------------------------------------

_TRAINERS_PROBE_HEAD = r"""
import json, logging, sys, types
import torch

class _Stub(types.ModuleType):  # TransferQueue (the v1 trainer's store) is not in the CPU venv: never called here
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})

sys.modules["transfer_queue"] = _Stub("transfer_queue")
import numpy as np
import verl  # the entry point registers the plugin and its hooks
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
from verl_sglang_lora.tools.doctor import compose_config
from verl_sglang_lora.verl_glue import trainer_metrics
sys.path.insert(0, "tests")
from test_served_effect_on_cpu import data_proto, synth

def compose(*overrides):  # the run's full config, command-line overrides included, as verl's driver composes it
    return compose_config("ppo_trainer", ["actor_rollout_ref.rollout.name=sglang_lora", *overrides])
"""

_LEGACY_PROBE = _TRAINERS_PROBE_HEAD + r"""
import verl.trainer.ppo.ray_trainer as ray_trainer
import verl.experimental.separation.ray_trainer as separation
from verl.trainer.ppo.utils import Role

out = {"seams": {c.__qualname__: [trainer_metrics.trainer_init_seam(c), hasattr(c.__init__, "__sglang_lora_wrapped__")]
                 for c in (ray_trainer.RayPPOTrainer, separation.SeparateRayPPOTrainer)}}
rows = [{"i": i} for i in range(4)]

def build(*overrides):  # verl's legacy trainer, built as main_ppo_v0's TaskRunner builds it (no workers started)
    trainer_metrics._check = trainer_metrics._CheckState()
    config = compose("trainer.use_v1=False", "algorithm.adv_estimator=grpo", "data.train_batch_size=2",
                     "data.val_batch_size=2", *overrides)
    trainer = ray_trainer.RayPPOTrainer(
        config=config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=None,
        train_dataset=rows, val_dataset=rows, collate_fn=lambda b: b,
        train_sampler=torch.utils.data.SequentialSampler(rows))
    assert trainer_metrics._check.config is trainer.config
    return trainer

def steps(trainer, served):  # each step's metrics as RayPPOTrainer.fit computes them
    result = []
    for name in served:
        try:
            metrics = ray_trainer.compute_data_metrics(batch=data_proto(synth(name)), use_critic=trainer.use_critic)
        except Exception as exc:
            result.append({"raised": type(exc).__name__, "message": str(exc)})
            continue
        result.append({k: v for k, v in metrics.items() if k.startswith("sglang_lora/") or k == "critic/score/mean"})
    return result

class Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []
    def emit(self, record):
        self.messages.append(record.getMessage())

errors = Errors()
logging.getLogger("verl_sglang_lora").addHandler(errors)
base = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora."
out["default"] = steps(build(), ("zero_b", "trained", "quarter"))
out["warn"] = steps(build(base + "served_effect_check=warn"), ("zero_b", "trained", "quarter"))
out["warn_errors"] = len(errors.messages)
out["min_snr"] = steps(build(base + "served_effect_min_snr=1000000"), ("zero_b", "trained"))
out["off"] = steps(build(base + "served_effect_check=off"), ("quarter",))
print(json.dumps(out))
"""


def _probe(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


@pytest.fixture(scope="module")
def legacy_probe() -> dict:
    pytest.importorskip("hydra")
    return _probe(_LEGACY_PROBE)["out"]


def test_through_verls_legacy_trainer(legacy_probe: dict) -> None:
    """The legacy trainer (trainer.use_v1=False): RayPPOTrainer's __init__ records the run's config, and
    compute_data_metrics, called as its fit calls it, checks with that config's settings."""
    out = legacy_probe
    assert out["seams"] == {"RayPPOTrainer": [None, True], "SeparateRayPPOTrainer": [None, True]}
    floor, trained, quarter = out["default"]
    assert floor["sglang_lora/served_effect_verdict"] == 0.0  # the first step measured the noise floor
    assert trained["sglang_lora/served_effect_verdict"] == 1.0 and "critic/score/mean" in trained
    assert trained["sglang_lora/served_effect_error"] <= trained["sglang_lora/served_effect_bound"]
    assert quarter["raised"] == "ServedEffectMismatch" and re.search(r"k=0\.2\d*, .*rsLoRA", quarter["message"])


def test_legacy_trainer_settings_come_from_its_config(legacy_probe: dict) -> None:
    """Non-default served-effect settings set in the config verl's legacy trainer is built with reach the check."""
    out = legacy_probe
    assert out["warn"][2]["sglang_lora/served_effect_verdict"] == -1.0  # warn: a fail is logged, the run goes on
    assert out["warn_errors"] == 1
    assert out["min_snr"][1]["sglang_lora/served_effect_verdict"] == 0.0  # the trained effect under 10^6 x the floor
    assert out["off"] == [{"critic/score/mean": out["off"][0]["critic/score/mean"]}]  # off: not computed


def test_a_missing_trainer_seam_is_said_and_the_defaults_apply(caplog: pytest.LogCaptureFixture) -> None:
    import types

    class Renamed:  # a trainer whose __init__ no longer takes the run's config first
        def __init__(self, cfg) -> None:
            self.config = cfg

    with caplog.at_level(logging.WARNING):
        assert trainer_metrics.wrap_trainer_init(Renamed) is Renamed
        assert trainer_metrics.wrap_trainer_init(Renamed) is Renamed
        Renamed(run_config(served_effect_check="off"))
        module = types.ModuleType("verl.experimental.separation.ray_trainer")  # the class gone from its module
        assert trainer_metrics._wrap_in(module) is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "Renamed.__init__" in warnings[0] and "does not take (self, config, ...)" in warnings[0]
    assert "verl.experimental.separation.ray_trainer.SeparateRayPPOTrainer" in warnings[1]
    assert all("!" * 100 in w and "defaults" in w for w in warnings)
    assert trainer_metrics._check.config is None and not hasattr(Renamed.__init__, "__sglang_lora_wrapped__")
    with pytest.raises(se.ServedEffectMismatch):  # the defaults (served_effect_check=on), not the config's off
        trainer_metrics.served_effect_metrics(data_proto(synth("zero_b", seed=5)), trainer_metrics._check.config, True)
        trainer_metrics.served_effect_metrics(data_proto(synth("quarter")), trainer_metrics._check.config, True)


def test_a_subclass_init_that_skips_super_records_its_config() -> None:
    """verl's one-step-off and fully-async trainers subclass a wrapped trainer with an __init__ of their own that
    never calls super().__init__: theirs is wrapped when the subclass is defined."""

    class Base:
        def __init__(self, config) -> None:
            self.config = config

    trainer_metrics.wrap_trainer_init(Base)

    class Async(Base):
        def __init__(self, config, tokenizer=None) -> None:  # no super().__init__, as verl's async trainers
            self.config = config

    class Plain(Base):  # inherits the wrapped __init__: not wrapped twice
        pass

    assert getattr(Async.__init__, "__sglang_lora_wrapped__", False) and Plain.__init__ is Base.__init__
    first, second = run_config(served_effect_check="warn"), run_config(served_effect_check="off")
    Async(first)
    assert trainer_metrics._check.config is first
    trainer_metrics._check.judge = object()  # the first run's noise floor
    Plain(second)
    assert trainer_metrics._check.config is second and trainer_metrics._check.judge is None  # no stale state


def test_no_stack_frame_reads() -> None:
    """The plugin reaches into verl through named seams only, never through its callers' stack frames."""
    pattern = re.compile(r"_getframe|f_back|f_locals|currentframe|inspect\.stack|inspect\.trace")
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "verl_sglang_lora").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


_V1_PROBE = _TRAINERS_PROBE_HEAD + r"""
import verl.trainer.ppo.v1.trainer_base as trainer_base
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

# verl 0.9.1's default trainer (trainer.use_v1=True), built as its TaskRunnerV1 builds it; no workers started
trainer = PPOTrainerSync(config=compose("trainer.use_v1=True", "algorithm.adv_estimator=grpo"))
assert trainer_metrics._check.config is trainer.config

def compute_advantage(data):  # the two calls of verl's v1 step (_compute_advantage, then the step's metrics)
    n = len(data)
    data.non_tensor_batch["uid"] = np.array([f"u{i // 4}" for i in range(n)], dtype=object)
    keys = [f"u{i // 4}_0_{i}" for i in range(n)]
    return trainer_base.compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator=AdvantageEstimator.GRPO, num_repeat=4)

def compute_metrics(batch):
    return trainer_base.compute_data_metrics(batch=batch, use_critic=trainer.use_critic)

out = {}
for served in ("zero_b", "trained", "quarter"):
    tensors = synth(served)
    try:
        data = compute_advantage(data_proto(tensors, drop=("advantages", "returns")))
    except Exception as exc:
        out[served] = {"raised": type(exc).__name__, "message": str(exc)}
        continue
    # what the v1 trainer's metrics batch holds: no log-probs
    metrics = compute_metrics(data_proto(tensors, drop=("rollout_log_probs", "old_log_probs", "ref_log_prob")))
    out[served] = {k: v for k, v in metrics.items() if k.startswith("sglang_lora/") or k == "critic/score/mean"}
    out[served]["advantages"] = bool("advantages" in data.batch.keys())
print(json.dumps(out))
"""


def test_through_verls_v1_trainer_advantage_step() -> None:
    """verl 0.9.1's default trainer (trainer.use_v1=True): checked on the batch of its advantage step."""
    pytest.importorskip("ray")
    pytest.importorskip("hydra")
    probe = _probe(_V1_PROBE)
    out = probe["out"]
    trained = out["trained"]
    assert trained["advantages"] and "critic/score/mean" in trained
    assert trained["sglang_lora/served_effect_verdict"] == 1.0
    assert trained["sglang_lora/served_effect_error"] <= trained["sglang_lora/served_effect_bound"]
    assert out["zero_b"]["sglang_lora/served_effect_verdict"] == 0.0  # the first step measured the noise floor
    assert out["quarter"]["raised"] == "ServedEffectMismatch"  # before the advantage step: nothing trains on it
    assert "NOT RUNNING" not in probe["stderr"]  # the metrics batch has no log-probs: the advantage step's check stands
    assert re.search(r"relative error 0\.\d+ \(pass <= 0\.\d+\), slope k=0\.2", out["quarter"]["message"])
