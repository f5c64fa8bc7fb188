#!/usr/bin/env bash
# Megatron + LoRA on the GPU host (docs/megatron_gpu.md).
#   bash scripts/device/megatron_stack.sh build-bg [SRC_DIR]  # start TE's PyTorch extension build (setsid: outlives the call;
#                                                             # against /tmp/site's torch where the bundle has one)
#   bash scripts/device/megatron_stack.sh build-status [WAIT_S] # its state; the wheel is copied to $OUT when done
#   bash scripts/device/megatron_stack.sh install               # the carried wheels into MCORE_SITE (what run does first)
#   bash scripts/device/megatron_stack.sh run                   # STEPS=4, log $OUT/e2e_megatron.log
# TransformerEngine's PyTorch extension exists only as an sdist: it is a C++ (no .cu) extension, compiled here
# against the torch `run` imports (the bundle's in /tmp/site where it carries one, else the host's), the CUDA toolkit
# and that torch's nvidia-* pip headers (cuDNN, NCCL) plus cudnn-frontend's headers (from its carried wheel).
# The Megatron wheels are carried to MCORE_DIR (the TE core wheel in <= 61 MB parts: *.whl.partNN) and installed
# into their own target in one pip call (pip --target --upgrade replaces a package directory that a later call
# touches: TE's core, Python and torch wheels all write transformer_engine/).
set -uo pipefail
MC=${MCORE_DIR:-/tmp/mcore}
TEB=${TE_BUILD_DIR:-/tmp/te_build}
MSITE=${MCORE_SITE:-/tmp/mcore_site}
LOGDIR=${OUT:-/tmp/out}
mkdir -p "$LOGDIR"

nvidia_includes() {  # every include dir of the nvidia-* pip packages of the host's Python (cuDNN, NCCL, ...)
    python3 - <<'EOF'
import glob, os
import nvidia
print(":".join(sorted({d for root in nvidia.__path__ for d in glob.glob(os.path.join(root, "*", "include"))
                       + glob.glob(os.path.join(root, "*", "*", "include"))})))
EOF
}

reassemble() {  # the parts build.py split (*.whl.partNN), then its checksums of the whole files
    (cd "$MC" || exit 1
     for first in *.whl.part00; do [ -e "$first" ] || continue; base=${first%.part00}
         cat "$base".part[0-9][0-9] > "$base"; done  # always anew: a file left half-written would fail every check
     [ ! -f SHA256SUMS ] || sha256sum --quiet -c SHA256SUMS) || { echo "== $MC: a file is missing or corrupt" >&2; exit 1; }
}

