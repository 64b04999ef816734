"""The Transformer: attention, positions, layers, and the encoder-decoder model.

The model takes plain ints (vocabulary sizes, pad id), never vocabulary objects.
"""

from .transformer import Transformer, build_model

__all__ = ["Transformer", "build_model"]
