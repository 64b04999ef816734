"""Greedy and beam search on a tiny trained model: equivalences, n-best lists, line alignment."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch

from nmt_cli.data.batches import pad_rows
from nmt_cli.decode.loading import load_model
from nmt_cli.decode.search import beam_search, greedy_search, reference_beam_search
from nmt_cli.decode.translator import Translator
from nmt_cli.errors import NmtError


@pytest.fixture(scope="module")
def loaded(overfit):
    run_dir, _, _ = overfit
    return load_model(run_dir)


def encode(loaded, lines):
    return pad_rows([loaded.src_vocab.encode(line) + [3] for line in lines])


def test_memorised_pairs_translate_back_exactly(loaded, overfit):
    _, src, tgt = overfit
    translator = Translator(loaded, replace(loaded.recipe.decode, beam=1))
    outputs = [hyps[0][0] for hyps in translator.translate(src)]
    assert outputs == tgt


def test_beam_of_one_equals_greedy(loaded, overfit):
    _, src, _ = overfit
    config = replace(loaded.recipe.decode, beam=1, alpha=0.0)
    batch = encode(loaded, src[:16] + ["A dog runs through the grass.", "Two people."])
    greedy = greedy_search(loaded.model, batch, config)
    beam = beam_search(loaded.model, batch, config)
    assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]
    for g, b in zip(greedy, beam):
        assert g[0].score == pytest.approx(b[0].score, abs=1e-5)


@pytest.mark.parametrize("beam, alpha", [(4, 0.6), (3, 0.0)])
def test_cached_equals_uncached(loaded, overfit, beam, alpha):
    _, src, _ = overfit
    config = replace(loaded.recipe.decode, beam=beam, alpha=alpha)
    batch = encode(loaded, src[20:28] + ["A woman in a red coat is walking on the street."])
    cached = beam_search(loaded.model, batch, config, nbest=beam)
    uncached = beam_search(loaded.model, batch, config, nbest=beam, cached=False)
    for a, b in zip(cached, uncached):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        for ha, hb in zip(a, b):
            assert ha.score == pytest.approx(hb.score, abs=1e-5)
    greedy_a = greedy_search(loaded.model, batch, config)
    greedy_b = greedy_search(loaded.model, batch, config, cached=False)
    assert [h[0].tokens for h in greedy_a] == [h[0].tokens for h in greedy_b]


def test_batched_equals_one_by_one(loaded, overfit):
    _, src, _ = overfit
    lines = src[30:40] + ["People are walking.", "A black dog and a white dog are playing with a ball in the park."]
    config = replace(loaded.recipe.decode, beam=4)
    together = beam_search(loaded.model, encode(loaded, lines), config, nbest=2)
    for line, hyps in zip(lines, together):
        alone = beam_search(loaded.model, encode(loaded, [line]), config, nbest=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        for a, b in zip(alone, hyps):
            assert a.score == pytest.approx(b.score, abs=1e-4)


def test_batches_translated_at_once_equal_one_at_a_time(loaded, overfit, monkeypatch):
    """decode.workers: several batches each on a worker thread give the same n-best lists, in input
    order, as one batch at a time (one thread for every product either way, so the same arithmetic);
    sampling, which draws from one generator in sequence, stays in the calling thread."""
    from nmt_cli.decode import translator as translator_module

    _, src, _ = overfit
    lines = src[:20] + ["", "A dog runs on the beach.", "Three people are sitting at a table outside a cafe."]
    ran_in: list[int] = []
    for name in ("search", "sample"):
        real = getattr(translator_module, name)
        monkeypatch.setattr(
            translator_module, name, lambda *a, real=real, **k: ran_in.append(threading.get_ident()) or real(*a, **k)
        )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = replace(loaded.recipe.decode, beam=3, batch_size=4)
        alone = list(Translator(loaded, replace(config, workers=1), nbest=2).translate(lines))
        assert set(ran_in) == {threading.get_ident()} and len(ran_in) == 6
        ran_in.clear()
        together = list(Translator(loaded, replace(config, workers=2), nbest=2).translate(lines))
        assert together == alone
        assert len(set(ran_in)) == 2 and threading.get_ident() not in ran_in
        ran_in.clear()
        sampled = replace(config, workers=2, sampling=True, seed=3)
        first = list(Translator(loaded, sampled).translate(lines))
        assert set(ran_in) == {threading.get_ident()}
        assert list(Translator(loaded, sampled).translate(lines)) == first
    finally:
        torch.set_num_threads(threads)


def test_nbest_is_sorted_and_distinct(loaded):
    config = replace(loaded.recipe.decode, beam=5)
    hyps = beam_search(loaded.model, encode(loaded, ["A man is sitting on a bench.", "Kids."]), config, nbest=5)
    for sentence in hyps:
        assert len(sentence) == 5
        scores = [h.score for h in sentence]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in sentence}) == 5


def test_length_limit_is_respected(loaded, overfit):
    _, src, _ = overfit
    config = replace(loaded.recipe.decode, beam=4, max_len_a=0.0, max_len_b=3)
    for hyps in beam_search(loaded.model, encode(loaded, src[:5]), config):
        assert len(hyps[0].tokens) <= 3


@pytest.mark.parametrize(
    "lines",
    [
        [""],
        ["", "", ""],
        ["A man.", "", "Two dogs play.", "", "", "A long sentence about a woman who walks on a street in a city."],
        [],
    ],
)
def test_empty_lines_keep_alignment_and_order(loaded, lines):
    translator = Translator(loaded, replace(loaded.recipe.decode, beam=2), chunk_lines=2)
    out = [hyps[0][0] for hyps in translator.translate(lines)]
    assert len(out) == len(lines)
    for line, text in zip(lines, out):
        assert (text == "") == (line == "")
    alone = [next(iter(Translator(loaded, replace(loaded.recipe.decode, beam=2)).translate([line])))[0][0] for line in lines]
    assert out == alone


def test_overlong_input_is_truncated_and_counted(loaded):
    translator = Translator(loaded, replace(loaded.recipe.decode, beam=1))
    long_line = " ".join(["dog"] * 400)
    out = list(translator.translate([long_line, "A man."]))
    assert len(out) == 2 and translator.stats.truncated == 1


def test_decoding_records_no_autograd_graph(loaded, overfit):
    """Every decoder layer runs without autograd during translation (no graph kept, no memory held)."""
    _, src, _ = overfit
    seen = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: seen.append(out.hidden.requires_grad or torch.is_grad_enabled()))
        for layer in [*loaded.model.encoder, *loaded.model.decoder]
    ]
    try:
        assert torch.is_grad_enabled()  # the caller's setting: translation must not depend on it
        list(Translator(loaded, loaded.recipe.decode).translate(src[:4]))
    finally:
        for hook in hooks:
            hook.remove()
    assert seen and not any(seen)


@pytest.mark.parametrize("stop, beam, alpha", [("beam", 4, 0.6), ("top", 4, 1.0), ("bound", 3, 0.6), ("beam", 5, 0.0)])
def test_beam_search_equals_plain_reference(loaded, overfit, stop, beam, alpha):
    _, src, _ = overfit
    lines = src[40:46] + ["A little girl climbs into a wooden playhouse.", "Two men."]
    config = replace(loaded.recipe.decode, beam=beam, alpha=alpha, stop=stop)
    batched = beam_search(loaded.model, encode(loaded, lines), config, nbest=2)
    with torch.inference_mode():
        for line, hyps in zip(lines, batched):
            expected = reference_beam_search(loaded.model, encode(loaded, [line]), config, nbest=2)
            assert [h.tokens for h in hyps] == [h.tokens for h in expected], line
            for h, reference in zip(hyps, expected):
                assert h.score == pytest.approx(reference.score, abs=1e-4)


def test_stop_rules_trade_search_for_speed(loaded, overfit):
    _, src, _ = overfit
    batch = encode(loaded, src[50:70])
    best = {
        stop: beam_search(loaded.model, batch, replace(loaded.recipe.decode, beam=4, stop=stop))
        for stop in ("bound", "beam", "top")
    }
    # 'bound' searches longest, so its best hypothesis scores at least as well as the others'.
    for i in range(len(batch)):
        assert best["bound"][i][0].score >= best["beam"][i][0].score - 1e-5
        assert best["beam"][i][0].score >= best["top"][i][0].score - 1e-5


def test_row_blocks_do_not_change_results(loaded, overfit, monkeypatch):
    from nmt_cli.decode import search

    _, src, _ = overfit
    batch = encode(loaded, src[-10:])
    config = replace(loaded.recipe.decode, beam=4)
    whole = beam_search(loaded.model, batch, config, nbest=2), greedy_search(loaded.model, batch, config)
    monkeypatch.setattr(search, "ROW_BLOCK", 3)  # 40 hypothesis rows -> 14 blocks
    blocked = beam_search(loaded.model, batch, config, nbest=2), greedy_search(loaded.model, batch, config)
    for a, b in zip(whole, blocked):
        assert [[h.tokens for h in hyps] for hyps in a] == [[h.tokens for h in hyps] for hyps in b]
        # other row counts may take other matrix kernels: the same scores to float32's rounding, not bit for bit
        scores = [[h.score for h in hyps] for hyps in b]
        assert [[h.score for h in hyps] for hyps in a] == [pytest.approx(row, rel=1e-5, abs=1e-6) for row in scores]


def test_two_stage_top_k_does_not_change_results(loaded, overfit, monkeypatch):
    """The search's two-stage top-k (decode/top_k.py), forced on with small chunks, decodes as ``topk``."""
    from nmt_cli.decode import top_k

    _, src, _ = overfit
    batch = encode(loaded, src[-10:])
    config = replace(loaded.recipe.decode, beam=4)
    plain = beam_search(loaded.model, batch, config, nbest=2), greedy_search(loaded.model, batch, config)
    monkeypatch.setattr(top_k, "TWO_STAGE_MIN_ENTRIES", 0)
    monkeypatch.setattr(top_k, "CHUNK", 3)
    assert loaded.model.output.out_features >= 2 * 2 * config.beam * top_k.CHUNK  # wide enough for two stages
    staged = beam_search(loaded.model, batch, config, nbest=2), greedy_search(loaded.model, batch, config)
    for a, b in zip(plain, staged):
        assert [[h.tokens for h in hyps] for hyps in a] == [[h.tokens for h in hyps] for hyps in b]
        assert [[h.score for h in hyps] for hyps in a] == [[h.score for h in hyps] for hyps in b]


