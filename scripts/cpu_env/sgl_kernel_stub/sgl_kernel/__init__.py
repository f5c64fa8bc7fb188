"""CPU-test STUB of ``sgl_kernel`` -- NOT the real package.

Used only for SGLang 0.5.8 (scripts/sglang_release.sh copies it into
.cache/sglang/0.5.8/).  sgl-kernel 0.3.21 is a CUDA-only binary package; SGLang 0.5.8
imports a few of its names at module level along the import chain of
``sglang.srt.managers.io_struct`` (io_struct -> schedule_batch -> dllm.config ->
configs.model_config -> layers.quantization -> awq -> layers.moe -> moe_runner ->
deep_gemm: ``from sgl_kernel import silu_and_mul``; and mem_cache.memory_pool_host:
``from sgl_kernel.kvcacheio import transfer_*``).

Only the names needed to get past those imports exist; each is a function that raises
if ever called.  Every other name or submodule (e.g. ``sgl_kernel.scalar_type``,
``scaled_fp4_quant``) is absent, so SGLang's own ``except ImportError`` fallbacks run
exactly as on a machine without sgl-kernel.  No code under test (request structs,
ServerArgs LoRA checks, LoRA target-module normalization, MultiprocessingSerializer)
calls into it.  See docs/cpu_environment.md.
"""

__vsl_cpu_stub__ = True


def _stub(qualname):
    def _raise(*args, **kwargs):
        raise RuntimeError(
            f"{qualname} is a CPU-test stub of an sgl-kernel GPU op "
            "(see docs/cpu_environment.md); it must never be called in CPU tests"
        )

    _raise.__name__ = _raise.__qualname__ = qualname.rsplit(".", 1)[-1]
    return _raise


silu_and_mul = _stub("sgl_kernel.silu_and_mul")
