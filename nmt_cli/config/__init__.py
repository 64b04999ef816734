"""The recipe: one typed, frozen configuration tree, loaded from YAML.

A recipe describes data, vocabulary, model, training and decoding. Defaults are the
Transformer base setup of Vaswani et al. (2017) and are declared here once, in the
section dataclasses. A recipe may inherit another (``base: other.yaml``, resolved relative to
the inheriting file) and any value may be overridden with dotted keys
(``--set model.layers=3``). Every error names the recipe file and the key path.

The recipe is declared by section, one module each (``data``, ``model``, ``train``, ``decode``); ``recipe`` joins
them and checks the rules across them, ``loading`` reads and writes YAML, ``reference`` explains the keys.
"""

from .data import PAIR, CleanConfig, DataConfig, DownloadSource, VocabConfig, parse_pair
from .decode import DecodeConfig
from .distill import DistillConfig
from .loading import dump_recipe, load_recipe, override_section, recipe_from_dict, recipe_to_dict
from .model import ModelConfig
from .recipe import Recipe, require_data, validate
from .reference import KeyReference, field_help, key_reference, option_help
from .train import TrainConfig

__all__ = [
    "PAIR",
    "CleanConfig",
    "DataConfig",
    "DecodeConfig",
    "DistillConfig",
    "DownloadSource",
    "KeyReference",
    "ModelConfig",
    "Recipe",
    "TrainConfig",
    "VocabConfig",
    "dump_recipe",
    "field_help",
    "key_reference",
    "load_recipe",
    "option_help",
    "override_section",
    "parse_pair",
    "recipe_from_dict",
    "recipe_to_dict",
    "require_data",
    "validate",
]
