"""A MarianMT folder fetched from the HuggingFace hub, only when the user names a hub model on the command line.

``huggingface_hub`` (the ``hub`` extra) downloads into its usual cache (``HF_HUB_CACHE``, ``HF_HOME``) and honours
``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` as every HuggingFace tool does; a second import of the same
name reads the cache. Only the files an import reads are fetched, not the TensorFlow, Flax or Rust copies that
OPUS-MT repositories also hold.
"""

from __future__ import annotations

import os
import re
import socket
import urllib.parse
from pathlib import Path

from ..errors import NmtError

NEEDED = ("config.json", "vocab.json", "source.spm", "target.spm")
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first the repository has
OPTIONAL = ("tokenizer_config.json",)
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def looks_like_hub_name(source: str) -> bool:
    """``owner/name`` that is not a path on this machine."""
    return bool(HUB_NAME.fullmatch(source)) and not Path(source).exists()


def fetch_marian(name: str, revision: str | None = None) -> Path:
    """The local folder holding ``name``'s MarianMT files, downloaded (or found in the cache)."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:
        raise NmtError(
            f"{name}: fetching from the HuggingFace hub needs huggingface_hub: pip install 'nmt-cli[hub]'"
        ) from None

    endpoint = os.environ.get("HF_ENDPOINT") or None
    # Without a route to the hub, only the cache is read: huggingface_hub would retry each file five times over
    # half a minute, printing each retry, before the same answer.
    cached_only = not _reachable(endpoint or "https://huggingface.co")

    def get(filename: str) -> Path:
        return Path(
            hf_hub_download(
                repo_id=name,
                filename=filename,
                revision=revision,
                endpoint=endpoint,
                cache_dir=os.environ.get("HF_HUB_CACHE") or None,
                local_files_only=cached_only,
            )
        )

    try:
        folder = get(NEEDED[0]).parent
        for filename in NEEDED[1:]:
            get(filename)
        for filename in WEIGHTS:
            try:
                get(filename)
                break
            except EntryNotFoundError:
                continue
        else:
            raise NmtError(f"{name}: the repository holds neither {' nor '.join(WEIGHTS)}; is it a MarianMT model?")
        for filename in OPTIONAL:
            try:
                get(filename)
            except EntryNotFoundError:
                pass
    except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: the network, not the repository
        raise NmtError(
            f"{name}: could not fetch it (no connection to the hub, or HF_HUB_OFFLINE, and it is not in the cache); "
            "check the network or give a local folder"
        ) from None
    except RepositoryNotFoundError:
        raise NmtError(f"{name}: no such model on the hub (or it is private: set HF_TOKEN)") from None
    except EntryNotFoundError as err:
        raise NmtError(f"{name}: {_first_line(err)}; is it a MarianMT model (config.json, vocab.json, *.spm)?") from None
    except (HfHubHTTPError, OSError) as err:  # no network, a proxy's refusal, HF_HUB_OFFLINE with nothing cached
        raise NmtError(
            f"{name}: could not fetch it ({_first_line(err)}); check the network or give a local folder"
        ) from None
    return folder


def _reachable(endpoint: str, seconds: float = 5.0) -> bool:
    """Whether a connection to ``endpoint``'s host opens (a name that does not resolve, a closed network: no)."""
    address = urllib.parse.urlparse(endpoint)
    port = address.port or (443 if address.scheme == "https" else 80)
    try:
        socket.create_connection((address.hostname or "", port), timeout=seconds).close()
    except (OSError, ValueError):
        return False
    return True


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
