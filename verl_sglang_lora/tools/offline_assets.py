"""Offline test assets: a tiny random Qwen3 checkpoint and a synthetic GSM8K set.

Everything here is generated locally and deterministically from a seed, so tests,
examples and GPU smoke runs need no model hub and no dataset download:

* ``<out>/model/`` -- a randomly initialised ``Qwen3ForCausalLM``
  (hidden 256, 4 layers, 4 query heads, 2 kv heads, head_dim 64, MLP 512, no tied
  embeddings, final norm weight 4), stored as bf16 ``model.safetensors`` with ``config.json``
  (``model_type: qwen3``) and ``generation_config.json``, plus a real byte-level
  BPE tokenizer trained with the ``tokenizers`` library on the synthetic corpus
  (``tokenizer.json`` + ``tokenizer_config.json`` with a Qwen-style chat template,
  ``<|im_end|>`` as eos and ``<|endoftext|>`` as pad). Loadable by
  ``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` and by SGLang.
* ``<out>/testset/{train,test}.parquet`` -- GSM8K-style word problems in
  verl's row format (``data_source="openai/gsm8k"``, chat ``prompt``,
  ``ability``, ``reward_model.ground_truth``, ``extra_info``), scored by verl's
  default ``verl.utils.reward_score.gsm8k`` (answer after ``####``); the examples
  train on them with ``tools/offline_reward.py`` (the learnable offline task).

The examples use it as ``MODEL_PATH=$ASSETS/model`` and ``DATA=$ASSETS/testset``. Only ``numpy``, ``tokenizers`` and ``pyarrow`` are needed:
the weights are drawn with numpy and the safetensors file is written directly, so
the bytes do not depend on the installed torch.

CLI::

    python -m verl_sglang_lora.tools.offline_assets --out .assets [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

__all__ = [
    "TinyQwen3Spec",
    "build_tokenizer",
    "gsm8k_rows",
    "write_gsm8k",
    "write_tiny_qwen3",
    "write_offline_assets",
    "CHAT_TEMPLATE",
    "GSM8K_INSTRUCTION",
]

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END, "<think>", "</think>"]

# A Qwen-style ChatML template. Extra kwargs verl passes (tools, enable_thinking, ...)
# are ignored by jinja.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Same suffix verl's examples/data_preprocess/gsm8k.py appends.
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


# --------------------------------------------------------------------------- data


_NAMES = [
    "Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark",
    "Olivia", "Liam", "Priya", "Chen", "Fatima", "Diego", "Mia", "Omar", "Sofia", "Ivan",
]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "cards", "shells"]


def _problem(rng: np.random.Generator) -> Tuple[str, str, int]:
    """One word problem: (question, worked solution ending in '#### N', N)."""
    kind = int(rng.integers(0, 6))
    name = _NAMES[int(rng.integers(0, len(_NAMES)))]
    item = _ITEMS[int(rng.integers(0, len(_ITEMS)))]
    a = int(rng.integers(2, 60))
    b = int(rng.integers(2, 30))
    c = int(rng.integers(1, 20))
    if kind == 0:
        n = a + b
        q = f"{name} has {a} {item}. {name} buys {b} more {item}. How many {item} does {name} have now?"
        s = f"{name} has {a} + {b} = <<{a}+{b}={n}>>{n} {item} now.\n#### {n}"
    elif kind == 1:
        n = a * b
        q = f"{name} reads {a} pages every day for {b} days. How many pages does {name} read in total?"
        s = f"{name} reads {a} * {b} = <<{a}*{b}={n}>>{n} pages.\n#### {n}"
    elif kind == 2:
        a = a + b
        n = a - b
        q = f"A box holds {a} {item}. {name} gives away {b} {item}. How many {item} are left in the box?"
        s = f"There are {a} - {b} = <<{a}-{b}={n}>>{n} {item} left.\n#### {n}"
    elif kind == 3:
        earned = a * b
        c = int(rng.integers(1, earned))
        n = earned - c
        q = (
            f"{name} earns ${a} per hour and works {b} hours. Then {name} spends ${c}. "
            f"How much money does {name} have left?"
        )
        s = (
            f"{name} earns {a} * {b} = <<{a}*{b}={earned}>>{earned} dollars.\n"
            f"{name} has {earned} - {c} = <<{earned}-{c}={n}>>{n} dollars left.\n#### {n}"
        )
    elif kind == 4:
        n = a
        total = a * b
        q = f"There are {total} students split equally into {b} groups. How many students are in each group?"
        s = f"Each group has {total} / {b} = <<{total}/{b}={n}>>{n} students.\n#### {n}"
    else:
        n = (a + b) * c
        q = (
            f"{name} packs {a} red {item} and {b} blue {item} into each bag. {name} fills {c} bags. "
            f"How many {item} are in the bags altogether?"
        )
        s = (
            f"Each bag has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {item}.\n"
            f"The bags hold {a + b} * {c} = <<{a + b}*{c}={n}>>{n} {item}.\n#### {n}"
        )
    return q, s, n


def gsm8k_rows(n: int, split: str, seed: int = 0) -> List[dict]:
    """``n`` rows in verl's GSM8K parquet format (see verl/examples/data_preprocess/gsm8k.py)."""
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    rows = []
    for idx in range(n):
        question, solution, answer = _problem(rng)
        rows.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": f"{question} {GSM8K_INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"split": split, "index": idx, "answer": solution, "question": question},
            }
        )
    return rows


