# Sourced on the GPU host after scripts/offline_bundle/install.sh: the bundle first on sys.path, the plugin
# installed next to it (so its verl.plugins entry point is visible), NVLink multicast off.
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
# nvidia-cutlass-dsl (SGLang 0.5.23) finds its packages through a .pth, which Python runs only in site dirs
[ -d /tmp/site/nvidia_cutlass_dsl/dsl_packages ] && export PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export FLASHINFER_DISABLE_VERSION_CHECK=1 RAY_DEDUP_LOGS=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# the examples set up their own environment on a fresh host; here the bundle in /tmp/site is the environment
export VSL_SKIP_SETUP=1
# Triton kernels compiled on one machine are kept for the next (validate_all.sh tars them into $OUT): the
# first LoRA generate on a bare machine spent ~100 s compiling.
export TRITON_CACHE_DIR=/tmp/triton_cache
# (copy $OUT/triton_cache.tgz of the last call to .whl/ and carry it)
for t in .whl/triton_cache.tgz .whl/b3/triton_cache.tgz; do [ -f "$t" ] && [ ! -d "$TRITON_CACHE_DIR" ] && tar xzf "$t" -C "$(dirname "$TRITON_CACHE_DIR")"; done
LOGDIR=${OUT:-/tmp/out}
mkdir -p "$LOGDIR"
# triton attention + pytorch sampling: the bundle strips sglang-kernel's FA3 part and flashinfer would JIT-compile
SGLANG_GPU_ARGS=(
    ++actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton
    ++actor_rollout_ref.rollout.engine_kwargs.sglang.sampling_backend=pytorch
    actor_rollout_ref.rollout.enforce_eager=True
)