@pytest.mark.parametrize("beam, alpha", [(1, 0.6), (4, 0.6), (3, 0.0)])
def test_fixed_shape_steps_equal_cached_steps(loaded, overfit, monkeypatch, beam, alpha):
    """The CUDA-graph stepper's fixed-shape step, run eagerly here, decodes exactly as the cached one.

    The batch mixes lengths, so sentences finish at different steps and leave the search while
    their slots stay; the first beam step runs one row per sentence.
    """
    from nmt_cli.decode import search as search_module
    from nmt_cli.decode import steppers
    from nmt_cli.decode.static_steps import StaticSteps

    _, src, _ = overfit
    config = replace(loaded.recipe.decode, beam=beam, alpha=alpha)
    batch = encode(loaded, src[30:40] + ["A woman in a red coat is walking on the street.", "Two people."])
    expected = search_module.search(loaded.model, batch, config, nbest=beam)
    made: list[StaticSteps] = []

    def fixed_shape(model, memory, src_mask, config, cached, rows_per_sentence, max_steps):
        made.append(StaticSteps(model, memory, src_mask, rows_per_sentence, max_steps, use_graph=False))
        return made[-1]

    monkeypatch.setattr(steppers, "decoder_steps", fixed_shape)
    got = search_module.search(loaded.model, batch, config, nbest=beam)
    assert len(made) == 1 and made[0].steps_done > 3
    assert made[0].sentence_slots.numel() < batch.size(0)  # sentences did leave the search
    for a, b in zip(expected, got):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        for ha, hb in zip(a, b):
            assert ha.score == pytest.approx(hb.score, abs=1e-4)


