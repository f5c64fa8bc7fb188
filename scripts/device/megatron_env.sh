# Sourced after scripts/device/env.sh once the Megatron stack is installed (megatron_stack.sh install): the stack's
# target on PYTHONPATH after the bundle, and TE's cuDNN the one the bundle's torch loads.
MSITE=${MCORE_SITE:-/tmp/mcore_site}
export PYTHONPATH=$PYTHONPATH:$MSITE
# TE opens cuDNN from CUDNN_HOME, else CUDA_HOME or the host interpreter's purelib (not /tmp/site): point it at
# the cuDNN the bundle's torch loads, so one process does not hold two
CUDNN_LIB=$(ls /tmp/site/nvidia/cudnn/lib/libcudnn.so.* 2>/dev/null | head -1)
[ -n "$CUDNN_LIB" ] && export CUDNN_HOME=${CUDNN_HOME:-$(dirname "$(dirname "$CUDNN_LIB")")}
# no flash-attn wheel here; TE's cuDNN fused attention failed in the backward on the H200 (docs/megatron_gpu.md)
export ATTN_BACKEND=${ATTN_BACKEND:-unfused}
