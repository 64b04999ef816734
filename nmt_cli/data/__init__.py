"""Corpora, vocabularies, binary datasets, length buckets and batches."""
