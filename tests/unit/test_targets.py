"""A multilingual model's target tags (decode/targets.py): which languages, which tag ``--to`` names."""

from __future__ import annotations

import pytest

from nmt_cli.decode.attention_maps import word_starts
from nmt_cli.decode.targets import language, pick_tag, source_prefix, targets_of
from nmt_cli.errors import NmtError


class Vocab:
    """The two calls the module makes of a SentencePiece processor."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def GetPieceSize(self) -> int:  # noqa: N802 (SentencePiece's name)
        return len(self.pieces)

    def IdToPiece(self, token_id: int) -> str:  # noqa: N802
        return self.pieces[token_id]


TAGGED = Vocab(["<pad>", "<unk>", "<s>", "</s>", ">>deu<<", ">>fra<<", ">>srp_Cyrl<<", ">>srp_Latn<<", "▁Hallo"])


@pytest.mark.parametrize("code, same", [("fr", "fra"), ("fre", "fra"), ("FR", "fr"), ("de", "ger"), ("xx", "xx")])
def test_iso_639_1_and_639_3_codes_are_one_language(code, same):
    assert language(code) == language(same)


@pytest.mark.parametrize("to, tag", [("fr", 5), ("fra", 5), ("fre", 5), ("deu", 4), ("srp_Latn", 7)])
def test_to_picks_the_tag_of_its_language(to, tag):
    assert source_prefix(TAGGED, "", to, "m") == (tag,)


def test_a_language_of_two_tags_an_unknown_one_and_none_are_one_line_each():
    with pytest.raises(NmtError, match=r"--to sr: m has 2 tags for it \(srp_Cyrl, srp_Latn\); give one of them"):
        pick_tag({"srp_Cyrl": 6, "srp_Latn": 7}, "sr", "m")
    with pytest.raises(NmtError, match=r"--to es: m does not translate into it; its targets: deu, fra, srp_Cyrl"):
        source_prefix(TAGGED, "", "es", "m")
    with pytest.raises(NmtError, match=r"m translates into 4 languages: give --to"):
        source_prefix(TAGGED, "", None, "m")


def test_a_model_without_tags_takes_its_own_target_only():
    plain = Vocab(["<pad>", "<unk>", "<s>", "</s>", "▁Hallo"])
    assert source_prefix(plain, "de", None, "m") == () == source_prefix(plain, "de", "deu", "m")
    with pytest.raises(NmtError, match="--to fr: m translates into de only"):
        source_prefix(plain, "de", "fr", "m")
    assert targets_of(plain, "de") == ["de"] and targets_of(TAGGED, "") == ["de", "fr", "sr"]


def test_the_tag_is_no_word_of_the_line_for_alignments():
    # the tag goes with the first word; the words keep their indices
    assert word_starts([">>fra<<", "▁Hello", "▁wor", "ld"]) == [0, *word_starts(["▁Hello", "▁wor", "ld"])] == [0, 0, 1, 1]
