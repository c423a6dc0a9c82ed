"""Card tools over a fixed, fake card table (deterministic)."""

from __future__ import annotations

from typing import Any, Literal

CARDS = {
    "1001": [
        {"card_id": "C-11", "label": "Debit ending 1111"},
        {"card_id": "C-12", "label": "Credit ending 2222"},
    ],
    "1002": [{"card_id": "C-21", "label": "Debit ending 3333"}],
}
FEES = {"standard": 0.0, "express": 5.0}
DAYS = {"standard": 5, "express": 1}


def list_cards(context: Any = None) -> dict[str, Any]:
    """List the verified customer's cards."""
    customer = context.memory.get("customer_id") if context is not None else None
    return {"ok": True, "cards": CARDS.get(str(customer), [])}


def block_card(card_id: str, context: Any = None) -> dict[str, Any]:
    """Block a card immediately so it can no longer be used.

    Args:
        card_id: The card to block, e.g. C-11.
    """
    if context is not None:
        context.memory.set("card_blocked", True)
    return {"ok": True, "card_id": card_id, "blocked": True}


def order_replacement(
    card_id: str, shipping: Literal["standard", "express"], context: Any = None
) -> dict[str, Any]:
    """Order a replacement card.

    Args:
        card_id: The card being replaced.
        shipping: standard or express delivery.
    """
    reference = f"R-{card_id}-{shipping[0].upper()}"
    if context is not None:
        context.memory.set("replacement_ordered", True)
        context.memory.set("order_reference", reference)
    return {"ok": True, "reference": reference, "fee": FEES[shipping], "days": DAYS[shipping]}
