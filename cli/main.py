"""The ``mailstep`` command. Each capability registers its commands here with one line."""

from __future__ import annotations

import typer

from cli import (
    demo,
    dev_cmd,
    doctor_cmd,
    executions_cmd,
    local_cmd,
    mcp_cmd,
    subscribers_cmd,
)

app = typer.Typer(
    name="mailstep",
    help="Self-hosted serverless email: sequences, broadcasts, SES. Runs locally with no AWS account.",
    no_args_is_help=True,
    add_completion=False,
)

app.command("dev", help=dev_cmd.dev.__doc__)(dev_cmd.dev)
app.command("demo", help=demo.demo.__doc__)(demo.demo)
app.add_typer(local_cmd.app, name="local")
app.add_typer(subscribers_cmd.app, name="subscribers")
app.add_typer(executions_cmd.app, name="executions")
app.command("doctor", help=doctor_cmd.doctor.__doc__)(doctor_cmd.doctor)
app.command("mcp", help=mcp_cmd.mcp.__doc__)(mcp_cmd.mcp)

if __name__ == "__main__":
    app()
