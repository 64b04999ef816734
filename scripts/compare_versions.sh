#!/usr/bin/env bash
# Run the README's commands with two checkouts of nmt on the same inputs and compare what they print
# and write, byte for byte (issue 18: "no behaviour change for users").
#
#   git worktree add /tmp/before <commit>
#   bash scripts/compare_versions.sh /tmp/before . MODEL_DIR [OUT]
#
# MODEL_DIR is a trained run folder (its model.pt); the short training run is recipes/multi30k_ende.yaml
# on ../shared/data, 30 updates in fp32. Exits 1 if anything differs. Optional run folders add their cases:
# RECURRENCE_MODEL and CONCAT_MODEL (manpages_ende_recurrence/_concat.yaml, a few updates: documents in context
# with --docids), MULTI_MODEL (a data.pairs model with en-de among its directions: --to de). With the serve extra,
# the server's answers too (scripts/server_answers.py: text, HTML, files, multilingual, pivoted, context).
set -euo pipefail
before=$(realpath "$1") after=$(realpath "$2") model=$(realpath "$3") out=${4:-/tmp/nmt_compare}
shared=$(realpath "$after/../shared/data/multi30k")
python=${PYTHON:-python}
rm -rf "$out" && mkdir -p "$out"
head -n 100 <(gzip -dc "$shared/test_2016_flickr.en.gz") > "$out/src.en"
head -n 100 <(gzip -dc "$shared/test_2016_flickr.de.gz") > "$out/ref.de"
cut -d' ' -f1-2 "$out/ref.de" > "$out/prefix.de"  # every line's first two reference words as its prefix
printf 'man\tMann\ndog\tHund\nstreet\tStraße\nwoman\tFrau\n' > "$out/glossary.tsv"
manpages=$(realpath "$after/../shared/data/manpages")
head -n 60 <(gzip -dc "$manpages/test.en-de.en.gz") > "$out/doc.en"
head -n 60 <(gzip -dc "$manpages/test.en-de.docids.gz") > "$out/doc.ids"

nmt() { PYTHONPATH="$code" "$python" -c 'import sys; from nmt_cli.cli import main; sys.argv[0] = "nmt"; main()' "$@"; }

for side in before after; do
    code=${!side}
    dir="$out/$side" && mkdir -p "$dir"
    (
        cd "$dir"
        nmt translate -m "$model" -i "$out/src.en" -o beam.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --beam 1 --nbest 1 -o greedy.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --nbest 3 --beam 4 -o nbest.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --alignments -o aligned.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --sampling --top-k 10 --seed 1 -o sampled.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --prefix "$out/prefix.de" -o prefix.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --prefix "$out/prefix.de" --beam 1 -o prefix_greedy.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --glossary "$out/glossary.tsv" --format jsonl -o glossary.jsonl 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --glossary "$out/glossary.tsv" --glossary-mode soft -o soft.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --glossary "$out/glossary.tsv" --beam 1 -o glossary_greedy.de 2> /dev/null
        nmt translate -m "$model" -i "$out/src.en" --confidence --format tsv -o confidence.tsv 2> /dev/null
        if [ -n "${RECURRENCE_MODEL:-}" ]; then
            nmt translate -m "$RECURRENCE_MODEL" -i "$out/doc.en" --docids "$out/doc.ids" -o recurrence.de 2> /dev/null
            nmt translate -m "$RECURRENCE_MODEL" -i "$out/doc.en" --docids "$out/doc.ids" --sampling --seed 3 \
                -o recurrence_sampled.de 2> /dev/null
        fi
        if [ -n "${CONCAT_MODEL:-}" ]; then
            nmt translate -m "$CONCAT_MODEL" -i "$out/doc.en" --docids "$out/doc.ids" -o concat.de 2> /dev/null
        fi
        if [ -n "${MULTI_MODEL:-}" ]; then
            nmt translate -m "$MULTI_MODEL" -i "$out/src.en" --to de --nbest 2 -o multi.de 2> /dev/null
        fi
        nmt score beam.de "$out/ref.de" --metrics bleu,chrf,ter > score.txt
        nmt score --model "$model" "$out/src.en" beam.de > forced.jsonl
        nmt config "$after/recipes/multi30k_ende.yaml" > config.yaml
        nmt translate --help > translate_help.txt
        nmt attention -m "$model" "A man rides a red bike." -o att.png > attention.txt 2>&1 || true
        nmt prepare "$after/recipes/multi30k_ende.yaml" --set data.root="$shared" --set data.output="$dir/data" \
            > /dev/null 2>&1
        nmt train "$after/recipes/multi30k_ende.yaml" --set data.root="$shared" --set data.output="$dir/data" \
            --set train.dir="$dir/model" --set train.max_steps=30 --set train.log_every=5 --set train.precision=fp32 --set train.threads=2 \
            > /dev/null 2>&1
        grep -o '"loss": [0-9.]*' "$dir/model/metrics.jsonl" > train_losses.txt
        if "$python" -c 'import fastapi' 2> /dev/null; then  # the server's answers (the serve extra)
            PYTHONPATH="$code" "$python" "$after/scripts/server_answers.py" --model "$model" -o server.json \
                ${MULTI_MODEL:+--multi "$MULTI_MODEL"} ${RECURRENCE_MODEL:+--context "$RECURRENCE_MODEL"} 2> /dev/null
        fi
    )
done
status=0
for file in "$out"/after/*.*; do
    name=$(basename "$file")
    if cmp -s "$file" "$out/before/$name"; then echo "same       $name"; else echo "DIFFERENT  $name"; status=1; fi
done
exit $status
