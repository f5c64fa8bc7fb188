"""The offline assets (tiny Qwen3 + synthetic GSM8K) load with the real libraries."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numpy")
pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

from verl_sglang_lora.tools import offline_assets as oa  # noqa: E402


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    out = tmp_path_factory.mktemp("assets")
    manifest = oa.write_offline_assets(str(out), seed=0, n_train=32, n_test=8)
    return out, manifest


def test_layout_and_size(assets):
    out, manifest = assets
    model = out / "model"
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (model / name).is_file(), name
    cfg = json.loads((model / "config.json").read_text())
    assert cfg["model_type"] == "qwen3"
    assert cfg["tie_word_embeddings"] is False
    assert cfg["num_key_value_heads"] == 2 and cfg["head_dim"] == 64
    total = sum(v["bytes"] for v in manifest["files"].values())
    assert total < 30 * 2**20
    assert (out / "testset" / "train.parquet").is_file()
    assert (out / "manifest.json").is_file()


def test_deterministic(assets, tmp_path):
    _, manifest = assets
    again = oa.write_offline_assets(str(tmp_path), seed=0, n_train=32, n_test=8)
    assert again["files"] == manifest["files"]
    other = oa.write_offline_assets(str(tmp_path / "s1"), seed=1, n_train=32, n_test=8)
    key = "model/model.safetensors"
    assert other["files"][key]["sha256"] != manifest["files"][key]["sha256"]


def test_safetensors_header(assets):
    safetensors = pytest.importorskip("safetensors")
    from safetensors import safe_open

    out, _ = assets
    path = str(out / "model" / "model.safetensors")
    # framework="numpy" cannot hold bf16; read the header through the "pt" path only if torch exists.
    torch = pytest.importorskip("torch")
    with safe_open(path, framework="pt") as f:
        keys = set(f.keys())
        emb = f.get_tensor("model.embed_tokens.weight")
        norm = f.get_tensor("model.norm.weight")
    assert safetensors is not None
    assert emb.dtype == torch.bfloat16
    assert torch.all(norm == 4)  # TinyQwen3Spec.final_norm_weight
    assert 0.015 < emb.float().std().item() < 0.025
    assert "lm_head.weight" in keys and len(keys) == 2 + 1 + 4 * 11


def test_transformers_loads_and_runs(assets):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out, _ = assets
    path = str(out / "model")

    tok = transformers.AutoTokenizer.from_pretrained(path)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id != tok.pad_token_id
    msgs = [{"role": "user", "content": "Natalia has 48 apples and buys 24 more. How many? #### 72"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text  # byte-level BPE round-trips
    assert tok.unk_token_id is None

    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.vocab_size == len(tok)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok))
    assert torch.isfinite(logits.float()).all()


def test_parquet_in_verl_format(assets):
    pd = pytest.importorskip("pandas")
    _, manifest = assets
    train = pd.read_parquet(manifest["train_files"])
    test = pd.read_parquet(manifest["val_files"])
    assert len(train) == 32 and len(test) == 8
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = train.iloc[0]
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert row["prompt"][0]["role"] == "user" and "####" in row["prompt"][0]["content"]
    assert row["reward_model"]["style"] == "rule"
    for _, r in train.iterrows():
        assert r["extra_info"]["answer"].endswith("#### " + r["reward_model"]["ground_truth"])
    assert set(test["extra_info"].map(lambda e: e["split"])) == {"test"}
    assert not set(train["extra_info"].map(lambda e: e["question"])) <= set(
        test["extra_info"].map(lambda e: e["question"])
    )


def test_verl_gsm8k_scorer(assets):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("verl")
    from verl.utils.reward_score import default_compute_score

    _, manifest = assets
    row = pd.read_parquet(manifest["train_files"]).iloc[3]
    gt = row["reward_model"]["ground_truth"]
    good = row["extra_info"]["answer"]
    assert default_compute_score(row["data_source"], good, gt) == 1.0
    assert default_compute_score(row["data_source"], good.replace("#### ", "#### 9"), gt) == 0.0
    assert default_compute_score(row["data_source"], "no answer here", gt) == 0.0


def test_cli(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-m", "verl_sglang_lora.tools.offline_assets", "--out", str(tmp_path), "--n-train", "4",
         "--n-test", "2"],
        capture_output=True, text=True, env=env, check=True,
    )
    assert "MODEL_PATH=" in res.stdout
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert (tmp_path / "testset" / "test.parquet").is_file()


def test_the_output_layer_lets_an_adapter_put_the_probability_on_digits(assets):
    """The offline task is learnable only if some last hidden state makes digits likely: after the final RMSNorm
    the hidden state has norm ``final_norm_weight * sqrt(hidden)``; pointed along the digits' lm_head rows it must
    give them most of the probability. With a final norm weight of 1 the best such state gives them under 10%."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    out, _ = assets
    sd = load_file(str(out / "model" / "model.safetensors"))
    tok = Tokenizer.from_file(str(out / "model" / "tokenizer.json"))
    head = sd["lm_head.weight"].float()
    digits = [tok.token_to_id(str(d)) for d in range(10)]
    direction = head[digits].sum(0)
    direction = direction / direction.norm()
    weight = float(sd["model.norm.weight"].float()[0])
    mass = {w: float(torch.softmax(head @ (w * head.shape[1] ** 0.5 * direction), 0)[digits].sum()) for w in (1.0, weight)}
    assert weight == oa.TinyQwen3Spec().final_norm_weight
    assert mass[weight] > 0.9 and mass[1.0] < 0.1, mass
