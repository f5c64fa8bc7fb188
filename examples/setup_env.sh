# Sourced by both examples: the plugin from this checkout on PYTHONPATH (Ray's workers inherit it), then set-up steps
# 1-3 of the examples' header. `vsl_setup [--megatron] [more preflight args]` replaces $PYTHON with the python of
# the tested stack, or exits 2 with one message.
VSL_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$VSL_REPO${PYTHONPATH:+:$PYTHONPATH}"

vsl_setup() {
    local stack=()
    if [[ "${1:-}" == --megatron ]]; then stack=(--megatron); shift; fi
    command -v "$PYTHON" >/dev/null \
        || { echo "verl-sglang-lora: no '$PYTHON' here. Fix: PYTHON=/path/to/python3 (3.10-3.12)" >&2; exit 2; }
    "$PYTHON" -m verl_sglang_lora.tools.preflight --gpu-only --gpus "$NGPUS" || exit 2
    local check=()
    if [[ "${VSL_SKIP_SETUP:-0}" != 1 ]]; then
        PYTHON=$("$PYTHON" -m verl_sglang_lora.tools.gpu_env --skip-gpu-check --gpus "$NGPUS" "${stack[@]}") || exit 2
        check=(--constraints auto)  # the env was built to the tested set: every pin must be there
    fi
    "$PYTHON" -m verl_sglang_lora.tools.preflight --gpus "$NGPUS" "${check[@]}" "${stack[@]}" "$@" || exit 2
}
