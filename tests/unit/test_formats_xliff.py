"""XLIFF 1.2 and 2.x (``formats/xliff.py``): targets written for untranslated segments, inline codes kept,
everything else in the file as it was; no DTD or entity is ever loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

etree = pytest.importorskip("lxml.etree", reason="lxml is in the files extra")

from nmt_cli.errors import NmtError  # noqa: E402
from nmt_cli.formats import translate_bytes  # noqa: E402

V12 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="fr" datatype="html" original="page.html">
    <body>
      <trans-unit id="1">
        <source>Click <g id="1">this link</g> to continue.</source>
      </trans-unit>
      <trans-unit id="2">
        <source>Press <x id="2"/> then <bpt id="3">&lt;b&gt;</bpt>Save<ept id="3">&lt;/b&gt;</ept>.</source>
        <target></target>
        <note>a note</note>
      </trans-unit>
      <group translate="no"><trans-unit id="3"><source>Brand</source></trans-unit></group>
      <trans-unit id="4"><source>Done</source><target>Fertig</target></trans-unit>
    </body>
  </file>
</xliff>
"""

V20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en">
 <file id="f1">
  <unit id="u1">
   <segment>
    <source>Open <pc id="1">the file</pc> <ph id="2"/> now.</source>
   </segment>
   <segment><source>Second segment.</source></segment>
  </unit>
 </file>
</xliff>
"""

NS1 = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
NS2 = {"x": "urn:oasis:names:tc:xliff:document:2.0"}


def upper(sentences: list[str]) -> list[str]:
    return [s.upper() for s in sentences]


def codes(element) -> list[tuple[str, dict, str | None]]:
    """The inline codes: name, attributes, and the native code inside those that hold some."""
    native = ("ph", "bpt", "ept", "it")
    return [
        (etree.QName(e).localname, dict(e.attrib), e.text if etree.QName(e).localname in native else None)
        for e in element.iter()
        if e is not element
    ]


def test_xliff_12_targets_keep_inline_codes_and_states_say_machine_translation():
    out, count = translate_bytes(V12.encode(), Path("a.xlf"), upper, "en", "de")
    assert count == 2 and out.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n')
    root = etree.fromstring(out)
    assert root.find("x:file", NS1).get("target-language") == "de"
    units = {u.get("id"): u for u in root.iter(f"{{{NS1['x']}}}trans-unit")}
    for unit_id in ("1", "2"):
        source, target = units[unit_id].find("x:source", NS1), units[unit_id].find("x:target", NS1)
        assert codes(target) == codes(source)  # same inline codes, same ids, native code as written
        assert "".join(target.itertext()).replace("<B>", "").strip()
        assert target.get("state") == "needs-review-translation" and target.get("state-qualifier") == "mt-suggestion"
    assert "".join(units["1"].find("x:target", NS1).itertext()) == "CLICK THIS LINK TO CONTINUE."
    assert units["3"].find("x:target", NS1) is None  # translate="no" on its group
    assert units["4"].find("x:target", NS1).text == "Fertig"  # already translated: left alone
    assert units["2"].find("x:note", NS1).text == "a note"


def test_xliff_20_segments_and_retranslate_and_no_fuzzy():
    out, count = translate_bytes(V20.encode(), Path("b.xliff"), upper, "en", "de", fuzzy=False)
    root = etree.fromstring(out)
    assert count == 2 and root.get("trgLang") == "de"
    segments = list(root.iter(f"{{{NS2['x']}}}segment"))
    assert [s.get("state") for s in segments] == ["translated", "translated"]
    first = segments[0].find("x:target", NS2)
    assert codes(first) == codes(segments[0].find("x:source", NS2))
    assert "".join(first.itertext()) == "OPEN THE FILE  NOW."
    again, count = translate_bytes(out, Path("b.xliff"), lambda xs: [x.lower() for x in xs], "en", "de", retranslate=True)
    assert count == 2 and b"second segment." in again


def test_malformed_or_hostile_xliff_is_refused_in_one_line(tmp_path: Path):
    with pytest.raises(NmtError, match=r"a.xlf:3: not well-formed XML"):
        translate_bytes(b'<?xml version="1.0"?>\n<xliff>\n<file></xliff>\n', Path("a.xlf"), upper, "en", "de")
    with pytest.raises(NmtError, match="not an XLIFF 1.2 or 2.x document"):
        translate_bytes(b"<html/>", Path("a.xlf"), upper, "en", "de")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    hostile = (
        f'<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY e SYSTEM "file://{secret}">]>\n'
        '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file source-language="en">'
        "<body><trans-unit id='1'><source>a &e; b</source></trans-unit></body></file></xliff>"
    )
    out, _ = translate_bytes(hostile.encode(), Path("h.xlf"), upper, "en", "de")
    assert b"TOP SECRET" not in out
