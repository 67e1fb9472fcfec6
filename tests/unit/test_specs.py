"""The specs name things uniquely and agree with the settings."""

from __future__ import annotations

from pathlib import Path

from shared.core import specs
from shared.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_env_name_maps_to_a_settings_field() -> None:
    fields = set(Settings.model_fields)
    assert set(specs.ENV) <= fields
    assert len(set(specs.ENV.values())) == len(specs.ENV), "two settings share an environment variable"


def test_specs_name_things_uniquely() -> None:
    for group in (specs.TABLES, specs.SECRETS, specs.QUEUES, specs.TOPICS, specs.FUNCTIONS):
        ids = [getattr(s, "id", getattr(s, "name", None)) for s in group]
        assert len(ids) == len(set(ids))
    for spec in specs.FUNCTIONS:
        module, _, fn = spec.handler.rpartition(".")
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), spec.handler


def test_settings_read_only_declared_variables() -> None:
    env = {"TABLE_NAME": "t", "EVENTS_TABLE_NAME": "e", "UNRELATED": "x", "DATA_TTL_DAYS": "30"}
    settings = Settings.from_env(env)
    assert settings.table_name == "t" and settings.data_ttl_days == 30


def test_settings_validate_from_the_variables_each_spec_names() -> None:
    """What the stack passes a function (its tables, secrets, queues, topics) is enough for
    ``Settings`` at import: no function needs a table it is not granted."""
    for spec in specs.FUNCTIONS:
        names = [t.setting for t in spec.read_write_tables] + [s.setting for s in spec.read_secrets]
        names += [q.setting for q in spec.send_queues] + [t.setting for t in spec.publish_topics]
        settings = Settings.from_env({specs.ENV[n]: f"value-{n}" for n in names})
        assert settings.table_name == "value-table_name", spec.name
        granted = specs.EVENTS_TABLE in spec.read_write_tables
        assert settings.events_table_name == ("value-events_table_name" if granted else ""), spec.name


def test_state_machine_prefix_carries_the_stack_name() -> None:
    assert specs.state_machine_prefix("MailstepStaging") == "MailstepStaging-seq-"
    assert specs.state_machine_prefix(specs.STACK_NAME) == specs.STATE_MACHINE_PREFIX
    assert specs.stack_outputs()[specs.STATE_MACHINE_ARN_PREFIX_OUTPUT] == "state_machine_arn_prefix"


def test_granted_actions_map_each_iam_action_to_resource_keys() -> None:
    for spec in specs.FUNCTIONS:
        granted = specs.granted_actions(spec)
        assert granted and all(":" in action and "*" not in action for action in granted)
        assert all(isinstance(keys, frozenset) and keys for keys in granted.values())
        for source in spec.event_sources:
            for action in specs.EVENT_SOURCE_ACTIONS:
                assert specs.resource_key(source.queue) in granted[action]
    api = specs.granted_actions(specs.API_FUNCTION)
    assert api["dynamodb:PutItem"] == {"table/MainTable", "table/EventsTable"}
    assert api["states:StartExecution"] == {specs.SEQUENCE_MACHINES}
    index = specs.TableIndex(specs.EVENTS_TABLE, "TemplateIndex")
    assert specs.resource_key(index) == "table/EventsTable/index/TemplateIndex"


def test_visibility_timeouts_are_6x_the_consumer_timeout() -> None:
    for spec in specs.FUNCTIONS:
        for source in spec.event_sources:
            assert source.queue.visibility_timeout_s >= specs.VISIBILITY_TIMEOUT_FACTOR * spec.timeout_s


def test_broadcast_workers_keep_up_with_the_broadcasts_share_of_the_rate_at_the_cpu_budget() -> None:
    assert specs.broadcast_workers(14) == specs.MIN_BROADCAST_WORKERS == 3
    assert specs.broadcast_workers(1000) == 60  # 1,000/s x 40 ms = 40 vCPU, x 1.5 headroom
    assert specs.broadcast_workers(10**6) == specs.MAX_BROADCAST_WORKERS
    for rate in (50, 200, 1000, 5000):
        capacity = specs.broadcast_workers(rate) * 1000 / specs.WORKER_CPU_MS_PER_MAIL  # one vCPU each
        assert capacity >= rate * specs.DEFAULT_BROADCAST_RATE_SHARE * specs.WORKER_HEADROOM