def _sampled(loaded, lines, nbest=1, **options):
    config = replace(loaded.recipe.decode, sampling=True, **options)
    return list(Translator(loaded, config, nbest=nbest).translate(lines))


def test_sampling_is_reproducible_and_top_k_one_or_tiny_top_p_is_greedy(loaded, overfit):
    _, src, _ = overfit
    lines = src[:20] + ["A woman in a red coat is walking on the street."]
    greedy = list(Translator(loaded, replace(loaded.recipe.decode, beam=1)).translate(lines))
    for options in ({"top_k": 1}, {"top_p": 1e-6}):
        sampled = _sampled(loaded, lines, **options)
        assert [s[0][0] for s in sampled] == [g[0][0] for g in greedy]
        assert [s[0][1] for s in sampled] == pytest.approx([g[0][1] for g in greedy], abs=1e-4)
    flat = {"temperature": 2.0, "seed": 7}
    first, again = _sampled(loaded, lines, nbest=3, **flat), _sampled(loaded, lines, nbest=3, **flat)
    assert first == again  # same seed, same input, same batching
    other = _sampled(loaded, lines, nbest=3, temperature=2.0, seed=8)
    assert other != first
    for hyps in first:
        texts = [hyp.text for hyp in hyps]
        assert 1 <= len(hyps) <= 3 and len(set(texts)) == len(texts)  # distinct samples
        assert [hyp.score for hyp in hyps] == sorted((hyp.score for hyp in hyps), reverse=True)
    assert any(len(hyps) > 1 for hyps in first)


