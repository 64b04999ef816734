"""Scoring through sacreBLEU's Python API (BLEU, chrF, TER, paired significance tests)."""