frontend_headers() {  # cudnn-frontend's headers (TE's extension includes cudnn_frontend.h), from its wheel
    python3 - "$1" "$TEB/include" <<'EOF'
import glob, os, sys, zipfile
src, dest = sys.argv[1:]
wheels = glob.glob(os.path.join(src, "nvidia_cudnn_frontend-*.whl"))
if not wheels:
    sys.exit(f"no nvidia_cudnn_frontend wheel in {src} (scripts/device/megatron_carry.sh carries it)")
z = zipfile.ZipFile(wheels[0])
header = next(n for n in z.namelist() if n.endswith("/cudnn_frontend.h"))
root = header.rsplit("/", 1)[0] + "/"
for n in z.namelist():
    if n.startswith(root) and not n.endswith("/"):
        out = os.path.join(dest, n[len(root):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(z.read(n))
print("cudnn-frontend headers from", os.path.basename(wheels[0]), "->", dest)
EOF
}

install_stack() {
    reassemble
    local te_torch=("$TEB"/wheel/transformer_engine_torch-*.whl "$MC"/transformer_engine_torch-*.whl)
    local wheels=()
    for w in "$MC"/*.whl; do case $(basename "$w") in nvidia_cudnn_frontend-*) ;; *) wheels+=("$w") ;; esac; done
    for w in "${te_torch[@]}"; do [ -f "$w" ] && { wheels+=("$w"); break; }; done
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$MSITE" --upgrade "${wheels[@]}" 2>&1 \
        | grep -v "Target directory" || true
}

case "${1:-}" in
build-bg)
    SRC=${2:-$MC}
    mkdir -p "$TEB/wheel"; rm -f "$TEB/rc"
    frontend_headers "$SRC" || exit 1  # the build needs only the sdist and this wheel: carry their batch first
    # the torch the extension is built against, the one `run` imports: the bundle's when it carries one (SGLang
    # 0.5.23's: torch 2.14.1 in /tmp/site, so install the bundle first), else the host's; TE_TORCH_SITE overrides
    TORCH_PATH=${TE_TORCH_SITE-$([ -d /tmp/site/torch ] && echo /tmp/site)}
    INC="$TEB/include:$(PYTHONPATH=$TORCH_PATH nvidia_includes)"
    echo "== TE torch build started $(date +%T) against $(PYTHONPATH=$TORCH_PATH python3 -c 'import torch; print(torch.__version__, torch.__file__)') (log $TEB/build.log)"
    env PYTHONPATH="$TORCH_PATH" CPLUS_INCLUDE_PATH="$INC" NVTE_FRAMEWORK=pytorch NVTE_PYTORCH_FORCE_BUILD=TRUE \
        NVTE_NO_LOCAL_VERSION=1 NVTE_CUDA_ARCHS=90 MAX_JOBS=${MAX_JOBS:-14} \
        setsid nohup bash -c "S=\$(date +%s); python3 -m pip wheel -v --no-index --no-build-isolation --no-deps \
            -w '$TEB/wheel' '$SRC'/transformer_engine_torch-*.tar.gz > '$TEB/build.log' 2>&1; \
            echo \"\$? \$(( \$(date +%s) - S ))\" > '$TEB/rc'" > /dev/null 2>&1 < /dev/null &
    sleep "${3:-15}"; tail -3 "$TEB/build.log"
    ;;
build-status)
    left=${2:-0}
    while [ ! -f "$TEB/rc" ] && [ "$left" -gt 0 ]; do sleep 5; left=$((left - 5)); done
    if [ -f "$TEB/rc" ]; then
        read -r rc secs < "$TEB/rc"; echo "== TE torch build rc=$rc in ${secs}s"
        grep -E "error|Error" "$TEB/build.log" | grep -v "Werror\|-Wno" | head -20
        ls -la "$TEB"/wheel/*.whl 2>/dev/null && cp "$TEB"/wheel/*.whl "$LOGDIR/" 2>/dev/null
    else
        echo "== TE torch build still running ($(grep -c "Building\|\[[0-9]*/[0-9]*\]" "$TEB/build.log") progress lines)"
        grep -oE "\[[0-9]+/[0-9]+\]" "$TEB/build.log" | tail -1
    fi
    tail -3 "$TEB/build.log"
    ;;
run)
    shift
    [ -d /tmp/site/sglang ] || { echo "the FSDP bundle is not installed (run validate_all.sh first)"; exit 1; }
    bash scripts/device/install_plugin.sh 2>&1 | tail -1
    source scripts/device/env.sh
    install_stack
    source scripts/device/megatron_env.sh || exit 1
    # torch first, as verl imports it: its own CUDA libraries load before TE's loader looks for any
    python3 -c "import torch, transformer_engine.pytorch, megatron.core; import verl_sglang_lora.register; \
from megatron.bridge import AutoBridge; from megatron.bridge.peft.utils import *; \
from verl_sglang_lora.runtime.cuda_libs import cudnn_state, loaded_libraries; \
print('megatron stack imports: torch', torch.__version__, 'TE', transformer_engine.__version__); \
print('cuDNN after TE:', cudnn_state(), 'files:', loaded_libraries('libcudnn'))" 2>&1 | tail -4
    E2E_TIMEOUT=${E2E_TIMEOUT:-540} EXAMPLE=examples/run_qwen3_lora_megatron.sh \
        bash scripts/device/e2e.sh e2e_megatron "$@"
    ;;
install) install_stack ;;
*) echo "usage: megatron_stack.sh build-bg [SRC_DIR] | build-status [WAIT_S] | install | run [hydra overrides]" >&2; exit 2 ;;
esac
