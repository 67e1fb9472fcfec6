"""The text/plain part made from the HTML: plain paragraphs, no Markdown marks, links as
``text (url)``, and email layout tables read as the paragraphs they hold."""

from __future__ import annotations

from shared.sending.rendering import html_to_text


def test_a_layout_table_keeps_the_paragraphs_in_its_cells_and_rows_read_as_lines():
    html = (
        "<table><tr><td class='header'>Acme</td></tr><tr><td>\n<h1>Receipt</h1>\n<p>Hi Jane,</p>\n"
        "<table><tr><td>Plan</td><td>$10</td></tr><tr><th>Total</th><th><strong>$10</strong></th></tr></table>"
        "\n<p>Thanks.</p></td></tr></table>"
    )
    assert html_to_text(html) == "Acme\n\nReceipt\n=======\n\nHi Jane,\n\nPlan $10\n\nTotal $10\n\nThanks.\n"


def test_no_markdown_marks_or_escapes_and_whitespace_collapses_like_a_browser():
    html = "<p>Use <b>bold</b>, <em>*stars*</em>, <code>snake_case</code>\n   and <q>quotes</q>.</p>"
    assert html_to_text(html) == "Use bold, *stars*, snake_case and quotes.\n"


def test_links_images_rules_and_line_breaks():
    html = (
        '<p><a href="mailto:help@acme.test">help@acme.test</a> or <a href="mailto:help@acme.test">write</a>;'
        ' <a href="#top">top</a>; <a href="https://acme.test/x"><img src="l.png" alt="Logo"></a>;'
        ' <a href="https://acme.test/y"></a></p><hr><p>one<br>two</p>'
    )
    assert html_to_text(html) == (
        "help@acme.test or write (mailto:help@acme.test); top; Logo (https://acme.test/x);"
        " https://acme.test/y\n\n" + "-" * 40 + "\n\none\ntwo\n"
    )


def test_headings_lists_and_hidden_parts():
    html = (
        '<head><title>T</title><style>p{}</style></head><span aria-hidden="true">pre</span>'
        f"<h1>{'long ' * 15}</h1><h2>Next</h2><h3>Small</h3>"
        "<ul><li>a<ul><li>a1</li></ul></li><li>b</li></ul><ol><li>x</li><li>y</li></ol>"
        '<p style="DISPLAY: none">gone</p><blockquote>said</blockquote>'
    )
    heading = ("long " * 15).strip()
    assert html_to_text(html) == (
        f"{heading}\n{'=' * 60}\n\nNext\n----\n\nSmall\n\n- a\n- a1\n- b\n\n1. x\n2. y\n\nsaid\n"
    )