def test_forced_score_of_the_search_output_is_the_search_score(loaded, overfit):
    from nmt_cli.decode.forced import forced_scores

    _, src, _ = overfit
    lines = src[40:50] + ["A dog runs through the grass."]
    batch = encode(loaded, lines)
    sources = [loaded.src_vocab.encode(line) for line in lines]
    for config in (replace(loaded.recipe.decode, beam=1), replace(loaded.recipe.decode, beam=4, alpha=0.6)):
        found = beam_search(loaded.model, batch, config) if config.beam > 1 else greedy_search(loaded.model, batch, config)
        scores = forced_scores(loaded.model, [(s, h[0].tokens) for s, h in zip(sources, found)], config, torch.device("cpu"))
        assert [r.normalised for r in scores] == pytest.approx([h[0].score for h in found], abs=1e-4)
        assert all(r.tokens == len(h[0].tokens) + 1 and r.total <= 0 for r, h in zip(scores, found))
    wrong = forced_scores(loaded.model, [(sources[0], found[1][0].tokens)], config, torch.device("cpu"))
    assert wrong[0].normalised < found[0][0].score  # another sentence's translation is less likely


def test_sampling_and_forced_scoring_options_fail_in_one_line(loaded, overfit, tmp_path):
    from typer.testing import CliRunner

    from nmt_cli.cli import app

    run_dir, src, _ = overfit
    (tmp_path / "in.txt").write_text("\n".join(src[:3]) + "\n")
    runner = CliRunner()
    for args, message, code in (
        (["translate", "--top-k", "2"], "--top-k applies to sampling; add --sampling", 1),
        (["translate", "--sampling", "--top-p", "1.5"], "--top-p: decode.top_p: 1.5 is out of range; it must be <= 1", 2),
        (["translate", "--sampling", "--temperature", "0"], "--temperature: decode.temperature: 0.0 is out of range", 2),
        (["translate", "--stop", "early"], "--stop: decode.stop: expected one of beam, top, bound, got the text 'early'", 2),
        (["score", "--model", str(run_dir), str(tmp_path / "in.txt")], "give SRC HYP", 1),
    ):
        extra = ["-m", str(run_dir), "-i", str(tmp_path / "in.txt")] if args[0] == "translate" else []
        result = runner.invoke(app, args + extra)
        assert result.exit_code == code and message in result.output and "Traceback" not in result.output, result.output
        assert result.output.count("\n") == 1


