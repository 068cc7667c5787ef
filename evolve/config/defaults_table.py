"""`vevo defaults`: every run-config key with its default, its flag and what it does, generated from the config
models (evolve/config/schema.py) as `vevo run --help` is, so the defaults are one table instead of prose in several
documents. docs/DEFAULTS.md is this table as markdown; a test keeps it equal to what the models generate."""
from __future__ import annotations

from typing import Any

DOC = "docs/DEFAULTS.md"


def shown(value: Any) -> str:
    """A default as YAML writes it (true, null, 0.001), so the table reads like a config file."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("\n...").strip()


def rows() -> list[tuple[str, str, str, str, str]]:
    """(help section, dotted key, default, flag, description) for every run flag, in `vevo run --help` order."""
    from .schema import run_flags

    return [(f.group, f.key, shown(f.default), f"--{f.flag}", " ".join(f.help.split())) for f in run_flags()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The table as docs/DEFAULTS.md holds it: one section per help group, one row per key."""
    from .schema import flag_groups

    groups = flag_groups()
    out = ["# Run-config defaults", "",
           "Generated from the config models (evolve/config/schema.py) by `vevo defaults --markdown > docs/DEFAULTS.md`; a "
           "test fails when this file and the models disagree. Each key is a YAML key of a run config, a "
           "`--set KEY=VALUE` key and the flag beside it. `proposers` (a portfolio, YAML only) is in "
           "docs/ARCHITECTURE.md.", ""]
    by_group: dict[str, list[tuple[str, str, str, str, str]]] = {}
    for r in rows():
        by_group.setdefault(r[0], []).append(r)
    for g in list(groups) + [g for g in by_group if g not in groups]:
        if g not in by_group:
            continue
        title, text = groups.get(g, (g, ""))
        out += [f"## {title}", ""] + ([_cell(text), ""] if text else [])
        out += ["| key | default | flag | what it does |", "|---|---|---|---|"]
        out += [f"| `{k}` | `{_cell(d)}` | `{fl}` | {_cell(h)} |" for _, k, d, fl, h in by_group[g]]
        out.append("")
    return "\n".join(out)


def text() -> str:
    """The table for a terminal: key, default, flag, description; one line per key."""
    rs = rows()
    wk = max(len(r[1]) for r in rs)
    wd = min(24, max(len(r[2]) for r in rs))
    wf = max(len(r[3]) for r in rs)
    return "\n".join(f"{k:<{wk}}  {d:<{wd}}  {fl:<{wf}}  {h}" for _, k, d, fl, h in rs)
