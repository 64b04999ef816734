"""Export of trained models to other inference engines."""
