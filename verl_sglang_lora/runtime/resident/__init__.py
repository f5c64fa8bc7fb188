"""Resident in-place LoRA slots: the scheduler-side half of the fast adapter sync.

Two adapters loaded ``pinned=True`` act as slots in SGLang's LoRA memory pool. A sync writes the new adapter
bytes straight into the idle slot's pool buffers instead of loading a new adapter (no CPU staging, no lazy
pool fill). Everything here runs inside SGLang's scheduler process (through ``--custom-weight-loader``) or in
tests against SGLang's real LoRA objects; the layout is traced from SGLang's own load code, never from a
per-release table.

Modules, one job each:
  ``access``   find the LoRAManager / pool from what SGLang hands a custom loader; resolve slots.
  ``trace``    run SGLang's own adapter normalization, TP slicing and pool load on index-tagged probe tensors.
  ``plan``     turn a trace into copy blocks (``SlotLayout``) and bind them to real tensors as (src, dst) views.
  ``execute``  run the copies; checksums of source and slot that compare cheaply.
  ``verify``   SGLang's own load into a slot, and a byte-exact slot-against-slot comparison.
  ``protocol`` the wire format: tensor-name header, status/message tensors.
  ``loader``   the ``--custom-weight-loader`` entry point (``verl_sglang_lora.runtime.resident.loader.apply``).
  ``update_check_cache`` SGLang 0.5.23's per-request module walk before each tensor update, answered once per model
               for the loader's own requests.
  ``selfcheck`` builds SGLang's real LoRAManager on a CPU stand-in model and checks the plan (tests, doctor).
  ``support``  whether the path applies (config and the installed SGLang's declarations), for both sides.
  ``requests`` the sync client's side: status tensors and the serialized loader calls, and their check.
  ``slots``    the server actor's side: which slot serves, which one the next version is written into.
"""

LOADER_PATH = "verl_sglang_lora.runtime.resident.loader.apply"

__all__ = ["LOADER_PATH"]
