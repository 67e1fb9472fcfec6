"""Sequences as state machines without CDK (the bench's sequence scenario):
:func:`deploy_state_machines` creates/updates one state machine per valid file, named
``STATE_MACHINE_PREFIX + id`` like the CDK construct, pointing at the step function."""

from __future__ import annotations

from pathlib import Path

from shared.core import specs
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import definition_json, render_definition
from shared.sequences.sfn import StepFunctions
from shared.sequences.validate import require_catalog


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
