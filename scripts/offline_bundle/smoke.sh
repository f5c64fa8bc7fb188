#!/usr/bin/env bash
# Device-side smoke test of the offline bundle (run after install.sh, from the repo root):
#   tiny assets -> SGLang 0.5.12 server with LoRA (triton attention, memory saver) -> /generate,
#   /load_lora_adapter + /generate with the adapter, release/resume of the kv_cache tag;
#   meanwhile `import ray; ray.init()`, `import verl`, and the offline-assets tests (verl's gsm8k scorer).
#
#   bash scripts/offline_bundle/smoke.sh [SITE=/tmp/site]      # logs under $OUT (or /tmp/smoke)
#
# Environment knobs: ATTN=triton|flashinfer, SAMPLING=pytorch|flashinfer (flashinfer JIT-compiles with nvcc on
# the first request), SMOKE_PORT=30000, SMOKE_CUDA_GRAPH=1 (0 adds --disable-cuda-graph).
set -uo pipefail
SITE=${1:-/tmp/site}
LOG=${OUT:-/tmp/smoke}
mkdir -p "$LOG"
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false FLASHINFER_DISABLE_VERSION_CHECK=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ATTN=${ATTN:-triton}
SAMPLING=${SAMPLING:-pytorch}
PORT=${SMOKE_PORT:-30000}
ASSETS=/tmp/assets
URL=http://127.0.0.1:$PORT
fail=0
step() { echo; echo "=== $* ($(date +%T))"; }

step versions
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
python3 - <<'PY'
import importlib.metadata as md, sys
print(sys.version.split()[0], {n: md.version(n) for n in
      ["torch", "triton", "sglang", "sglang-kernel", "transformers", "tokenizers", "verl", "ray", "peft"]})
PY

step assets
python3 -m verl_sglang_lora.tools.offline_assets --out "$ASSETS" || fail=1

step "adapter (peft, r=8, all linear layers, random B so it changes the output)"
python3 - "$ASSETS/model" /tmp/lora <<'PY' || fail=1
import sys, torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
base, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
cfg = LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM",
                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
pm = get_peft_model(model, cfg)
with torch.no_grad():
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            p.normal_(0, 0.5)
pm.save_pretrained(out)
print("adapter saved", out)
PY

step "sglang server (attention_backend=$ATTN, sampling_backend=$SAMPLING)"
# the decode CUDA-graph cap under the installed release's flag name (split in two by 0.5.18)
CG_FLAG=$(python3 -m verl_sglang_lora.sglang_contract.installed cuda-graph-flag)
EXTRA=()
[[ ${SMOKE_CUDA_GRAPH:-1} == 0 ]] && EXTRA+=(--disable-cuda-graph)
LAUNCH=(python3 -m sglang.launch_server --model-path "$ASSETS/model" --host 127.0.0.1 --port "$PORT"
    --enable-lora --max-lora-rank 8 --lora-target-modules all --max-loras-per-batch 2
    --attention-backend "$ATTN" --sampling-backend "$SAMPLING" --mem-fraction-static 0.3 --enable-memory-saver
    "$CG_FLAG" 4 --log-level info "${EXTRA[@]}")
echo "${LAUNCH[*]}"
"${LAUNCH[@]}" >"$LOG/sglang.log" 2>&1 &
SERVER=$!

step "ray + verl (while the server loads)"
timeout 180 python3 - <<'PY' 2>&1 | tail -n 25 || fail=1
import time
t = time.time()
import ray
ray.init(num_cpus=4, include_dashboard=False, object_store_memory=2 * 10**9)
@ray.remote
def f(x):
    return x * 2
print("ray", ray.__version__, "ray.get:", ray.get([f.remote(i) for i in range(3)]),
      "resources:", ray.cluster_resources().get("CPU"), f"{time.time() - t:.1f}s")
ray.shutdown()
import verl
from verl.workers.rollout.replica import RolloutReplicaRegistry
from verl.workers.rollout.sglang_rollout import async_sglang_server  # noqa: F401
from verl.utils.reward_score import default_compute_score
print("verl", verl.__version__, "gsm8k score:", default_compute_score("openai/gsm8k", "so #### 72", "72"))
PY

step "offline-assets tests (pytest)"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_offline_assets_on_cpu.py 2>&1 | tail -n 5 || fail=1

step "wait for the server, then generate / LoRA / release+resume"
python3 - "$URL" "$LOG" $SERVER <<'PY' || fail=1
import json, os, sys, time
import requests
url, log, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.time()
while True:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("server process exited")
    try:
        if requests.get(f"{url}/model_info", timeout=2).ok:
            break
    except requests.RequestException:
        pass
    if time.time() - t0 > 300:
        sys.exit("server not up after 300 s")
    time.sleep(1)
print(f"server up after {time.time() - t0:.0f} s of waiting")

def post(path, body, name=None):
    r = requests.post(f"{url}{path}", json=body, timeout=120)
    print(f"POST {path} -> {r.status_code} {r.text[:300]}")
    if name:
        open(f"{log}/{name}.json", "w").write(r.text)
    return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text

prompt = "<|im_start|>user\nNatalia has 48 apples. How many? #### <|im_end|>\n<|im_start|>assistant\n"
sp = {"temperature": 0, "max_new_tokens": 16}
txt = {}
txt["base"] = post("/generate", {"text": prompt, "sampling_params": sp}, "base").get("text")
post("/load_lora_adapter", {"lora_name": "smoke", "lora_path": "/tmp/lora"}, "load")
txt["lora"] = post("/generate", {"text": prompt, "sampling_params": sp, "lora_path": "smoke"}, "lora").get("text")
txt["base_again"] = post("/generate", {"text": prompt, "sampling_params": sp}, "base_again").get("text")
post("/release_memory_occupation", {"tags": ["kv_cache"]})
post("/resume_memory_occupation", {"tags": ["kv_cache"]})
txt["after_resume"] = post("/generate", {"text": prompt, "sampling_params": sp, "lora_path": "smoke"},
                           "after_resume").get("text")
print("texts:", json.dumps(txt))
ok = all(isinstance(t, str) for t in txt.values())
ok &= txt["base"] == txt["base_again"]      # greedy without adapter is reproducible
ok &= txt["lora"] != txt["base"]            # the adapter changes the output
ok &= txt["after_resume"] == txt["lora"]    # release/resume of kv_cache keeps weights and adapter
print("checks:", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
tail -n 5 "$LOG/sglang.log"; grep -E "Load weight end|KV Cache is allocated|Capture cuda graph end|LoRA|max_total_num_tokens|ERROR|Error" "$LOG/sglang.log" | head -n 25
[[ $fail == 0 ]] && echo "SMOKE: PASS" || echo "SMOKE: FAIL"
exit $fail
