"""Wire sequences into a running deployment without CDK: the local runtime and tests.

- :func:`deploy_state_machines` creates/updates one state machine per valid file, named
  ``STATE_MACHINE_PREFIX + id`` (like the CDK construct), pointing at the step function;
- :func:`engine_from_settings` is the dispatcher's engine (the events API, engagement).
"""

from __future__ import annotations

from pathlib import Path

from shared import specs
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import definition_json, render_definition
from shared.sequences.engine import SequenceEngine
from shared.sequences.validate import require_catalog
from shared.settings import Settings
from shared.sfn import StepFunctions
from shared.store import SubscriberStore


def deploy_state_machines(
    step_function_arn: str,
    role_arn: str,
    sequences_dir: Path = SEQUENCES_DIR,
    templates_dir: Path | None = None,
    sfn: StepFunctions | None = None,
) -> dict[str, str]:
    """Sequence id -> state machine ARN. Invalid files raise ``SequenceInvalid`` (nothing deployed)."""
    catalog = require_catalog(sequences_dir, templates_dir)
    sfn = sfn or StepFunctions()
    return {
        sequence.id: sfn.put_state_machine(
            f"{specs.STATE_MACHINE_PREFIX}{sequence.id}",
            render_definition(definition_json(sequence), step_function_arn),
            role_arn,
        )
        for sequence in catalog
    }


def engine_from_settings(
    settings: Settings, store: SubscriberStore | None = None, sequences_dir: Path = SEQUENCES_DIR
) -> SequenceEngine | None:
    """The engine the events dispatch uses; None when no state machine prefix is configured."""
    if not settings.state_machine_arn_prefix:
        return None
    return SequenceEngine(
        catalog=require_catalog(sequences_dir),
        arn_prefix=settings.state_machine_arn_prefix,
        store=store or SubscriberStore(settings.table_name, settings.events_table_name),
    )
