"""A refused execution entry is explained by the action whose condition failed, on DynamoDB
(moto) itself: the same answers come back when the actions are written in another order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shared.core.errors import AlreadyEntered, ExecutionAlreadyActive, SubscriberNotFound
from shared.store.dynamo import Action
from shared.store.subscribers import SubscriberStore

ORDERS: dict[str, Callable[[list[Action]], list[Action]]] = {
    "as built": lambda actions: actions,
    "reversed": lambda actions: actions[::-1],
    "rotated": lambda actions: actions[1:] + actions[:1],
}


@pytest.fixture(params=sorted(ORDERS))
def reordered(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, store: SubscriberStore) -> str:
    build = SubscriberStore._entry_actions
    order = ORDERS[request.param]

    def entry_actions(self: SubscriberStore, *args: Any) -> list[Action]:
        return order(build(self, *args))

    monkeypatch.setattr(SubscriberStore, "_entry_actions", entry_actions)
    return str(request.param)


def test_no_profile_is_subscriber_not_found(store: SubscriberStore, reordered: str) -> None:
    with pytest.raises(SubscriberNotFound):
        store.put_execution("nobody@example.com", "onboarding", "arn:1")


def test_an_active_pair_is_execution_already_active(store: SubscriberStore, reordered: str) -> None:
    store.upsert("ann@example.com")
    store.put_execution("ann@example.com", "onboarding", "arn:1")
    with pytest.raises(ExecutionAlreadyActive):
        store.put_execution("ann@example.com", "onboarding", "arn:2")


def test_a_sequence_entered_before_is_already_entered(store: SubscriberStore, reordered: str) -> None:
    store.upsert("ann@example.com")
    store.put_execution("ann@example.com", "welcome", "arn:1", once=True)
    assert store.delete_execution("ann@example.com", "welcome", "arn:1")
    with pytest.raises(AlreadyEntered):
        store.put_execution("ann@example.com", "welcome", "arn:2", once=True)
    assert [e.execution_arn for e in store.list_executions("ann@example.com")] == []
