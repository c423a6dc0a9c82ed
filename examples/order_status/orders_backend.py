"""The Python that runs the agent's two Salesforce flows outside Salesforce.

``order_status.agent`` names ``flow://Get_Delivery_Date`` and ``flow://Check_If_Late``, as
written for Agentforce; ``agentscript.toml`` beside it maps each to a function here
(``[actions.targets]``), so ``agentscript serve examples/order_status`` runs them unchanged.
A real deployment would call its order system here (an HTTP API, a database); these return
what ``late_order.yaml``'s stubs return.
"""

from __future__ import annotations


def get_delivery_date(order_ID: str) -> dict[str, object]:
    """``flow://Get_Delivery_Date``: the expected delivery date of order ``order_ID``."""
    return {"delivery_date": "February 10, 2026"}


def check_if_late(order_ID: str, delivery_date: str) -> dict[str, object]:
    """``flow://Check_If_Late``: whether order ``order_ID`` is late for ``delivery_date``."""
    return {"is_late": True}