def test_a_decoding_flag_and_the_recipe_key_it_overrides_fail_alike(overfit):
    """--beam 0 is checked by the recipe's own rule for decode.beam, so both say the same after the source."""
    from typer.testing import CliRunner

    from nmt_cli.cli import app

    run_dir, _, _ = overfit
    runner = CliRunner()
    flag = runner.invoke(app, ["translate", "-m", str(run_dir), "--beam", "0"], input="A dog.\n")
    recipe = runner.invoke(app, ["config", str(run_dir / "recipe.yaml"), "--set", "decode.beam=0"])
    assert flag.exit_code == recipe.exit_code == 2
    assert flag.output.strip().endswith("--beam: decode.beam: 0 is out of range; it must be >= 1")
    assert recipe.output.strip().endswith("decode.beam: 0 is out of range; it must be >= 1")


def test_an_ensemble_of_a_model_with_itself_is_that_model(loaded, overfit, tmp_path):
    from nmt_cli.decode.ensemble import Ensemble
    from nmt_cli.decode.forced import forced_scores
    from nmt_cli.decode.loading import load_ensemble

    run_dir, src, _ = overfit
    lines = src[:12] + ["A woman in a red coat is walking on the street."]
    pair = load_ensemble([run_dir, run_dir / "model.pt"])
    assert isinstance(pair.model, Ensemble) and len(pair.model.models) == 2
    for config in (
        replace(loaded.recipe.decode, beam=4),
        replace(loaded.recipe.decode, beam=1),
        replace(loaded.recipe.decode, sampling=True, seed=3, temperature=1.5),
    ):
        alone = list(Translator(loaded, config, nbest=2 if config.beam > 1 else 1).translate(lines))
        together = list(Translator(pair, config, nbest=2 if config.beam > 1 else 1).translate(lines))
        assert [[t.text for t in h] for h in together] == [[t.text for t in h] for h in alone]
        assert [t.score for h in together for t in h] == pytest.approx([t.score for h in alone for t in h], abs=1e-4)
    pairs = [(loaded.src_vocab.encode(line), loaded.tgt_vocab.encode("Ein Hund.")) for line in lines]
    config = loaded.recipe.decode
    assert [r.total for r in forced_scores(pair.model, pairs, config, torch.device("cpu"))] == pytest.approx(
        [r.total for r in forced_scores(loaded.model, pairs, config, torch.device("cpu"))], abs=1e-4
    )

    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    payload = torch.load(run_dir / "model.pt", weights_only=True)
    proto = pb.ModelProto()
    proto.ParseFromString(payload["vocab"]["tgt"])
    proto.pieces[10].score -= 1.0  # same size, other pieces' order: another vocabulary
    payload["vocab"]["tgt"] = proto.SerializeToString()
    torch.save(payload, tmp_path / "other.pt")
    with pytest.raises(NmtError, match="have different tgt vocabularies; an ensemble needs one vocabulary"):
        load_ensemble([run_dir, tmp_path / "other.pt"])


def test_target_prefixes_start_the_output_and_empty_ones_change_nothing(loaded, overfit):
    _, src, tgt = overfit
    lines = src[:6]
    prefixes = ["Ein Hund", "", "Zwei Frauen sitzen", "", "Ein", ""]
    for beam in (4, 1):
        config = replace(loaded.recipe.decode, beam=beam)
        plain = [h[0][0] for h in Translator(loaded, config).translate(lines)]
        forced = [h[0][0] for h in Translator(loaded, config).translate(lines, prefixes)]
        for prefix, out, before in zip(prefixes, forced, plain):
            if prefix:
                assert out.startswith(prefix), (prefix, out)
            else:
                assert out == before
    sampled = list(Translator(loaded, replace(loaded.recipe.decode, sampling=True), nbest=2).translate(lines, prefixes))
    assert all(text.startswith(p) for p, hyps in zip(prefixes, sampled) for text, *_ in hyps)
    with pytest.raises(NmtError, match="prefixes end at line 2"):
        list(Translator(loaded, loaded.recipe.decode).translate(lines, prefixes[:2]))


