"""A campaign's trained policy, loaded back for `vevo eval --run RUN [--version V]`.

The campaign trainer (evolve/training/campaign.py) keeps each training step in ``RUN/trainer/step-I-vV/``: the
trainable tensors (``weights.pt``: the LoRA adapter, or every weight with ``train.lora`` false) and, for LoRA, the
adapter in PEFT form; ``RUN/trainer/state.json`` names the newest. Only the two newest snapshots are kept, so
the policy versions one can load are those two and version 0 (the run's proposer before any step). Loading
rebuilds the run's proposer from its own config, wraps it as the trainer did (the same LoRA shape) and puts the
saved tensors in, so it generates as the campaign's proposer did at that version.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from problems.errors import VevoError

from ..config.schema import CampaignConfig, load_run_config


class PolicyError(VevoError):
    """A policy that cannot be loaded from a run folder; one line."""


def run_config(run_dir: str | Path) -> CampaignConfig:
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise PolicyError(f"{run_dir}: not a run directory (no config.yaml)")
    return load_run_config(path)


def snapshots(run_dir: str | Path) -> dict[int, Path]:
    """Policy version -> its complete snapshot folder, for the versions the run still keeps."""
    out: dict[int, Path] = {}
    for p in (Path(run_dir) / "trainer").glob("step-*-v*"):
        v = p.name.rpartition("-v")[2]
        if p.is_dir() and v.isdigit() and (p / "weights.pt").is_file():
            out[int(v)] = p
    return out


def final_version(run_dir: str | Path) -> int:
    """The run's newest policy version (0: never trained)."""
    st = Path(run_dir) / "trainer" / "state.json"
    if not st.is_file():
        return 0
    try:
        return int(json.loads(st.read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PolicyError(f"{st}: unreadable ({e})") from None


def load_policy(run_dir: str | Path, version: int | None = None) -> tuple[Any, CampaignConfig, int]:
    """(backend, the run's config, the version loaded): the run's proposer at policy ``version`` (None: the
    final one; in a portfolio, its trained member's policy). PolicyError when the version is not kept."""
    from proposer.backends import make_backend
    from proposer.backends.base import ADAPTERS, TRAINABLE, has

    from .runner import backend_kwargs

    cfg = run_config(run_dir)
    spec, options = cfg.proposer.spec, cfg.proposer.options
    if cfg.proposers:  # a portfolio: its trained member is the policy the trainer kept (else its first member)
        m = next((m for m in cfg.proposers if m.train), cfg.proposers[0])
        spec, options = m.spec, m.options
    want = final_version(run_dir) if version is None else int(version)
    kept = snapshots(run_dir)
    if want != 0 and want not in kept:
        have = ", ".join(str(v) for v in sorted({0, *kept}))
        raise PolicyError(f"{run_dir}: policy version {want} is not kept (kept: {have}; the trainer keeps the two "
                          f"newest)")
    backend = make_backend(spec, **backend_kwargs(cfg, spec, options))
    if want == 0 or cfg.train.algo == "none":
        return backend, cfg, 0
    snap = kept[want]
    if has(backend, TRAINABLE):
        import torch

        from ..training.setup import trainable_model

        backend.model = trainable_model(backend.model, cfg)
        sd = torch.load(snap / "weights.pt", map_location="cpu", weights_only=True)
        names = {n for n, p in backend.model.named_parameters() if p.requires_grad}
        if names - set(sd):
            raise PolicyError(f"{snap}: saved weights do not match the model ({len(names - set(sd))} trainable "
                              f"tensors missing)")
        backend.model.load_state_dict({k: v for k, v in sd.items() if k in names}, strict=False)
        backend.model.eval()
        backend.set_policy_version(want)
    elif has(backend, ADAPTERS) and (snap / "adapter").is_dir():
        backend.load_adapter(snap / "adapter", want)
    else:
        raise PolicyError(f"{snap}: proposer {spec!r} can take neither the saved weights nor an "
                          f"adapter")
    return backend, cfg, want
