"""Knowing which translations to trust: features of one teacher-forced pass, a calibrated confidence, flags."""
