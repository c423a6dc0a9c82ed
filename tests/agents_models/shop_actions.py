"""Backends of shop.agent's actions (``python://shop_actions:...``), deterministic for tests."""

from __future__ import annotations

from typing import Any

SECRET = "tok-SECRET-42"


def verify(email: str) -> dict[str, Any]:
    return {"verified": email.endswith("@example.com"), "secret_token": SECRET}


def lookup(order_id: str) -> dict[str, Any]:
    if order_id == "0":
        raise LookupError("no order 0")
    return {"status": f"order {order_id} shipped"}