def write_gsm8k(out_dir: str, n_train: int = 256, n_test: int = 64, seed: int = 0) -> Dict[str, str]:
    """Write ``train.parquet`` and ``test.parquet`` into ``out_dir``; return their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, n in (("train", n_train), ("test", n_test)):
        table = pa.Table.from_pylist(gsm8k_rows(n, split, seed))
        path = os.path.join(out_dir, f"{split}.parquet")
        pq.write_table(table, path)
        paths[split] = path
    return paths


def _corpus(seed: int, n: int = 4000) -> Iterable[str]:
    """Text the tokenizer is trained on: problems, solutions and chat scaffolding."""
    rng = np.random.default_rng([seed, 2])
    for _ in range(n):
        q, s, _ = _problem(rng)
        yield f"{IM_START}user\n{q} {GSM8K_INSTRUCTION}{IM_END}\n{IM_START}assistant\n{s}{IM_END}\n"
    yield "Hello! The answer is 42. What is 1 + 1? #### 2"


# --------------------------------------------------------------------------- tokenizer


def build_tokenizer(seed: int = 0, vocab_size: int = 1024):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on the synthetic corpus.

    Byte-level means every string is encodable (no unknown token); digits are split
    one per token as in Qwen's tokenizer.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    return tok


def _write_tokenizer(tok, out_dir: str) -> Dict[str, int]:
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump(
            {"eos_token": IM_END, "pad_token": PAD_TOKEN, "additional_special_tokens": [IM_START, IM_END]},
            f,
            indent=2,
        )
    return ids


# --------------------------------------------------------------------------- model


@dataclass
class TinyQwen3Spec:
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 512
    max_position_embeddings: int = 4096
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    # The final RMSNorm's weight. At 1.0 a random model's logits span only about +-5 (lm_head rows have norm
    # 0.02 * sqrt(hidden)), so no LoRA on the linear layers can push any token's probability much above 0.1 and
    # the offline task's reward stalls near 0.2; 4.0 gives the output range a trained model has.
    final_norm_weight: float = 4.0
    extra: dict = field(default_factory=dict)


def _bf16_bytes(x: np.ndarray) -> bytes:
    """float32 -> bfloat16 (round to nearest even), little-endian raw bytes."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    return rounded.astype("<u2").tobytes()


def _write_safetensors_bf16(path: str, tensors: Dict[str, np.ndarray]) -> None:
    """Write a safetensors file with every tensor in BF16 (no torch needed)."""
    header: Dict[str, dict] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = tensors[name]
        blob = _bf16_bytes(arr)
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for blob in blobs:
            f.write(blob)


