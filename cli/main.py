"""The ``mailstep`` command. Each capability registers its commands here with one line."""

from __future__ import annotations

import typer

from cli import (
    broadcast_cmd,
    console_cmd,
    demo_cmd,
    dev_cmd,
    doctor_cmd,
    events_cmd,
    executions_cmd,
    hygiene_cmd,
    local_cmd,
    mcp_cmd,
    replies_cmd,
    reputation_cmd,
    send_cmd,
    sequences_cmd,
    signups_cmd,
    stats_cmd,
    subscribers_cmd,
    suppression_cmd,
    templates_cmd,
    topics_cmd,
    warmup_cmd,
    webhooks_cmd,
)

app = typer.Typer(
    name="mailstep",
    help="Self-hosted serverless email: sequences, broadcasts, SES. Runs locally with no AWS account.",
    no_args_is_help=True,
    add_completion=False,
)

for name, command in (
    ("dev", dev_cmd.dev),
    ("demo", demo_cmd.demo),
    ("doctor", doctor_cmd.doctor),
    ("mcp", mcp_cmd.mcp),
    ("send-test", send_cmd.send_test),
    ("stats", stats_cmd.stats),
    ("events", events_cmd.events),
):
    app.command(name, help=command.__doc__)(command)
for name, group in (
    ("local", local_cmd),
    ("console", console_cmd),
    ("broadcast", broadcast_cmd),
    ("subscribers", subscribers_cmd),
    ("topics", topics_cmd),
    ("signups", signups_cmd),
    ("executions", executions_cmd),
    ("templates", templates_cmd),
    ("sequences", sequences_cmd),
    ("suppression", suppression_cmd),
    ("webhooks", webhooks_cmd),
    ("reputation", reputation_cmd),
    ("warmup", warmup_cmd),
    ("hygiene", hygiene_cmd),
):
    app.add_typer(group.app, name=name)
local_cmd.app.command("reply", help=replies_cmd.reply.__doc__)(replies_cmd.reply)

if __name__ == "__main__":
    app()
