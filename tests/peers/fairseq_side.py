"""fairseq's side of the import test, run with a fairseq installation's python (not nmt's).

Usage: python fairseq_side.py CHECKPOINT DATA_BIN SPM_MODEL PAIRS_JSON OUT_JSON
PAIRS_JSON: [[source, target], ...]. OUT_JSON gets, for each pair, fairseq's log-probability of every target
token and of </s> (with fairseq's never-input <s> taken out of the softmax, as the imported model has it),
the same without that (``raw``), and fairseq's greedy translation of the source (at most 10 tokens + </s>).
"""

import json
import os
import sys

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # fairseq 0.12 predates torch's weights_only default

import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
from fairseq import checkpoint_utils  # noqa: E402
from fairseq.sequence_generator import SequenceGenerator  # noqa: E402


def main(checkpoint: str, data_bin: str, spm_model: str, pairs_json: str, out_json: str) -> None:
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data_bin})
    model = models[0].eval()
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    generator = SequenceGenerator([model], tgt_dict, beam_size=1, max_len_a=0, max_len_b=10)
    results = []
    for source, target in json.load(open(pairs_json, encoding="utf-8")):
        src = src_dict.encode_line(" ".join(sp.encode(source, out_type=str)), add_if_not_exist=False).long()[None]
        tgt = tgt_dict.encode_line(" ".join(sp.encode(target, out_type=str)), add_if_not_exist=False).long()
        previous = torch.cat([torch.tensor([tgt_dict.eos()]), tgt[:-1]])[None]
        with torch.no_grad():
            logits, _ = model(src, torch.tensor([src.size(1)]), previous)
            raw = torch.log_softmax(logits[0].float(), -1)
            logits[0, :, tgt_dict.bos()] = float("-inf")
            renormalised = torch.log_softmax(logits[0].float(), -1)
            hyp = generator.forward({"net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}})
        picked = torch.arange(len(tgt)), tgt
        best = hyp[0][0]["tokens"].tolist()
        results.append(
            {
                "log_probs": renormalised[picked].tolist(),
                "raw": raw[picked].tolist(),
                "greedy": sp.decode([tgt_dict[i] for i in best if i != tgt_dict.eos()]),
            }
        )
    json.dump(results, open(out_json, "w", encoding="utf-8"))


if __name__ == "__main__":
    main(*sys.argv[1:6])
