"""What a document's reader must find unchanged: placeholders of every kind, code, paths and numbers.

The translators here are functions that do what real models do wrong (reorder, mangle, drop), so each
case says exactly what must come back.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nmt_cli.formats import translate_bytes
from nmt_cli.formats.placeholders import placeholders, repair
from nmt_cli.formats.protect import mask, protected_spans
from nmt_cli.formats.segments import translate_texts

polib = pytest.importorskip("polib", reason="polib is in the files extra")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("%<PRIu32> of %-8<PRId64>", ["%<PRIu32>", "%-8<PRId64>"]),
        ("%(current)li of %(total)d", ["%(current)li", "%(total)d"]),
        ("{name!r:>10} {0} {}", ["{name!r:>10}", "{0}", "{}"]),
        ("%Y-%m-%d %H:%M", ["%Y", "%m", "%d", "%H", "%M"]),
        ("%1 and %L2 files", ["%1", "%L2"]),
        ("{count, plural, one {# file} other {# files}} left", ["{count, plural, one {# file} other {# files}}"]),
        ("%1$s %2$d %-10.3f %lx %% %*d", ["%1$s", "%2$d", "%-10.3f", "%lx", "%%", "%*d"]),
        ("50% done", []),
    ],
)
def test_every_placeholder_form_is_one_placeholder(text, expected):
    assert placeholders(text) == expected


def test_a_repair_substitutes_a_broken_placeholder_in_place():
    assert repair("Package '%(pkgname)s' removed", "Paket »%(pkgnamename)s« entfernt") == "Paket »%(pkgname)s« entfernt"
    assert repair("{count} files", "{countcount Dateien") == "{count} Dateien"
    assert repair("between %d and %.2f", "zwischen %.2l und %d") == "zwischen %.2f und %d"
    assert repair("%s is 100% done", "%s ist zu 100 % fertig") == "%s ist zu 100 % fertig"  # text, not a fragment


def test_code_paths_urls_options_identifiers_and_numbers_are_protected():
    text = (
        "Edit /etc/shadow or ~/.config/app.yaml, run make --prefix=/usr -j 4, see https://example.org/a?b=1. "
        "Call foo_bar() or Foo::bar in config.yaml; mail a.b@example.org; 2001-2022 and 65535 and UTF-8, e.g. and/or."
    )
    found = [text[a:b] for a, b in protected_spans(text)]
    assert found == [
        "/etc/shadow",
        "~/.config/app.yaml",
        "--prefix=/usr",
        "-j",
        "4",
        "https://example.org/a?b=1",
        "foo_bar()",
        "Foo::bar",
        "config.yaml",
        "a.b@example.org",
        "2001-2022",
        "65535",
        "UTF-8",
    ]


def test_masks_never_collide_with_the_sentences_own_placeholders():
    masked = mask("Copy %s to /tmp/%d.log (%u times)")
    assert "%s" in masked.text and "/tmp" not in masked.text
    assert len(set(masked.originals)) == len(masked.originals) and not set(masked.originals) & {"%s"}
    assert masked.restore(masked.text) == "Copy %s to /tmp/%d.log (%u times)"


def test_numbers_come_back_as_the_source_has_them_whatever_the_model_does():
    def mangle(sentences: list[str]) -> list[str]:
        # a model that drops one mask and reorders the others: the repair puts every one back
        return [" ".join(reversed(s.split()[1:])) for s in sentences]

    source = "Between 1 and 65535 in 2001-2022 at 3.5 GHz"
    out = translate_texts([source], mangle, "en")[0]
    numbers = Counter(w.strip(".,") for w in out.split() if any(c.isdigit() for c in w))
    assert numbers == Counter(["1", "65535", "2001-2022", "3.5"])


def catalogue(entries: str, charset: str = "UTF-8") -> bytes:
    header = f'msgid ""\nmsgstr ""\n"Language: de\\n"\n"Content-Type: text/plain; charset={charset}\\n"\n\n'
    return (header + entries).encode("latin-1" if charset.lower() != "utf-8" else "utf-8")


def po(data: bytes, translate) -> polib.POFile:
    out, _ = translate_bytes(data, Path("app.po"), translate, "en", "de")
    return polib.pofile(out.decode("utf-8", "replace")), out


def test_a_c_format_entry_with_its_conversions_reordered_is_fuzzy_with_a_flag():
    entry = '#, c-format\nmsgid "Adding user \'%s\' (%d)"\nmsgstr ""\n'
    swapped, _ = po(catalogue(entry), lambda xs: ["Benutzer (%d) »%s« hinzufügen" for _ in xs])
    assert "fuzzy" in swapped[0].flags and "placeholders-reordered" in swapped[0].tcomment
    kept, _ = translate_bytes(catalogue(entry), Path("app.po"), lambda xs: ["Benutzer »%s« (%d)" for _ in xs], "en", "de")
    entry_out = polib.pofile(kept.decode())[0]
    assert "placeholders-reordered" not in (entry_out.tcomment or "")


def test_a_gtk_mnemonic_is_read_without_its_mark_and_put_on_the_translation():
    seen: list[str] = []

    def translate(xs):
        seen.extend(xs)
        return ["Datei öffnen" for _ in xs]

    out, _ = po(catalogue('msgid "_Open File"\nmsgstr ""\n'), translate)
    assert seen == ["Open File"] and out[0].msgstr == "_Datei öffnen"  # no word starts with O: the first


def test_a_latin1_catalogue_gets_typographic_quotes_in_their_nearest_form(caplog):
    data = catalogue('msgid "Say \\"hi\\""\nmsgstr ""\n', "ISO-8859-1")
    catalogue_out, raw = po(data, lambda xs: ["Sag „hallo“ – größer" for _ in xs])
    text = raw.decode("latin-1")
    assert "charset=ISO-8859-1" in text and 'Sag \\"hallo\\" - größer' in text
    assert "nearest form" in caplog.text


def test_a_character_with_no_nearest_form_makes_the_catalogue_utf8(caplog):
    data = catalogue('msgid "Price"\nmsgstr ""\n', "ISO-8859-1")
    _, raw = po(data, lambda xs: ["Preis in €" for _ in xs])
    text = raw.decode("utf-8")
    assert "charset=UTF-8" in text and "Preis in €" in text and "UTF-8" in caplog.text


def test_an_ascii_page_without_a_charset_stays_ascii():
    page = b"<html><body><p>Hello world</p></body></html>"
    out, _ = translate_bytes(page, Path("a.html"), lambda xs: ["Grüße „Welt“" for _ in xs], "en", "de")
    assert out.isascii() and "&#" in out.decode()


def test_a_tab_inside_a_line_comes_back_as_a_tab():
    masked = mask("Name:\tValue of %s\t\t(default)")
    assert "\t" not in masked.text  # the model reads a mask, a word of its own
    # the model kept the masks, with or without spaces around them, or dropped one
    for translation in (
        masked.text.replace("Value of", "Wert von").replace("default", "Standard"),
        "Name:%d Wert von %s %u(Standard)",
        "Name: Wert von %s %u (Standard)",
    ):
        restored = masked.restore(translation)
        assert restored.count("\t") == 3 and "\t\t(" in restored and restored.startswith("Name:\t")
    # a tab at a line break is indentation: left to the format
    assert mask("first line\n\tsecond line").originals == {}


def test_an_entry_with_printf_conversions_reordered_is_flagged_without_a_format_flag():
    entry = 'msgid "format error at %s:%u"\nmsgstr ""\n'  # no c-format flag: real templates rarely carry one
    out, _ = po(catalogue(entry), lambda xs: ["Formatfehler bei %u:%s" for _ in xs])
    assert "fuzzy" in out[0].flags and "placeholders-reordered" in out[0].tcomment


def test_a_changed_conversion_is_mended_whole():
    entry = 'msgid "%2.2f of %s"\nmsgstr ""\n'
    out, _ = po(catalogue(entry), lambda xs: ["%d.2f von %s" for _ in xs])  # the model's "%d" and a ".2f" left over
    assert out[0].msgstr == "%2.2f von %s"


def test_prose_with_a_percent_sign_is_not_a_format():
    entry = 'msgid "50% done, 10% left"\nmsgstr ""\n'
    out, _ = po(catalogue(entry), lambda xs: ["10 % übrig, 50 % fertig" for _ in xs])
    assert "placeholders-reordered" not in (out[0].tcomment or "")


def test_an_entry_given_back_unchanged_is_flagged_untranslated():
    entries = 'msgid "UncompOffset"\nmsgstr ""\n\nmsgid "%s: %d"\nmsgstr ""\n'
    out, _ = po(catalogue(entries), lambda xs: list(xs))
    by_id = {entry.msgid: entry for entry in out}
    assert "untranslated" in by_id["UncompOffset"].tcomment and "fuzzy" in by_id["UncompOffset"].flags
    assert "untranslated" not in (by_id["%s: %d"].tcomment or "")  # nothing in it to translate


def test_a_copy_is_trusted_little_even_where_the_model_is_sure_and_a_lone_tag_is_text():
    """`<incomplete>` given back was not flagged (its words sat in a "tag"); a copy kept the model's confidence
    1.00 while it was flagged. Now both are untranslated, fuzzy, and at most the copy ceiling."""
    from nmt_cli.formats import translate_bytes as translate
    from nmt_cli.formats.gettext import COPY_CEILING
    from nmt_cli.formats.segments import Sentences, TextConfidence
    from nmt_cli.quality.flag_names import COPY_CEILING as QUALITY_CEILING

    assert COPY_CEILING == QUALITY_CEILING  # formats sit below quality: one figure, named twice
    entries = 'msgid "<incomplete>"\nmsgstr ""\n\nmsgid "Open"\nmsgstr ""\n'
    sure = Sentences(
        lambda xs: list(xs), assess=lambda xs: [(x if x == "<incomplete>" else "Öffnen", TextConfidence(1.0)) for x in xs]
    )
    out, _ = translate(catalogue(entries), Path("app.po"), sure, "en", "de", fuzzy_below=0.5)
    by_id = {entry.msgid: entry for entry in polib.pofile(out.decode("utf-8"))}
    copied, translated = by_id["<incomplete>"], by_id["Open"]
    assert "fuzzy" in copied.flags and "untranslated" in copied.tcomment and f"{COPY_CEILING:.2f}" in copied.tcomment
    assert "fuzzy" not in translated.flags and "1.00" in translated.tcomment


@pytest.mark.parametrize(
    "source, model_wrote, expected",
    [
        ("Use --robot for machines.", "Nutze %s-Maschinen.", "Nutze --robot Maschinen."),  # code: never compounded
        ("The X.509 certificate.", "Das %szertifikat.", "Das X.509 zertifikat."),
        ("The X.509 certificate.", "Das %s-Zertifikat.", "Das X.509-Zertifikat."),  # a number heads a compound
        (
            "Done %(current)li of %(total)li",
            "Fertig %(current)liurrent(lili) von %(total)li",
            "Fertig %(current)li von %(total)li",
        ),
        ("Size [%<PRIu64>] bytes", "Größe [%<PRIu64>64PRIP>] Bytes", "Größe [%<PRIu64>] Bytes"),
        ("Open /srv/1 and /srv/10 now.", "Öffne %s und %d jetzt.", "Öffne /srv/1 und /srv/10 jetzt."),
        ("Version 2.1-beta is out.", "Version %s ist da.", "Version 2.1-beta ist da."),  # the source's own glue
    ],
)
def test_what_the_model_glued_onto_a_kept_span_is_taken_off(source, model_wrote, expected):
    from nmt_cli.formats.protect import mask_line

    masked = mask_line(source)
    assert masked.restore(model_wrote) == expected


@pytest.mark.parametrize(
    "text, spans",
    [
        ("adduser [--firstuid id] [--user username]", ["--firstuid", "--user"]),  # after a bracket
        ("{--verbose} or (--quiet)", ["--verbose", "--quiet"]),
        ("Unknown-15 device, GID=-1, .5s", ["15", "-1", ".5s"]),  # after a hyphen, a sign, a dot
        ("see the module[^python] now", ["[^python]"]),  # a footnote glued to its word
        ("Mail <ftpmaster@ubuntu.com> or <https://x.org/a>", ["<ftpmaster@ubuntu.com>", "<https://x.org/a>"]),
        ("Open C:\\Program Files\\App\\app.exe now.", ["C:\\Program Files\\App\\app.exe"]),  # a folder with a space
        ("PKCS #11 uses 50% of RAM", ["#11", "50%"]),
        # a name credited with its address is kept; prose before an address is not a name
        ("Written by Colin Watson <cjwatson@debian.org>.", ["Colin Watson", "<cjwatson@debian.org>"]),
        ("Thanks to Jean-Luc van Picard (jl@x.org)", ["Jean-Luc van Picard", "jl@x.org"]),
        ("Report bugs to <bugs@x.org>", ["<bugs@x.org>"]),
        ("Copyright © 2001-2004, 2007 Colin Watson. All", ["© 2001-2004, 2007 Colin Watson"]),
        ("Copyright (C) 1999 Free Software Foundation, Inc.", ["(C) 1999 Free Software Foundation"]),
        ("and/or e-mail on-line", []),  # words of prose hold no span
    ],
)
def test_a_span_is_found_wherever_it_stands(text, spans):
    assert [text[a:b] for a, b in protected_spans(text)] == spans


@pytest.mark.parametrize(
    "translation, kept",
    [
        ("Öffne /etc/hosts mit 2 Editoren.", True),
        ("Öffne /etc/host mit 2 Editoren.", False),  # changed
        ("Öffne /etc/hosts /etc/hosts mit 2 Editoren.", False),  # repeated
        ("Öffne /etc/hostsdatei mit 2 Editoren.", False),  # a word glued on
        ("Öffne mit 2 Editoren.", False),  # lost
        ("Öffne /etc/hosts mit zwei Editoren.", False),  # the number written out
    ],
)
def test_a_translation_keeps_its_spans_only_when_each_is_there_as_often_and_unglued(translation, kept):
    from nmt_cli.formats.protect import keeps_spans

    assert keeps_spans("Open /etc/hosts with 2 editors.", translation) is kept
