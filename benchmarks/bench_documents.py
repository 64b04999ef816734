"""Whether documents come back whole: words inside every element, code, numbers and placeholders exact.

    python benchmarks/bench_documents.py --model nmt-quickstart/model [--nmt "python -m nmt_cli"]

Builds, from the bundled software messages' held-out test split (never used to choose anything):
- tagged lines for ``nmt translate --markup``: random word spans in ``<b>``, ``<uicontrol>`` (nested in a
  ``<menucascade>`` now and then), a ``<tt>`` holding a real path and a number in the running text;
- a gettext catalogue of the test messages that have printf placeholders (``#, c-format``).
Translates both with the ``--nmt`` command (another checkout's interpreter, to compare code versions), and
reports: the share of source elements with words that come back empty (goal 0), code elements and numbers
kept byte for byte (goal 100%), placeholders kept as a multiset and in their order, and, for the same
sentences with word spans tagged, the BLEU of the tag-stripped output against the plain translation's and
the whole-process wall time of each (medians of alternating runs).
"""

from __future__ import annotations

import argparse
import gzip
import html
import random
import re
import shlex
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "nmt_cli" / "sample" / "en-de"
PATHS = ("/etc/shadow", "/usr/lib/x86_64-linux-gnu", "~/.config/autostart", "/var/log/syslog", "C:\\Temp\\out.txt")
NUMBER = re.compile(r"(?<![\w.])\d[\d.,:-]*\d|(?<![\w.])\d(?![\w])")
SEQUENTIAL = re.compile(r"%(?!\d+\$)[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|z|j|t)?[diouxXeEfFgGcsp]")


