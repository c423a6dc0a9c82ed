"""Balance lookup over fixed, fake balances."""

from __future__ import annotations

from typing import Any

from agentscript.mantle import tool

BALANCES = {"1001": 1250.75, "1002": 98.1}


@tool(description="Get the verified customer's current account balance.", writes=["balance"])
def get_balance(context: Any = None) -> dict[str, Any]:
    customer = context.memory.get("customer_id") if context is not None else None
    balance = BALANCES.get(str(customer))
    if balance is None:
        return {"ok": False, "error": "unknown_customer"}
    if context is not None:
        context.memory.set("balance", balance)
    return {"ok": True, "balance": balance, "currency": "EUR"}