def test_alignments_link_each_output_word_first_then_every_unchosen_source_word(loaded, overfit):
    _, src, _ = overfit
    lines = src[:8] + ["A woman in a red coat is walking on the street."]
    translator = Translator(loaded, loaded.recipe.decode, alignments=True)
    for line, hyps in zip(lines, translator.translate(lines)):
        text, alignment = hyps[0].text, hyps[0].alignment
        pairs = [tuple(map(int, link.split("-"))) for link in alignment.split()]
        n_out = len(text.split())
        assert [j for _, j in pairs[:n_out]] == list(range(n_out))  # each output word's best link, in order
        extra = pairs[n_out:]  # then one link for each source word no output word chose
        assert {i for i, _ in pairs} == set(range(len(line.split()))) and len(extra) == len({i for i, _ in extra})
        assert all(0 <= i < len(line.split()) and 0 <= j < n_out for i, j in pairs)
    with pytest.raises(NmtError, match="--alignment-layer 9: the decoder has"):
        Translator(loaded, loaded.recipe.decode, alignments=True, alignment_layer=9)


def test_attention_maps_and_their_picture(loaded, overfit, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread
    from typer.testing import CliRunner

    from nmt_cli.cli import app
    from nmt_cli.decode.attention_maps import attention_maps

    run_dir, src, _ = overfit
    source = loaded.src_vocab.encode(src[0])
    output = loaded.tgt_vocab.encode("Zwei junge Männer sind draußen.")
    maps = attention_maps(loaded.model, source, output)
    layers, heads = len(loaded.model.decoder), loaded.model.config.n_heads
    assert len(maps.encoder) == len(maps.decoder) == len(maps.cross) == layers
    assert maps.cross[0].shape == (heads, len(output) + 1, len(source) + 1)
    for kind in (maps.encoder, maps.decoder, maps.cross):
        torch.testing.assert_close(kind[-1].sum(dim=-1), torch.ones(kind[-1].shape[:2]))
    assert torch.all(maps.decoder[0].triu(1) == 0)  # causal: no position attends to a later one
    picture = tmp_path / "att.png"
    result = CliRunner().invoke(app, ["attention", "-m", str(run_dir), src[0], "-o", str(picture)])
    assert result.exit_code == 0, result.output
    image = imread(picture)
    assert image.shape[0] > image.shape[1] > 300 and image[..., :3].std() > 0.05


def test_fixed_shape_steps_also_serve_sampling_and_prefixes(loaded, overfit, monkeypatch):
    """On a GPU, sampling and prefixed searches run on the CUDA-graph stepper too: run it eagerly here
    and compare with the cached stepper (same seed, same prefixes)."""
    from nmt_cli.decode import steppers
    from nmt_cli.decode.static_steps import StaticSteps

    _, src, _ = overfit
    lines = src[50:58] + ["Two people."]
    prefixes = ["Ein", "", "Zwei Männer", "", "", "Eine Frau", "", "", "Zwei"]
    cases = [
        (replace(loaded.recipe.decode, sampling=True, seed=5, temperature=1.5), 3, None),
        (replace(loaded.recipe.decode, beam=4), 2, prefixes),
        (replace(loaded.recipe.decode, beam=1), 1, prefixes),
    ]
    expected = [list(Translator(loaded, c, nbest=n).translate(lines, p)) for c, n, p in cases]

    def fixed_shape(model, memory, src_mask, config, cached, rows_per_sentence, max_steps):
        return StaticSteps(model, memory, src_mask, rows_per_sentence, max_steps, use_graph=False)

    monkeypatch.setattr(steppers, "decoder_steps", fixed_shape)  # sampling's steps come from it too
    got = [list(Translator(loaded, c, nbest=n).translate(lines, p)) for c, n, p in cases]
    for before, after in zip(expected, got):
        assert [[t.text for t in h] for h in after] == [[t.text for t in h] for h in before]


def test_lines_keep_their_paths_urls_and_numbers_unless_told_not_to(overfit):
    """A model trained on captions has never seen a path: the line's spans come back exactly, each once."""
    from conftest import nmt_in_process

    run_dir, src, _ = overfit
    spans = ["/etc/passwd", "https://example.org/a.tar.gz", "1,024", "--prefix=/usr/local", "X.509"]
    lines = [f"{src[0]} {spans[0]}", f"{src[1]} {spans[1]} {spans[2]}", f"{spans[3]} {src[2]} {spans[4]}", src[3]]
    kept = nmt_in_process("translate", "-m", run_dir, "--max-len-b", "20", stdin="\n".join(lines) + "\n")
    assert kept.returncode == 0, kept.stderr
    out = kept.stdout.splitlines()
    assert len(out) == len(lines)
    for span in spans:
        assert sum(line.count(span) for line in out) == 1, (span, out)
    plain = nmt_in_process("translate", "-m", run_dir, "--no-protect", "--max-len-b", "20", stdin=src[3] + "\n")
    assert plain.stdout.splitlines() == [out[3]]  # a line with nothing to protect translates as before


def test_a_model_of_one_target_takes_to_naming_it_and_refuses_another(overfit):
    from conftest import nmt_in_process

    run_dir, src, _ = overfit
    same = nmt_in_process("translate", "-m", run_dir, "--to", "deu", "--max-len-b", "5", stdin=src[0] + "\n")
    plain = nmt_in_process("translate", "-m", run_dir, "--max-len-b", "5", stdin=src[0] + "\n")
    assert same.returncode == 0 and same.stdout == plain.stdout
    other = nmt_in_process("translate", "-m", run_dir, "--to", "fr", stdin=src[0] + "\n")
    assert other.returncode == 1 and f"--to fr: {run_dir} translates into de only" in other.stderr


def test_no_search_gives_an_empty_translation_even_where_stopping_at_once_scores_best(loaded, overfit):
    """A model that puts most of its first step's probability on EOS: beam search (offline and joining a running
    batch), greedy search and the plain reference all write at least one token (an empty translation was the
    beam's answer to 1.4% of Multi30k's captions with a 10-minute model)."""
    from nmt_cli.data.vocab import EOS_ID
    from nmt_cli.decode.steering import NoEmptyOutput, Steering, StepRows

    limits = torch.tensor([5, 5, 5])
    first_steps = torch.tensor([0, 1, 0])  # sentences that joined a running batch at different steps
    for t, no_eos in ((0, [True, True, True]), (1, [False, False, False]), (first_steps, [True, False, True])):
        log_probs = Steering([NoEmptyOutput()], StepRows(t, torch.arange(3), 1, limits))(torch.zeros(3, 8))
        assert (log_probs[:, EOS_ID] == float("-inf")).tolist() == no_eos

    class TowardsEOS(torch.nn.Module):
        def __init__(self, projection: torch.nn.Module) -> None:
            super().__init__()
            self.projection, self.out_features = projection, projection.out_features

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            scores = self.projection(hidden)
            scores[..., EOS_ID] += 30.0  # stopping at once is by far the likeliest
            return scores

    model, projection = loaded.model, loaded.model.output
    model.output = TowardsEOS(projection)  # (restored below: the model is the module's)
    try:
        src = encode(loaded, overfit[1][:3])
        config = replace(loaded.recipe.decode, beam=4)
        for hyps in beam_search(model, src, config, nbest=2):
            assert all(len(h.tokens) >= 1 for h in hyps)
        assert all(len(hyps[0].tokens) >= 1 for hyps in greedy_search(model, src, config))
        assert len(reference_beam_search(model, src[:1], config, nbest=1)[0].tokens) >= 1
    finally:
        model.output = projection
