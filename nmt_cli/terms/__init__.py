"""The user's terminology: glossaries and names kept as written (``glossary.py``), found in sentences
(``matching.py``)."""
