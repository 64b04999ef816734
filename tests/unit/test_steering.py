"""What steers a step (decode/steering.py): a rule given to a search is kept by every strategy and by the server's
continuous batch; a rule before normalising renormalises, one after it leaves the model's scores of the rest."""

from __future__ import annotations

import pytest
import torch

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.batches import pad_rows
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt_cli.decode.constrained import Constraint, constrained_beam_search
from nmt_cli.decode.continuous import ContinuousSearch
from nmt_cli.decode.forced import forced_scores
from nmt_cli.decode.sampling import sample
from nmt_cli.decode.search import search
from nmt_cli.decode.steering import Edit, ForcedTokens, NeverWritten, Specials, Steering, StepRows
from nmt_cli.model.transformer import build_model

VOCAB = 30


def _model():
    torch.manual_seed(5)
    return build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0), VOCAB, VOCAB, 0).eval()


def _sources(rows: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 8, (rows,), generator=generator).tolist()
    return [torch.randint(4, VOCAB, (n,), generator=generator).tolist() for n in lengths]


class Banned:
    """Never these tokens: the one-class example of a new rule."""

    before_normalising = False

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def at(self, step: StepRows) -> Edit:
        def edit(scores: torch.Tensor, rows) -> torch.Tensor:
            scores[:, self.ids] = float("-inf")
            return scores

        return edit


def _most_written(model, sources: list[list[int]], config: DecodeConfig) -> list[int]:
    """The tokens the plain search writes most: the ones a ban changes most."""
    found = search(model, pad_rows([s + [EOS_ID] for s in sources]), config)
    counts = torch.bincount(torch.tensor([t for hyps in found for t in hyps[0].tokens]), minlength=VOCAB)
    return counts.topk(2).indices.tolist()


@pytest.mark.parametrize("beam", [1, 4])
def test_a_rule_given_to_a_search_is_kept_by_greedy_beam_sampling_and_constrained_search(beam):
    model, sources = _model(), _sources(5)
    src = pad_rows([s + [EOS_ID] for s in sources])
    config = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=6)
    banned = _most_written(model, sources, config)
    plain = search(model, src, config)
    steered = search(model, src, config, rules=[Banned(banned)])
    assert any(set(h[0].tokens) & set(banned) for h in plain)  # the ban has something to change
    assert all(not set(h[0].tokens) & set(banned) for h in steered)
    generator = torch.Generator().manual_seed(0)
    drawn = sample(model, src, DecodeConfig(sampling=True, max_len_b=6), 2, generator, rules=[Banned(banned)])
    assert all(not set(h.tokens) & set(banned) for hyps in drawn for h in hyps)
    a, b = [t for t in range(4, VOCAB) if t not in banned][:2]
    terms = [(Constraint(((a, b),)),)] + [()] * (len(sources) - 1)
    bound = constrained_beam_search(model, src, DecodeConfig(beam=4, max_len_b=8), terms, rules=[Banned(banned)])
    assert all(not set(h[0].tokens) & set(banned) for h in bound)
    out = bound[0][0].tokens
    assert any(out[i : i + 2] == [a, b] for i in range(len(out)))  # the term is still met


def test_the_continuous_search_keeps_the_same_rules_as_the_offline_one():
    model, sources = _model(), _sources(4)
    config = DecodeConfig(beam=3, max_len_a=1.0, max_len_b=6)
    banned = _most_written(model, sources, config)
    offline = search(model, pad_rows([s + [EOS_ID] for s in sources]), config, rules=[Banned(banned)])
    running = ContinuousSearch(model, config, rules=[Banned(banned)])
    running.add(sources[:2], [0, 1])
    found = {}
    for finished in running.step():
        found[finished.key] = finished.hypotheses
    running.add(sources[2:], [2, 3])  # joins at a later step
    while len(running):
        found.update({f.key: f.hypotheses for f in running.step()})
    assert [found[i][0].tokens for i in range(4)] == [h[0].tokens for h in offline]


def test_a_rule_before_normalising_renormalises_and_one_after_keeps_the_models_scores():
    logits = torch.randn(2, 10)
    step = StepRows(3, torch.arange(2), 1, torch.tensor([9, 9]))
    after = Steering([Specials()], step)(logits.clone())
    before = Steering([NeverWritten([5, 6])], step)(logits.clone())
    plain = logits.log_softmax(dim=-1)
    allowed = [i for i in range(10) if i not in (PAD_ID, BOS_ID)]
    assert torch.allclose(after[:, allowed], plain[:, allowed])  # what stays allowed keeps its score
    assert torch.allclose(before.exp().sum(dim=-1), torch.ones(2)) and before[:, 5].isinf().all()
    kept = [i for i in range(10) if i not in (5, 6)]
    assert torch.allclose(before[:, kept], logits[:, kept].log_softmax(dim=-1))
    forced = Steering([ForcedTokens(torch.tensor([[0, 0, 0, 7], [0, 0, 0, 0]]))], step)(logits.clone())
    assert forced[0].isinf().sum() == 9 and forced[0, 7] == plain[0, 7]  # PAD: free
    assert not forced[1].isinf().any()


def test_forced_scores_leave_out_what_the_search_never_writes():
    """A translation's score from ``nmt score --model`` is the search's, tokens out of the vocabulary and all."""
    model, sources = _model(), _sources(3)
    config = DecodeConfig(beam=2, max_len_b=5)
    never = [9, 10, 11]
    found = search(model, pad_rows([s + [EOS_ID] for s in sources]), config, rules=[NeverWritten(never)])
    pairs = [(s, hyps[0].tokens) for s, hyps in zip(sources, found)]
    scored = forced_scores(model, pairs, config, torch.device("cpu"), unwritten=never)
    assert [round(s.normalised, 4) for s in scored] == [round(h[0].score, 4) for h in found]
    unsteered = forced_scores(model, pairs, config, torch.device("cpu"))
    assert all(u.total < s.total for u, s in zip(unsteered, scored))
