"""The renderer: strictness, escaping, inlined CSS, text part, validation with file and line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.sending.rendering import (
    Renderer,
    RenderError,
    SenderView,
    SubscriberView,
    TemplateNotFound,
    build_context,
    html_to_text,
    renderer,
)

SENDER = SenderView(
    name="Acme",
    email="hello@acme.test",
    postal_address="1 Main St, Springfield",
    reason="You signed up at acme.test.",
)
UNSUB = "https://api.acme.test/u/tok_en-1"


def _ctx(first_name: str = "Jane", data: dict | None = None, unsubscribe_url: str | None = UNSUB) -> dict:
    subscriber = SubscriberView(
        email="jane@example.com", first_name=first_name, attributes={"company": "Initech"}
    )
    return build_context(subscriber, SENDER, unsubscribe_url=unsubscribe_url, data=data or {})


@pytest.fixture
def tmp_templates(tmp_path: Path) -> Path:
    layouts = tmp_path / "_layouts"
    layouts.mkdir()
    (layouts / "default.html").write_text(
        "<html><head><style>p { color: #123456; }</style></head><body>{{ content }}"
        "<p>{{ sender.postal_address }}</p>"
        '{% if unsubscribe_url %}<a href="{{ unsubscribe_url }}">Unsubscribe</a>'
        "{% endif %}</body></html>"
    )
    return tmp_path


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_starter_template_renders_with_subject_html_and_text():
    engine = renderer()
    data = {
        "order_id": "A-1",
        "confirm_url": "https://acme.test/c/token",
        "total": "$10",
        "lines": [{"description": "Plan", "amount": "$10"}],
        "items": [{"title": "New", "summary": "Things", "url": "https://acme.test/new"}],
    }
    keys = engine.keys()
    assert {
        "welcome",
        "onboarding/welcome",
        "onboarding/tips",
        "onboarding/pro-tips",
        "onboarding/upgrade",
        "onboarding/check-in",
        "trial/expiring",
        "trial/last-day",
        "newsletter/monthly",
        "transactional/receipt",
    } <= set(keys)
    for key in keys:
        out = engine.render(key, _ctx(data=data))
        assert out.subject and "\n" not in out.subject
        assert "1 Main St, Springfield" in out.html and "1 Main St, Springfield" in out.text
        assert f"Unsubscribe ({UNSUB})" in out.text
        assert 'style="' in out.html
    assert engine.validate() == []


def test_strict_undefined_names_the_variable_and_line(tmp_templates):
    _write(tmp_templates, "a.md", "---\nsubject: Hi\n---\nline four\n\n{{ data.missing }}\n")
    with pytest.raises(RenderError) as info:
        Renderer(tmp_templates).render("a", _ctx())
    assert "missing" in str(info.value) and info.value.line == 6


def test_values_are_escaped_and_cannot_become_markdown(tmp_templates):
    _write(tmp_templates, "a.md", "---\nsubject: 'Hi {{ first_name }}'\n---\nHello {{ first_name }}\n")
    out = Renderer(tmp_templates).render("a", _ctx(first_name="<b>x</b> [click](https://evil.test) *em* _u_"))
    assert "<b>x</b>" not in out.html and "&lt;b&gt;" in out.html
    assert "evil.test" not in out.html.split("href=")[-1] or 'href="https://evil.test"' not in out.html
    assert "<em>" not in out.html and '<a href="https://evil.test"' not in out.html
    assert out.subject == "Hi <b>x</b> [click](https://evil.test) *em* _u_"  # plain text, escaped by MIME


def test_markdown_links_keep_their_urls_and_css_is_inlined(tmp_templates):
    _write(
        tmp_templates,
        "a.md",
        "---\nsubject: S\npreheader: P {{ first_name }}\n---\n[Open]({{ data.url }}) and **bold**\n",
    )
    out = Renderer(tmp_templates).render("a", _ctx(data={"url": "https://app.acme.test/a_b?x=1&y=2"}))
    assert 'href="https://app.acme.test/a_b?x=1&amp;y=2"' in out.html
    assert '<p style="color: #123456;">' in out.html and "<style>" not in out.html
    assert "Open (https://app.acme.test/a_b?x=1&y=2) and bold" in out.text
    assert out.preheader == "P Jane"


def test_html_bodies_and_subject_override(tmp_templates):
    _write(
        tmp_templates, "n/x.html", "<h1>Title</h1><p>{{ first_name }}</p><ul><li>one</li><li>two</li></ul>"
    )
    out = Renderer(tmp_templates).render(
        "n/x", _ctx(), subject="Override {{ subscriber.attributes.company }}"
    )
    assert out.subject == "Override Initech"
    assert "Title\n=====" in out.text and "- one\n- two" in out.text


def test_transactional_context_has_no_unsubscribe_link(tmp_templates):
    _write(tmp_templates, "t.html", "---\nsubject: R\n---\n<p>receipt</p>")
    out = Renderer(tmp_templates).render("t", _ctx(unsubscribe_url=None))
    assert "Unsubscribe" not in out.html and "Unsubscribe" not in out.text


def test_missing_subject_and_template_are_errors(tmp_templates):
    _write(tmp_templates, "nosub.md", "body\n")
    with pytest.raises(RenderError, match="no subject"):
        Renderer(tmp_templates).render("nosub", _ctx())
    with pytest.raises(TemplateNotFound):
        Renderer(tmp_templates).render("nope", _ctx())
    with pytest.raises(TemplateNotFound):
        Renderer(tmp_templates).render("../etc/passwd", _ctx())


def test_validate_reports_undefined_variables_and_missing_layouts_with_file_and_line(tmp_templates):
    _write(tmp_templates, "good.md", "---\nsubject: Hi {{ first_name }}\n---\nHello {{ subscriber.email }}\n")
    _write(
        tmp_templates, "bad/undefined.md", "---\nsubject: Hi {{ frist_name }}\n---\n\nHello {{ usr.name }}\n"
    )
    _write(tmp_templates, "bad/layout.md", "---\nsubject: Hi\npreheader: x\nlayout: fancy\n---\nBody\n")
    _write(tmp_templates, "bad/syntax.html", "---\nsubject: Hi\n---\n<p>{% if x %}</p>\n")
    problems = {str(p) for p in Renderer(tmp_templates).validate()}
    assert problems == {
        "bad/undefined.md:5: undefined variable 'usr'",
        "bad/undefined.md:2: subject: undefined variable 'frist_name'",
        "bad/layout.md:4: missing layout 'fancy' (_layouts/fancy.html)",
        "bad/syntax.html:4: syntax error: Unexpected end of template. "
        "Jinja was looking for the following tags: 'elif' or 'else' or 'endif'. "
        "The innermost block that needs to be closed is 'if'.",
    }


def test_html_to_text_keeps_links_and_skips_hidden_parts():
    html = (
        '<div style="display:none">preheader</div><h2>Tips</h2><p>See <a href="https://x.test/a">the docs</a>'
        ' or <a href="https://x.test/b">https://x.test/b</a>.</p><ol><li>a</li><li>b</li></ol>'
    )
    assert (
        html_to_text(html)
        == "Tips\n----\n\nSee the docs (https://x.test/a) or https://x.test/b.\n\n1. a\n2. b\n"
    )


def test_a_subject_is_compiled_once_and_rendered_for_each_reader(tmp_templates):
    """A broadcast renders one subject for every recipient: compiled once, rendered each time."""
    _write(
        tmp_templates,
        "b.md",
        "---\nsubject: Hi {{ first_name }}\npreheader: For {{ first_name }}\n---\nbody\n",
    )
    engine = Renderer(tmp_templates, reload=False)
    first = engine.render("b", _ctx("Ann"))
    second = engine.render("b", _ctx("Bo"))
    assert (first.subject, first.preheader) == ("Hi Ann", "For Ann")
    assert (second.subject, second.preheader) == ("Hi Bo", "For Bo")
    assert sorted(engine._strings) == ["For {{ first_name }}", "Hi {{ first_name }}"]


def test_a_renderer_that_reloads_sees_an_edited_body_and_one_that_does_not_keeps_its_first(tmp_templates):
    _write(tmp_templates, "e.md", "---\nsubject: S\n---\nfirst\n")
    reloading, fixed = Renderer(tmp_templates), Renderer(tmp_templates, reload=False)
    assert "first" in reloading.render("e", _ctx()).text and "first" in fixed.render("e", _ctx()).text
    path = tmp_templates / "e.md"
    path.write_text("---\nsubject: S\n---\nsecond\n")
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))  # a later modification time, whatever the clock
    assert "second" in reloading.render("e", _ctx()).text
    assert "first" in fixed.render("e", _ctx()).text
