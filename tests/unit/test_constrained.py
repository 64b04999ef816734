"""Lexically constrained beam search (decode/constrained.py): every constraint comes out, whole; sentences
without constraints come out as unconstrained beam search gives them; the states track progress as the paper's
banks need it."""

from __future__ import annotations

import pytest
import torch

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.batches import pad_rows
from nmt_cli.data.vocab import EOS_ID
from nmt_cli.decode.constrained import Constraint, ConstraintState, constrained_beam_search
from nmt_cli.decode.search import beam_search, search
from nmt_cli.model.transformer import build_model

VOCAB = 40


def _model():
    torch.manual_seed(3)
    return build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0), VOCAB, VOCAB, 0).eval()


def _sources(rows: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 9, (rows,), generator=generator).tolist()
    return pad_rows([torch.randint(4, VOCAB, (n,), generator=generator).tolist() + [EOS_ID] for n in lengths])


def _holds(tokens: list[int], sequence: tuple[int, ...]) -> int:
    return sum(tuple(tokens[i : i + len(sequence)]) == sequence for i in range(len(tokens) - len(sequence) + 1))


def _constraint(*alternatives: tuple[int, ...]) -> Constraint:
    return Constraint(tuple(alternatives))


def test_a_state_follows_a_term_breaks_off_and_starts_another():
    terms = (_constraint((5, 6, 7)), _constraint((9,), (10, 11)))
    state = ConstraintState.start(terms)
    assert state.wanted(terms) == {5, 9, 10} and state.progress(terms) == 0
    state = state.advance(5, terms).advance(6, terms)
    assert state.current == 0 and state.progress(terms) == 2 and 7 in state.wanted(terms)
    broken = state.advance(10, terms)  # off the first term, onto the second's alternative
    assert broken.current == 1 and broken.matched == (10,) and broken.progress(terms) == 0
    met = broken.advance(11, terms)
    assert met.met == (False, True) and met.current == -1 and met.progress(terms) == 1
    done = met.advance(5, terms).advance(6, terms).advance(7, terms)
    assert done.done and done.progress(terms) == 4
    assert ConstraintState.start(terms).advance(4, terms) == ConstraintState.start(terms)


@pytest.mark.parametrize("beam", [4, 6])
def test_every_constraint_comes_out_whole_and_free_sentences_as_without_constraints(beam):
    model, src = _model(), _sources(6)
    config = DecodeConfig(beam=beam, max_len_a=1.5, max_len_b=5)
    wanted = [
        (_constraint((11, 12, 13)),),
        (),
        (_constraint((20,), (21, 22)), _constraint((30, 31))),
        (),
        (_constraint((7,)), _constraint((7,))),  # one term twice in the source: twice in the output
        (_constraint((15, 16)), _constraint((17,)), _constraint((18, 19, 25))),
    ]
    plain = beam_search(model, src, config, nbest=2)
    found = constrained_beam_search(model, src, config, wanted, nbest=2)
    for constraints, hyps, free in zip(wanted, found, plain):
        assert len(hyps) == 2
        if not constraints:
            assert hyps == free  # tokens and scores, as unconstrained beam search gives them
            continue
        needed: dict[tuple[tuple[int, ...], ...], int] = {}
        for c in constraints:
            needed[c.alternatives] = needed.get(c.alternatives, 0) + 1
        met = [all(sum(_holds(h.tokens, a) for a in alts) >= n for alts, n in needed.items()) for h in hyps]
        assert met[0], hyps[0].tokens
        assert met == sorted(met, reverse=True)  # a hypothesis without every term only after those with them


def test_a_target_prefix_comes_first_and_the_terms_after_or_within_it():
    """With ``prefix``, every output starts with its sentence's prefix and still holds its terms (a term the prefix
    holds counts as met); sentences without terms give what plain beam search with the prefix gives."""
    model, src = _model(), _sources(4, seed=1)
    config = DecodeConfig(beam=4, max_len_a=1.5, max_len_b=5)
    prefix = pad_rows([[8, 9], [14], [8, 9], [33, 12, 5]])
    wanted = [(_constraint((11, 12)),), (), (_constraint((9,)),), (_constraint((20,)), _constraint((21, 22)))]
    found = constrained_beam_search(model, src, config, wanted, nbest=1, prefix=prefix)
    plain = search(model, src, config, nbest=1, prefix=prefix)
    for row, (constraints, (best,)) in enumerate(zip(wanted, found)):
        start = [t for t in prefix[row].tolist() if t]
        assert best.tokens[: len(start)] == start, (row, best.tokens)
        assert all(any(_holds(best.tokens, a) for a in c.alternatives) for c in constraints), (row, best.tokens)
    assert found[1] == plain[1]
    assert found[2][0].tokens == plain[2][0].tokens  # its term is met by its prefix: nothing more is forced


