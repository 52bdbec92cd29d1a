"""The model each key's latest request named, remembered by this process — so that a request of
a key allowed every model, admitted from its headers before its body names the model
(``proxy.domain.early_admission``), can reserve that model's prior (``proxy.policies.estimate``).

A guess, and only a guess: a key that keeps to one model gets the reservation its body would
get, with no second Lua call once the body is in; a key that changes models has its reservation
raised then (one call), or keeps a dearer model's for that one request. Each process learns on
its own (its first request of a key reserves the key's high-water only). At most
``REMEMBERED_KEYS_AT_MOST`` keys are remembered; past that the oldest is forgotten.
"""

from __future__ import annotations

import threading

REMEMBERED_KEYS_AT_MOST = 10_000

_models: dict[str, str] = {}  # key id -> model, oldest first (dicts keep insertion order)
_lock = threading.Lock()  # the event loops of one process share it


def remember(key_id: str, model: str) -> None:
    """``key_id``'s latest request named ``model`` (alias-resolved)."""
    with _lock:
        if _models.get(key_id) == model:
            return
        _models.pop(key_id, None)
        if len(_models) >= REMEMBERED_KEYS_AT_MOST:
            del _models[next(iter(_models))]
        _models[key_id] = model


def latest(key_id: str) -> str | None:
    """The model ``key_id``'s latest request here named, or None."""
    with _lock:
        return _models.get(key_id)