def read(name: str) -> list[str]:
    with gzip.open(SAMPLE / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def tagged(sentence: str, rng: random.Random, extras: bool = True) -> str:
    words = [w.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for w in sentence.split()]
    a = rng.randrange(len(words))
    b = min(len(words), a + rng.randint(1, 3))
    if rng.random() < 0.3 and b - a >= 2:
        inner = f"<uicontrol>{words[a]}</uicontrol><uicontrol>{' '.join(words[a + 1 : b])}</uicontrol>"
        words[a:b] = [f"<menucascade>{inner}</menucascade>"]
    else:
        name = "b" if rng.random() < 0.5 else "uicontrol"
        words[a:b] = [f"<{name}>{' '.join(words[a:b])}</{name}>"]
    if extras:
        words.insert(rng.randrange(len(words) + 1), f"<tt>{rng.choice(PATHS)}</tt>")
        words.insert(rng.randrange(len(words) + 1), str(rng.choice([3, 42, 443, 2048, 65535])))
    return " ".join(words)


def stripped(line: str) -> str:
    """A tagged line's text as a reader sees it: tags off (siblings written one after the other, such as a
    menu's items, apart), entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"(</[^>]+>)(?=<[^/])", r"\1 ", line)))


def empty_elements(source: str, output: str) -> tuple[int, int]:
    """(source elements with words, of those the ones empty in the output), by element name in order."""
    element = re.compile(r"<(b|uicontrol)>(.*?)</\1>")
    wanted = [m.group(1) for m in element.finditer(source) if re.sub(r"<[^>]+>", "", m.group(2)).strip()]
    found = [m for m in element.finditer(output)]
    empty = sum(1 for m in found if not re.sub(r"<[^>]+>", "", m.group(2)).strip())
    return len(wanted), min(empty, len(wanted))


def numbers(text: str) -> Counter[str]:
    return Counter(NUMBER.findall(re.sub(r"<tt>.*?</tt>|<[^>]+>", " ", text)))


def run(nmt: str, args: list[str], stdin: str | None = None) -> tuple[str, float]:
    started = time.perf_counter()
    done = subprocess.run([*shlex.split(nmt), *args], input=stdin, capture_output=True, text=True, check=True)
    return done.stdout, time.perf_counter() - started


def catalogue(messages: list[str]) -> str:
    def quoted(text: str) -> str:
        return text.replace("\\", "\\\\").replace('"', '\\"')

    header = 'msgid ""\nmsgstr ""\n"Language: de\\n"\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
    return header + "\n".join(f'#, c-format\nmsgid "{quoted(m)}"\nmsgstr ""\n' for m in messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--nmt", default="python -m nmt_cli", help="the command that runs nmt")
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs of the timed pair")
    args = parser.parse_args()
    rng = random.Random(1)
    english, german = read("test.en.gz"), read("test.de.gz")
    usable = [i for i, s in enumerate(english) if len(s.split()) >= 3 and "<" not in s and "&" not in s]
    chosen = rng.sample(usable, min(args.lines, len(usable)))
    sentences = [english[i] for i in chosen]
    lines = [tagged(s, rng) for s in sentences]
    marked, _ = run(args.nmt, ["translate", "-m", args.model, "--markup"], "\n".join(lines) + "\n")
    outputs = marked.splitlines()
    counts = [empty_elements(s, o) for s, o in zip(lines, outputs)]
    with_words, empty = sum(c[0] for c in counts), sum(c[1] for c in counts)
    code = [(re.findall(r"<tt>.*?</tt>", s), o) for s, o in zip(lines, outputs)]
    code_kept = sum(1 for kept, o in code for k in kept if k in o)
    code_total = sum(len(kept) for kept, _ in code)
    number_lines = sum(1 for s, o in zip(lines, outputs) if numbers(s) == numbers(o))
    print(f"tagged lines: {len(lines)}; elements with words {with_words}, empty in the output {empty} "
          f"({100 * empty / max(with_words, 1):.1f}%)")  # fmt: skip
    print(f"code elements kept byte for byte: {code_kept}/{code_total} ({100 * code_kept / max(code_total, 1):.1f}%)")
    print(f"lines whose numbers are the source's: {number_lines}/{len(lines)} ({100 * number_lines / len(lines):.1f}%)")

    # Quality and time of the tags alone: the same sentences with word spans tagged, translated with --markup
    # (output tags stripped) and plain, both scored against the references; runs alternate, medians.
    words_only = [tagged(s, rng, extras=False) for s in sentences]
    times: dict[str, list[float]] = {"markup": [], "plain": []}
    for _ in range(args.repeats):
        marked, seconds = run(args.nmt, ["translate", "-m", args.model, "--markup"], "\n".join(words_only) + "\n")
        times["markup"].append(seconds)
        plain, seconds = run(args.nmt, ["translate", "-m", args.model], "\n".join(sentences) + "\n")
        times["plain"].append(seconds)
    import sacrebleu

    references = [[german[i] for i in chosen]]
    bleu_markup = sacrebleu.corpus_bleu([stripped(o) for o in marked.splitlines()], references).score
    bleu_plain = sacrebleu.corpus_bleu(plain.splitlines(), references).score
    print(f"BLEU against the references: tagged, tags stripped {bleu_markup:.1f}; plain {bleu_plain:.1f}")
    markup_s, plain_s = statistics.median(times["markup"]), statistics.median(times["plain"])
    print(
        f"wall time (whole process, median of {args.repeats} alternating runs), tagged {markup_s:.1f} s vs plain "
        f"{plain_s:.1f} s ({markup_s / plain_s:.2f}x)"
    )

    messages = [m for m in read("test.en.gz") if SEQUENTIAL.search(m) and '"' not in m][: args.lines]
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "app.pot", Path(folder) / "de.po"
        source.write_text(catalogue(messages), encoding="utf-8")
        run(args.nmt, ["translate", "-m", args.model, "-i", str(source), "-o", str(target)])
        import polib

        entries = [e for e in polib.pofile(str(target)) if e.msgid]
    same = sum(1 for e in entries if sorted(SEQUENTIAL.findall(e.msgid)) == sorted(SEQUENTIAL.findall(e.msgstr)))
    ordered = sum(1 for e in entries if SEQUENTIAL.findall(e.msgid) == SEQUENTIAL.findall(e.msgstr))
    flagged = sum(1 for e in entries if "placeholders-reordered" in (e.tcomment or ""))
    print(
        f"c-format messages: {len(entries)}; placeholders kept {same} ({100 * same / len(entries):.1f}%), "
        f"in the source's order {ordered} ({100 * ordered / len(entries):.1f}%), "
        f"reordered and flagged fuzzy {flagged}"
    )


if __name__ == "__main__":
    main()
