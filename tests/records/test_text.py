"""harness.records.text: terminal escapes stripped, characters XML and UTF-8 cannot carry
replaced, by hand."""

from __future__ import annotations

from harness.records.text import REPLACEMENT, clean_json, clean_text, strip_ansi


def test_clean_text_by_hand():
    assert strip_ansi("\x1b[1;31mERROR\x1b[0m ok \x1b]0;title\x07") == "ERROR ok "
    assert clean_text("a\x00b\x07c\td\ne\rf\ud800g\uffffh") == (
        f"a{REPLACEMENT}b{REPLACEMENT}c\td\ne\rf{REPLACEMENT}g{REPLACEMENT}h")
    assert clean_text("<b>&</b>") == "<b>&</b>"                 # markup is each writer's to escape
    assert clean_json({"k\ud800": ["x\ud801", 1, None, "\x00"]}) == (
        {f"k{REPLACEMENT}": [f"x{REPLACEMENT}", 1, None, "\x00"]})

