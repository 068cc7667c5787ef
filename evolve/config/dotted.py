"""Nested config mappings addressed by dotted keys (``train.lr``, ``search.migration.every``): pure helpers shared by
the config (evolve/config/schema.py) and its converter of earlier versions (evolve/config/legacy.py)."""
from __future__ import annotations

from typing import Any


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, mapping into mapping (an override of train.lr keeps train.algo; one of
    search.selection.method keeps search.iterations). Merged proposer options are checked against the final spec."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def unflatten(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"train.lr": 1e-4, "search": {...}} -> nested mappings (a dotted key is a path of sections)."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *path, leaf = str(key).split(".")
        node: dict[str, Any] = {}
        top = node
        for part in path:
            node[part] = {}
            node = node[part]
        node[leaf] = value
        out = merge(out, top)
    return out