def test_soft_mode_runs_the_plain_beam_with_a_bonus():
    model, src = _model(), _sources(3, seed=1)
    config = DecodeConfig(beam=4)
    wanted = [(_constraint((11, 12)),), (), (_constraint((20,)),)]
    found = constrained_beam_search(model, src, config, wanted, mode="soft")
    plain = beam_search(model, src, config)
    assert found[1] == plain[1]
    assert all(len(h) == 1 for h in found)


def test_the_soft_bonus_decides_which_hypotheses_stay(monkeypatch):
    """A bonus far above any score gap puts every one-token term in the output: the bonus ranks the candidates
    (were it added after they were chosen, a term the model finds unlikely would never be picked)."""
    from nmt_cli.decode import constrained

    monkeypatch.setattr(constrained, "SOFT_BONUS", 50.0)
    model, src = _model(), _sources(6, seed=2)
    plain = beam_search(model, src, DecodeConfig(beam=4))
    unlikely = [next(t for t in range(4, VOCAB) if t not in hyps[0].tokens) for hyps in plain]  # absent without it
    wanted = [(_constraint((token,)),) for token in unlikely]
    found = constrained_beam_search(model, src, DecodeConfig(beam=4), wanted, mode="soft")
    assert all(token in hyps[0].tokens for token, hyps in zip(unlikely, found))


def test_a_translation_holds_a_term_where_a_word_begins():
    term = Constraint(((1,),), "file", ("Datei", "Dateien"))
    assert term.met_by("Die Datei.") and term.met_by("Dateiname") and term.met_by("„Dateien“")
    assert not term.met_by("Die Textdatei") and not term.met_by("Die Akte")


def test_an_ensemble_meets_its_constraints_too():
    from nmt_cli.decode.ensemble import Ensemble

    torch.manual_seed(5)
    other = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0), VOCAB, VOCAB, 0).eval()
    ensemble, src = Ensemble([_model(), other]), _sources(3, seed=2)
    wanted = [(_constraint((11, 12)),), (), (_constraint((20,)), _constraint((21, 22)))]
    found = constrained_beam_search(ensemble, src, DecodeConfig(beam=4), wanted, nbest=2)
    assert (
        _holds(found[0][0].tokens, (11, 12)) and _holds(found[2][0].tokens, (20,)) and _holds(found[2][0].tokens, (21, 22))
    )
    assert found[1] == beam_search(ensemble, src, DecodeConfig(beam=4), nbest=2)[1]


def test_sentences_joining_a_running_batch_meet_their_constraints_as_offline():
    """Continuous batching (nmt serve): sentences with and without constraints join between steps, and each
    comes out as the offline constrained search gives it."""
    from nmt_cli.decode.continuous import ContinuousSearch

    model, src = _model(), _sources(5, seed=4)
    config = DecodeConfig(beam=4)
    wanted = [(_constraint((11, 12)),), (), (_constraint((20,)), _constraint((21, 22))), (), (_constraint((9,)),)]
    offline = constrained_beam_search(model, src, config, wanted, nbest=2)
    sources = [[t for t in row.tolist() if t not in (0, EOS_ID)] for row in src]
    lanes, results, joined = ContinuousSearch(model, config, nbest=2), {}, 0
    while joined < len(sources) or len(lanes):
        if joined < len(sources):  # one or two sentences join at each step
            end = min(len(sources), joined + 1 + joined % 2)
            lanes.add(sources[joined:end], list(range(joined, end)), wanted[joined:end])
            joined = end
        for done in lanes.step():
            results[done.key] = done.hypotheses
    for i, hyps in enumerate(offline):
        assert [h.tokens for h in results[i]] == [h.tokens for h in hyps], i
        assert [h.score for h in results[i]] == pytest.approx([h.score for h in hyps], abs=1e-4)
