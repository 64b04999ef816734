"""A catalogue is read by gettext's grammar: what msgfmt refuses is refused with the file and line."""

from __future__ import annotations

import pytest

from nmt_cli.errors import NmtError
from nmt_cli.formats.po_grammar import check_po_grammar

VALID = r"""# Translator comment
#. extracted
#: src/main.c:12
#, c-format, fuzzy
#| msgid "Old %s"
msgctxt "menu"
msgid ""
"Open %s\n"
"in a new\ttab \"now\" \\ \x41\101\?\'"
msgstr "" "two strings " "on one line"

msgid "One file"
msgid_plural "%d files"
msgstr[0] "Eine Datei"
msgstr[1] "%d Dateien"
  msgid   "indented"
msgstr""

#~ msgid "obsolete"
#~ msgstr "veraltet"
"""


def test_a_catalogue_with_every_construct_passes():
    check_po_grammar(VALID, "ok.po")
    check_po_grammar(VALID.replace("\n", "\r\n"), "crlf.po")
    check_po_grammar("", "empty.po")


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('msgid "Unterminated entry\nmsgstr ""\n', 1, "unterminated string"),
        ('msgid "a"\nmsgstr "b"\n\nmsgid "c"\nmsgstr "at the end', 5, "unterminated string"),
        ('msgid "bad \\q escape"\nmsgstr ""\n', 1, "invalid escape sequence \\q"),
        ('msgid "ends in a backslash\\"\nmsgstr ""\n', 1, "unterminated string"),
        ('msgid "a"\nmsgstr\n', 2, "without its string"),
        ('msgid "a"\nmsgstr "b" trailing\n', 2, "after a string"),
        ('msgid "a"\nmsgstr "b"\nthis is not gettext\n', 3, "unexpected text"),
        ('#~ msgid "obsolete but broken\n', 1, "unterminated string"),
    ],
)
def test_what_msgfmt_refuses_is_refused_with_file_and_line(text, line, what):
    with pytest.raises(NmtError) as caught:
        check_po_grammar(text, "bad.po")
    message = str(caught.value)
    assert message.startswith(f"bad.po:{line}: ") and what in message and "\n" not in message
