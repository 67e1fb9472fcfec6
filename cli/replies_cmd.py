"""``mailstep local reply <message-id> --body TEXT``: the subscriber answers a sent mail.

``local_aws.simulate`` builds the reply MIME (``In-Reply-To``/``References`` naming the
original ``Message-ID``) and publishes it as SES inbound does with an SNS receipt action: a
``Received`` notification with the content inline, to the inbound topic of the running runtime.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from cli.local_cmd import STATE_DIR, TARGET, bad_parameter

console = Console()
app = typer.Typer(help="Replies in the local runtime.")


@app.command()
def reply(
    target: str = TARGET,
    body: str = typer.Option("Thanks!", "--body", help="The reply's text."),
    state_dir: Path = STATE_DIR,
) -> None:
    """Reply to a sent message as its recipient (SES inbound, through SNS)."""
    from cli.target import local
    from local_aws.simulate import publish_reply

    with bad_parameter():
        result = publish_reply(state_dir.resolve(), target, body, local(state_dir).client("sns"))
    console.print(f"published a reply from {result['from']} to {result['in_reply_to']}")


if __name__ == "__main__":
    app()
