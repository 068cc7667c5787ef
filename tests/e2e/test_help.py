"""`vevo --help` and every command's help: a one-line description per command, every flag explained, run flags
grouped by config section with their defaults, and `vevo --help` built without the config model."""
from __future__ import annotations

import argparse
import subprocess
import sys

from evolve.cli import build_parser
from tests.campaign_helpers import ROOT, vevo


def _parsers(p: argparse.ArgumentParser, name: str = "vevo"):
    yield name, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub_name, sub in a.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_command_has_a_description_and_every_flag_help():
    top = vevo("--help").stdout
    for name, p in _parsers(build_parser(None)):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for choice in a._choices_actions:
                    assert choice.help, f"{name} {choice.dest}: no one-line description"
                    if name == "vevo":
                        assert choice.help.split()[0] in top, choice.help
            elif a.option_strings and a.dest != "help":
                assert a.help, f"{name} {a.option_strings[0]}: no help text"
                assert "bench/" not in a.help and "docs/results" not in a.help, f"{name} {a.option_strings[0]}"


def test_run_help_groups_flags_by_section_with_defaults():
    text = vevo("run", "--help").stdout
    for group in ("what to solve:", "run:", "seeds:", "proposer section:", "search section:", "sampling section:",
                  "train section:", "executor section:", "portfolio section:", "progress:"):
        assert f"\n{group}" in text, group
    search = text.split("\nsearch section:")[1].split("\n\n")[1]  # after the group's description
    assert "--iterations N" in search and "(default: 50)" in search and "--migration-every N" in search
    assert "--seed N" in text.split("\nrun:")[1].split("section:")[0]
    train = text.split("\ntrain section:")[1].split("\n\n")[1]
    assert "--train-lr X" in train and "(default: 0.001)" in train and "--iterations" not in train
    assert "(default: true)" in text.split("--train-lora ")[1].split("--train")[0]


def test_top_help_does_not_build_the_config_model():
    code = ("import sys; from evolve import cli; cli.build_parser(''); "
            "print('evolve.config' in sys.modules, 'pydantic' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), check=True)
    assert r.stdout.split() == ["False", "False"]
