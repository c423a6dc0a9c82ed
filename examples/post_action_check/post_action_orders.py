"""The order system of the post_action_check example (run through ``python://``)."""

from __future__ import annotations

import re

_ORDER = re.compile(r"[A-Z]-\d{1,6}")


def cancel_order(order_number: str) -> dict[str, object]:
    """Cancel ``order_number``; a malformed number fails, which the model sees as an error."""
    number = order_number.strip().upper()
    if not _ORDER.fullmatch(number):
        raise ValueError(f"'{order_number}' is not an order number (expected like A-100)")
    return {"order_number": number, "cancelled": True, "cancellation_id": f"CX-{number[2:]}"}
