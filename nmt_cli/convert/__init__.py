"""Models trained elsewhere, brought into nmt's layout (issue 43): vocabularies first."""
