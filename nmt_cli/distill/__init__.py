"""Sequence-level knowledge distillation (``nmt distill``): a teacher translates the training sources
(``teachers.py``), the pairs it got right make the distilled corpus (``corpus.py``), the student is prepared and
trained on it (``pipeline.py``), and the two are compared (``report.py``)."""
