"""Server-actor side of the resident path: which slot serves, which one the next version is written into.

Two pinned adapters (``requests.SLOTS``) are created once per SGLang launch from the first adapter sync (SGLang's own
tensor load, so the first served bytes are SGLang's), then attached. Every later sync writes the idle slot in place
and makes it the served name. A slot that an in-flight request still uses is never written: that sync takes the
versioned load instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_sglang_lora.runtime.resident.requests import SLOTS


@dataclass
class ResidentSlots:
    created: bool = False  # both slots loaded (pinned) in this SGLang launch
    attached: bool = False  # the loader holds the client's flat-buffer views for both slots
    active: str | None = None  # the slot new requests name
    written: str | None = None  # the slot the last write (or the attach) filled: served only once committed
    disabled: str | None = None  # why the in-place path is off for the rest of this launch

    def idle(self, refs: dict[str, int]) -> str | None:
        """The slot a write may touch: not the served one, and no request holds it."""
        for slot in SLOTS:
            if slot != self.active and refs.get(slot, 0) == 0:
                return slot
        return None
