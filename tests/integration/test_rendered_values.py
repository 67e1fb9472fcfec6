"""What a reader sees of the values a client sent: POST /v1/events writes the profile, the
sender Lambda renders and sends it (moto SES), and the parts of the mail are read back."""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from typing import Any

from local_aws.apigw import LambdaContext
from shared.sending.jobs import SendJob, to_message
from tests.integration.conftest import ApiClient, sqs_record


def _send(api: ApiClient, sender: Any, outbox: list[Any], email: str, first_name: str) -> Any:
    """Subscribe ``email`` as ``first_name`` through the API, send it onboarding/welcome (a
    Markdown body that shows the name in its heading and subject) through the sender Lambda,
    addressed as the API stored it: the parsed mail."""
    status, answer = api.post(
        "/v1/events", {"type": "subscriber.subscribed", "email": email, "first_name": first_name}
    )
    assert status == 200, answer
    (stored,) = [profile.email for profile, _ in api.module.store.iter_profiles()]
    job = SendJob(email=stored, template="onboarding/welcome", source="onboarding", step="w")
    result = sender.handler(
        {"Records": [sqs_record(to_message(job), "mailstep-send")]}, LambdaContext("sender", timeout_s=60)
    )
    assert result["batchItemFailures"] == [] and len(outbox) == 1
    return BytesParser(policy=policy.default).parsebytes(outbox[0].raw_data.encode())


def _mail_to(api: ApiClient, sender: Any, outbox: list[Any], first_name: str) -> tuple[str, str, str]:
    """(subject, text, html) of the welcome mail of a reader named ``first_name``."""
    msg = _send(api, sender, outbox, "reader@example.com", first_name)
    return str(msg["Subject"]), msg.get_body(("plain",)).get_content(), msg.get_body(("html",)).get_content()


def test_an_apostrophe_reads_as_an_apostrophe_in_every_part(
    api: ApiClient, sender: Any, outbox: list[Any]
) -> None:
    subject, text, html = _mail_to(api, sender, outbox, "O'Brien")

    assert subject == "Welcome aboard, O'Brien"
    assert "Welcome aboard, O'Brien!" in text and "&#39;" not in text and "&amp;" not in text
    # HTML: the apostrophe as itself or as one character reference, never a reference escaped again
    assert "Welcome aboard, O'Brien!" in html or "Welcome aboard, O&#39;Brien!" in html
    assert "&amp;#39;" not in html and "&amp;#" not in html


def test_markup_and_template_syntax_in_a_name_stay_literal(
    api: ApiClient, sender: Any, outbox: list[Any]
) -> None:
    name = '<b>{{ 7*7 }}</b> [x](https://evil.test) *em* & "q"'
    subject, text, html = _mail_to(api, sender, outbox, name)

    assert subject == f"Welcome aboard, {name}"
    assert f"Welcome aboard, {name}!" in text  # the text part shows what the client sent
    assert "{{ 7*7 }}" in html  # never evaluated (the text part has it too, above)
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert "<em>" not in html and 'href="https://evil.test"' not in html
    assert "&amp;#" not in html


def test_an_international_domain_is_stored_and_mailed_as_idna_2008_encodes_it(
    api: ApiClient, sender: Any, outbox: list[Any]
) -> None:
    msg = _send(api, sender, outbox, "ann@Straße.de", "Ann")

    # IDNA 2008 keeps the sharp s: xn--strae-oqa.de; IDNA 2003 folded it to strasse.de, another domain
    assert msg["To"].addresses[0].addr_spec == "ann@xn--strae-oqa.de"
    assert "strasse" not in outbox[0].raw_data.lower()