def _qwen3_state(spec: TinyQwen3Spec, vocab_size: int, seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 3])
    h, hd, std = spec.hidden_size, spec.head_dim, spec.initializer_range

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    ones = lambda n: np.ones((n,), dtype=np.float32)  # noqa: E731
    sd = {"model.embed_tokens.weight": normal(vocab_size, h)}
    for i in range(spec.num_hidden_layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = ones(h)
        sd[p + "post_attention_layernorm.weight"] = ones(h)
        sd[p + "self_attn.q_proj.weight"] = normal(spec.num_attention_heads * hd, h)
        sd[p + "self_attn.k_proj.weight"] = normal(spec.num_key_value_heads * hd, h)
        sd[p + "self_attn.v_proj.weight"] = normal(spec.num_key_value_heads * hd, h)
        sd[p + "self_attn.o_proj.weight"] = normal(h, spec.num_attention_heads * hd)
        sd[p + "self_attn.q_norm.weight"] = ones(hd)
        sd[p + "self_attn.k_norm.weight"] = ones(hd)
        sd[p + "mlp.gate_proj.weight"] = normal(spec.intermediate_size, h)
        sd[p + "mlp.up_proj.weight"] = normal(spec.intermediate_size, h)
        sd[p + "mlp.down_proj.weight"] = normal(h, spec.intermediate_size)
    sd["model.norm.weight"] = ones(h) * spec.final_norm_weight
    sd["lm_head.weight"] = normal(vocab_size, h)
    return sd


def write_tiny_qwen3(out_dir: str, seed: int = 0, spec: Optional[TinyQwen3Spec] = None) -> str:
    """Write the tiny Qwen3 checkpoint + tokenizer into ``out_dir``; return ``out_dir``."""
    spec = spec or TinyQwen3Spec()
    os.makedirs(out_dir, exist_ok=True)
    tok = build_tokenizer(seed)
    ids = _write_tokenizer(tok, out_dir)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    eos, pad = ids[IM_END], ids[PAD_TOKEN]

    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": pad,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden_size,
        "initializer_range": spec.initializer_range,
        "intermediate_size": spec.intermediate_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "max_window_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_key_value_heads": spec.num_key_value_heads,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": spec.rope_theta,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    config.update(spec.extra)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    gen = {
        "bos_token_id": pad,
        "eos_token_id": [eos, pad],
        "pad_token_id": pad,
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    _write_safetensors_bf16(os.path.join(out_dir, "model.safetensors"), _qwen3_state(spec, vocab_size, seed))
    return out_dir


# --------------------------------------------------------------------------- all


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_offline_assets(
    out: str, seed: int = 0, n_train: int = 256, n_test: int = 64, spec: Optional[TinyQwen3Spec] = None
) -> Dict[str, object]:
    """Write model + data under ``out``; return (and save as ``manifest.json``) what was written."""
    out = os.fspath(out)
    model_dir = write_tiny_qwen3(os.path.join(out, "model"), seed=seed, spec=spec)
    data = write_gsm8k(os.path.join(out, "testset"), n_train=n_train, n_test=n_test, seed=seed)
    files = {}
    for root, _, names in os.walk(model_dir):
        for name in sorted(names):
            p = os.path.join(root, name)
            files[os.path.relpath(p, out)] = {"bytes": os.path.getsize(p), "sha256": _sha256(p)}
    manifest = {
        "seed": seed,
        "model_path": model_dir,
        "train_files": data["train"],
        "val_files": data["test"],
        "n_train": n_train,
        "n_test": n_test,
        "spec": asdict(spec or TinyQwen3Spec()),
        "files": files,
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m verl_sglang_lora.tools.offline_assets",
        description="Write a tiny random Qwen3 checkpoint (+ real BPE tokenizer) and a synthetic GSM8K "
        "parquet set, deterministic from --seed, for offline tests and smoke runs.",
    )
    ap.add_argument("--out", required=True, help="output directory (gets model/ and testset/{train,test}.parquet)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=256)
    ap.add_argument("--n-test", type=int, default=64)
    args = ap.parse_args(argv)
    m = write_offline_assets(args.out, seed=args.seed, n_train=args.n_train, n_test=args.n_test)
    size = sum(v["bytes"] for v in m["files"].values())
    print(f"MODEL_PATH={m['model_path']}  # {size / 2**20:.1f} MiB")
    print(f"DATA={os.path.dirname(m['train_files'])}  # train.parquet ({m['n_train']} rows), test.parquet ({m['n_test']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
