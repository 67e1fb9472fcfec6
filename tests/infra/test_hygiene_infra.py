"""List hygiene in the template: the daily schedule of the hygiene function, its least-privilege
role, the sparse HygieneIndex of the main table, and the settings (cdk-nag passes: ``synth``
fails on a finding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.core import specs
from stacks.config import PREFIX, ConfigError
from tests.infra.cfn import Synth, as_list, function_by_handler, role_statements, synthesize
from tests.infra.test_config import config_from


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(
        tmp_path_factory.mktemp("cdk.out"),
        {
            f"{PREFIX}coldAfterDays": 120,
            f"{PREFIX}newSubscriberColdAfterDays": 45,
            f"{PREFIX}sunsetGraceDays": 14,
        },
    )


def test_an_eventbridge_rule_runs_the_hygiene_function_every_day(synth: Synth) -> None:
    fn_id, _ = function_by_handler(synth, specs.HYGIENE_FUNCTION.handler)
    scheduled = {
        k: r
        for k, r in synth.resources("AWS::Events::Rule").items()
        if "ScheduleExpression" in r["Properties"]
    }
    assert len(scheduled) == 1
    rule_id, rule = next(iter(scheduled.items()))
    properties = rule["Properties"]
    assert properties["ScheduleExpression"] == "cron(0 4 * * ? *)" == specs.HYGIENE_SCHEDULE
    assert properties.get("State", "ENABLED") == "ENABLED"
    (target,) = properties["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [fn_id, "Arn"]}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 6 * 3600}
    permissions = [
        p["Properties"]
        for p in synth.resources("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [fn_id, "Arn"]}
    ]
    assert permissions == [
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [fn_id, "Arn"]},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]},
        }
    ]


def test_the_events_table_has_the_sparse_hygiene_index(synth: Synth) -> None:
    table = synth.json["Resources"][specs.EVENTS_TABLE.id]["Properties"]
    (index,) = [g for g in table["GlobalSecondaryIndexes"] if g["IndexName"] == specs.HYGIENE_INDEX]
    assert index["IndexName"] == specs.HYGIENE_INDEX == "HygieneIndex"
    assert index["KeySchema"] == [
        {"AttributeName": "hygiene_key", "KeyType": "HASH"},
        {"AttributeName": "PK", "KeyType": "RANGE"},
    ]
    assert {"AttributeName": "hygiene_key", "AttributeType": "S"} in table["AttributeDefinitions"]


def test_the_hygiene_role_queries_only_its_index_and_scans_nothing(synth: Synth) -> None:
    fn_id, function = function_by_handler(synth, specs.HYGIENE_FUNCTION.handler)
    actions = {a for s in role_statements(synth, fn_id) for a in as_list(s["Action"])}
    assert "dynamodb:Scan" not in actions and not any(a.endswith("*") for a in actions)
    index_statements = [
        s
        for s in role_statements(synth, fn_id)
        if any("index/HygieneIndex" in str(r) for r in as_list(s["Resource"]))
    ]
    assert [as_list(s["Action"]) for s in index_statements] == [["dynamodb:Query"]]
    assert function["Properties"]["Timeout"] == 900
    # only the hygiene function reads the index
    users = [
        f.name
        for f in specs.FUNCTIONS
        if any(
            isinstance(g.resource, specs.TableIndex) and g.resource.index == specs.HYGIENE_INDEX
            for g in f.grants
        )
    ]
    assert users == ["hygiene"]


def test_sunset_settings_reach_the_hygiene_function(synth: Synth, tuned: Synth) -> None:
    _, default = function_by_handler(synth, specs.HYGIENE_FUNCTION.handler)
    variables = default["Properties"]["Environment"]["Variables"]  # cdk.json's values
    assert (variables["COLD_AFTER_DAYS"], variables["SUNSET_GRACE_DAYS"]) == ("90", "30")
    _, engagement = function_by_handler(synth, specs.ENGAGEMENT_FUNCTION.handler)
    assert "COLD_AFTER_DAYS" not in engagement["Properties"]["Environment"]["Variables"]
    _, function = function_by_handler(tuned, specs.HYGIENE_FUNCTION.handler)
    variables = function["Properties"]["Environment"]["Variables"]
    assert (
        variables["COLD_AFTER_DAYS"],
        variables["NEW_SUBSCRIBER_COLD_AFTER_DAYS"],
        variables["SUNSET_GRACE_DAYS"],
    ) == (
        "120",
        "45",
        "14",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("coldAfterDays", 3),
        ("coldAfterDays", 1000),
        ("sunsetGraceDays", 0),
        ("newSubscriberColdAfterDays", "soon"),
    ],
)
def test_bad_sunset_values_fail_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"context key {PREFIX}{key}"):
        config_from({PREFIX + key: value})


def test_new_subscribers_cannot_wait_longer_than_everyone(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=f"context key {PREFIX}newSubscriberColdAfterDays: 100 is more than"
    ):
        config_from({f"{PREFIX}coldAfterDays": 60, f"{PREFIX}newSubscriberColdAfterDays": 100})
