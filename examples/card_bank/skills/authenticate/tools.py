"""Identity verification against a fixed, fake customer table."""

from __future__ import annotations

from typing import Any

CUSTOMERS = {"1001": ("Ada", "4321"), "1002": ("Grace", "8765")}


def verify_customer(customer_number: str, pin: str, context: Any = None) -> dict[str, Any]:
    """Check a customer number and PIN.

    Args:
        customer_number: The customer's number, e.g. 1001.
        pin: The four-digit PIN.
    """
    record = CUSTOMERS.get(customer_number)
    if record is None or record[1] != pin:
        if context is not None:
            attempts = (context.memory.get("attempts") or 0) + 1
            context.memory.set("attempts", attempts)
        return {"ok": False, "error": "verification_failed"}
    if context is not None:
        context.memory.set("authenticated", True)
        context.memory.set("customer_name", record[0])
        context.memory.set("customer_id", customer_number)
    return {"ok": True, "name": record[0]}
