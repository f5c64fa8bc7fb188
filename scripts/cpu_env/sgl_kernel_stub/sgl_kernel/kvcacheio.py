"""CPU-test STUB of ``sgl_kernel.kvcacheio`` -- NOT the real package (see __init__.py)."""
from sgl_kernel import _stub

__vsl_cpu_stub__ = True

_NAMES = (
    "transfer_kv_all_layer",
    "transfer_kv_all_layer_direct_lf_pf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph",
    "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct",
    "transfer_kv_per_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla",
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
)
for _n in _NAMES:
    globals()[_n] = _stub(f"sgl_kernel.kvcacheio.{_n}")
del _n
