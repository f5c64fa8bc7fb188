"""Resident in-place LoRA slots: the fast, verified adapter sync (docs/resident_sync.md).

Two adapters loaded ``pinned=True`` act as slots in SGLang's LoRA memory pool. A sync writes the new adapter bytes
straight into the idle slot's pool buffers, checks them against the trainer's buffer byte for byte, and only then is
the slot served (the server actor commits it). The layout is traced from SGLang's own load code, never from a
per-release table.

Modules:
  ``access``   find the LoRAManager / pool from what SGLang hands a custom loader; resolve slots.
  ``trace``    run SGLang's own adapter normalization, TP slicing and pool load on index-tagged probe tensors.
  ``plan``     turn a trace into copy blocks (``SlotLayout``) and bind them to real tensors as (src, dst) views.
  ``execute``  run the copies; compare slot blocks with their sources, and two whole slots, bit for bit.
  ``mirror``   read a slot back into the trainer buffer's layout and compare it with that buffer.
  ``protocol`` the wire format: tensor-name header, status/message tensors, reply channels.
  ``loader``   the ``--custom-weight-loader`` entry point (``LOADER_PATH``).
  ``support``  whether the path applies (config and the installed SGLang's declarations), and what it costs.
  ``requests`` the loader requests: built by the sync client, sent by the server actor (with its slot state).
"""

LOADER_PATH = "verl_sglang_lora.runtime.resident.loader.apply"

__all__ = ["LOADER_PATH"]
