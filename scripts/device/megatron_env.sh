# Sourced after scripts/device/env.sh by the scripts that run the Megatron example: the stack installed from the
# carried wheels where it is not yet (megatron_stack.sh install), its target on PYTHONPATH after the bundle, and TE's
# cuDNN the one the bundle's torch loads. Returns 1, saying why, where no stack is there after the install.
MSITE=${MCORE_SITE:-/tmp/mcore_site}
# install exits 0 when pip fails (its output is filtered): judge by what it left
[ -d "$MSITE/megatron/bridge" ] || bash scripts/device/megatron_stack.sh install
if [ ! -d "$MSITE/megatron/bridge" ]; then
    echo "the Megatron stack is not in $MSITE: carry its wheels first (docs/megatron_gpu.md)" >&2
    return 1
fi
export PYTHONPATH=$PYTHONPATH:$MSITE
# TE opens cuDNN from CUDNN_HOME, else CUDA_HOME or the host interpreter's purelib (not /tmp/site): point it at
# the cuDNN the bundle's torch loads, so one process does not hold two
CUDNN_LIB=$(ls /tmp/site/nvidia/cudnn/lib/libcudnn.so.* 2>/dev/null | head -1)
[ -n "$CUDNN_LIB" ] && export CUDNN_HOME=${CUDNN_HOME:-$(dirname "$(dirname "$CUDNN_LIB")")}
# no flash-attn wheel here; TE's cuDNN fused attention failed in the backward on the H200 (docs/megatron_gpu.md)
export ATTN_BACKEND=${ATTN_BACKEND:-unfused}
