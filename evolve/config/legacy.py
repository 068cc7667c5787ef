"""THE converter from the run config of earlier versions to today's sections — the only place old keys live.

Before the config had `proposer`, `search` and `executor` sections it had flat keys (``train_lr``, ``temperature``,
``selection: lexicase``, ``vllm_sleep``), top-level ``iterations``/``answers``/``group``/``proposer_*``, a ``selection``
section holding island capacity and migration, a ``sandbox`` section and ``train.covrl_*``. Run folders and
archives written then still hold that shape. `upgrade` turns such a mapping into today's; it is used where a stored
config is read back (`vevo resume`, seeds folders, `runs show`, `report`, `ui`, curves), never for what a user
writes: a YAML file, a flag or an override with an old key is an error naming the new key (`legacy_keys`).
"""
from __future__ import annotations

from typing import Any

from .dotted import merge, unflatten

# the earlier sections' keys, and the flat spelling each had (a section's primary key was the section's name)
_OLD_SECTIONS: dict[str, tuple[str, ...]] = {
    "selection": ("method", "lexicase_epsilon", "tournament_size", "inspirations", "island_capacity",
                  "migration_every", "migration_count"),
    "sampling": ("answer_mode", "temperature", "top_p", "max_tokens", "chat", "reasoning"),
    "train": ("algo", "every", "batch", "group", "lr", "lora", "epochs", "reward", "replay_older",
              "minibatch", "micro_batch", "clip_eps", "kl_beta", "is_cap", "max_grad_norm", "weight_decay",
              "lora_rank", "lora_alpha", "lora_targets", "max_seq_len", "grad_checkpointing", "autocast",
              "probe_every", "probe_problems", "probe_group", "covrl_alpha", "covrl_clip_eps", "covrl_nll_coef",
              "covrl_kl_coef", "covrl_std_norm", "covrl_reason_tokens", "covrl_share"),
    "sandbox": ("workers", "eval_timeout", "unsafe_no_sandbox"),
    "executor": ("kind", "ray_address"),
    "portfolio": ("policy", "ucb_c", "decay", "epsilon", "cost_weight"),
}
_OLD_PRIMARY = {"selection": "method", "train": "algo", "executor": "kind", "portfolio": "policy"}
_OLD_FLAT_PREFIX = {"train": "train_", "portfolio": "portfolio_"}
_OLD_TOP = {"proposer_threads": "proposer.threads", "proposer_dtype": "proposer.dtype",
            "vllm_gpu_memory_utilization": "proposer.options.gpu_memory_utilization",
            "vllm_sleep": "proposer.options.sleep",
            "vllm_tensor_parallel_size": "proposer.options.tensor_parallel_size",
            "vllm_replicas": "proposer.options.replicas", "vllm_restarts": "proposer.options.restarts",
            **{k: f"search.{k}" for k in ("iterations", "islands", "answers", "group", "retire_solved",
                                          "pipeline_depth")}}


def _new_key(section: str, key: str) -> str:
    """The dotted key today of an earlier section's key."""
    if section == "selection":
        if key == "island_capacity":
            return "search.island_capacity"
        if key.startswith("migration_"):
            return "search.migration." + key[len("migration_"):]
        return "search.selection." + key
    if section == "sandbox":
        return "executor." + key
    if section == "train" and key.startswith("covrl_"):
        return "train.covrl." + key[len("covrl_"):]
    return f"{section}.{key}"


def _old_flat() -> dict[str, str]:
    out = dict(_OLD_TOP)
    for sec, keys in _OLD_SECTIONS.items():
        for key in keys:
            flat = sec if _OLD_PRIMARY.get(sec) == key else _OLD_FLAT_PREFIX.get(sec, "") + key
            out[flat] = _new_key(sec, key)
    return out


OLD_FLAT: dict[str, str] = _old_flat()  # an earlier flat (or top-level) key -> its dotted key today


def _moves(data: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(old key, new dotted key, value) for every key of ``data`` in an earlier spelling."""
    out = []
    for k, v in data.items():
        if k == "proposer" and not isinstance(v, dict):
            out.append((k, "proposer.spec", v))
        elif k in ("selection", "sandbox") and isinstance(v, dict):
            out += [(f"{k}.{kk}", _new_key(k, kk), vv) for kk, vv in v.items()]
        elif k == "train" and isinstance(v, dict):
            out += [(f"train.{kk}", _new_key("train", kk), vv) for kk, vv in v.items() if kk.startswith("covrl_")]
        elif k in OLD_FLAT and not isinstance(v, dict):
            out.append((k, OLD_FLAT[k], v))
    return out


def legacy_keys(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(old key, new key) for every key of a config mapping in an earlier spelling (empty: today's shape)."""
    return [(old, new) for old, new, _ in _moves(data)]


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A stored config mapping of any earlier version in today's shape (today's shape comes back unchanged).

    A portfolio run's vLLM options were shared by its members: each member whose backend takes them gets them."""
    moves = _moves(data)
    if not moves:
        return data
    moved = {old.partition(".")[0] for old, _, _ in moves}
    out = {k: v for k, v in data.items() if k not in moved or k == "train"}
    if isinstance(out.get("train"), dict):
        out["train"] = {k: v for k, v in out["train"].items() if not k.startswith("covrl_")}
    elif "train" in out:
        del out["train"]
    out = merge(out, unflatten({new: v for _, new, v in moves}))
    options = out.get("proposer", {}).get("options") or {}
    if out.get("proposers") and options:
        out["proposer"]["options"] = {}
        out["proposers"] = [{**m, "options": _taken(m.get("spec", ""), options)} if isinstance(m, dict) else m
                            for m in out["proposers"]]
    elif options:
        out["proposer"]["options"] = _taken(out["proposer"].get("spec", "tiny"), options)
    return out


def _taken(spec: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options a spec's backend takes; old configs held every vllm_* key whatever the proposer was."""
    from proposer.backends import options_model

    fields = options_model(str(spec)).model_fields
    return {k: v for k, v in options.items() if k in fields}
