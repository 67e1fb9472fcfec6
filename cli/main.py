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

app.command("dev", help=dev_cmd.dev.__doc__)(dev_cmd.dev)
app.command("demo", help=demo_cmd.demo.__doc__)(demo_cmd.demo)
app.add_typer(local_cmd.app, name="local")
app.add_typer(broadcast_cmd.app, name="broadcast")
app.add_typer(subscribers_cmd.app, name="subscribers")
app.add_typer(topics_cmd.app, name="topics")
app.add_typer(signups_cmd.app, name="signups")
app.add_typer(executions_cmd.app, name="executions")
app.command("doctor", help=doctor_cmd.doctor.__doc__)(doctor_cmd.doctor)
app.command("mcp", help=mcp_cmd.mcp.__doc__)(mcp_cmd.mcp)
app.command("console", help=console_cmd.console.__doc__)(console_cmd.console)
app.add_typer(templates_cmd.app, name="templates")
app.command("send-test", help=send_cmd.send_test.__doc__)(send_cmd.send_test)
app.add_typer(sequences_cmd.app, name="sequences")
app.command("stats", help=stats_cmd.stats.__doc__)(stats_cmd.stats)
app.command("events", help=events_cmd.events.__doc__)(events_cmd.events)
app.add_typer(suppression_cmd.app, name="suppression")
app.add_typer(webhooks_cmd.app, name="webhooks")
app.add_typer(reputation_cmd.app, name="reputation")
app.add_typer(warmup_cmd.app, name="warmup")
app.add_typer(hygiene_cmd.app, name="hygiene")
local_cmd.app.command("reply", help=replies_cmd.reply.__doc__)(replies_cmd.reply)

if __name__ == "__main__":
    app()
