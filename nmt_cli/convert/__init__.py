"""Models trained elsewhere, brought into nmt's layout: vocabularies first."""
