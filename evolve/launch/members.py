"""A campaign's proposer members as backends: one per ``proposers:`` entry, each built by `make_backend` with its
own spec and options. A frozen member with the same spec as the LoRA-trained one does not load the
weights again: it is a `FrozenAdapterView` of the trained member's backend (the adapter switched off)."""
from __future__ import annotations

from typing import Any, Callable

from proposer.backends.base import Backend

from ..config.schema import CampaignConfig
from ..policies.portfolio import Member

SHAREABLE = ("tiny", "hf")  # kinds whose model is a local torch module the trainer wraps with LoRA in place


def build_members(cfg: CampaignConfig, make: Callable[[str, dict[str, Any]], Backend]
                  ) -> tuple[Backend, list[tuple[Member, Backend]]]:
    """(the backend the trainer and checkpoint follow, [(arm, backend)]) for a run with ``proposers:``.
    ``make(spec, options)`` builds one backend; on a failure the backends already built are closed."""
    from proposer.backends.frozen import FrozenAdapterView

    arms = [m.member() for m in cfg.proposers]
    options = {m.name: m.options for m in cfg.proposers}
    trained = next((a for a in arms if a.train), None)
    built: dict[str, Backend] = {}
    out: list[tuple[Member, Backend]] = []
    try:
        if trained is not None:
            built[trained.name] = make(trained.spec, options[trained.name])
        for a in arms:
            if a.name in built:
                b = built[a.name]
            elif (trained is not None and cfg.train.lora and a.spec.strip() == trained.spec.strip()
                  and _kind(a.spec) in SHAREABLE):
                b = FrozenAdapterView(built[trained.name], name=a.name)
            else:
                b = built[a.name] = make(a.spec, options[a.name])
            out.append((a, b))
    except BaseException:
        for b in built.values():
            _close(b)
        raise
    primary = built[trained.name] if trained is not None else out[0][1]
    return primary, out


def _kind(spec: str) -> str:
    spec = spec.strip()
    return spec if ":" not in spec else spec.partition(":")[0]


def _close(b: Any) -> None:
    close = getattr(b, "close", None)
    if callable(close):
        close()


def close_members(primary: Backend, members: list[tuple[Member, Backend]] | None) -> None:
    """Close every member's backend once (the primary is closed by the runner)."""
    seen = {id(primary)}
    for _, b in members or []:
        if id(b) not in seen:
            seen.add(id(b))
            _close(b)
