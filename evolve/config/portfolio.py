"""The config of a proposer portfolio: the ``proposers:`` members and the ``portfolio:`` section (evolve/config/schema.py
holds them in `CampaignConfig`; the choice policies are in evolve/policies/portfolio.py)."""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..policies.portfolio import CHOICES, Member

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ProposerMember(_Strict):
    """One member: its own proposer spec and its backend's options (as ``proposer.options``; threads and dtype are
    the ``proposer`` section's); only ``train: true`` members are trained."""

    name: str = Field(description="the member's name in exports, curves and reports")
    spec: str = Field(description="tiny | hf:PATH | vllm:PATH | vllm-ray:PATH | openai:URL[,URL...] | replay:FILE")
    train: bool = Field(False, description="trained by the run's train section (at most one member)")
    weight: float = Field(1.0, gt=0, description="portfolio.policy fixed: share of iterations")
    cost: float = Field(1.0, ge=0, description="cost per call, blended in by portfolio.cost_weight")
    temperature: float | None = Field(None, ge=0, description="None: sampling.temperature")
    answers: int | None = Field(None, ge=1, description="m for this member; None: the run's search.answers")
    options: dict[str, Any] = Field(default_factory=dict, description="its backend's own options (as "
                                    "proposer.options)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"member name {v!r}: letters, digits, '_', '.', '-' (up to 64), starting with a "
                             f"letter or digit")
        return v

    @model_validator(mode="after")
    def _options_fit_spec(self) -> "ProposerMember":
        from proposer.backends import check_options

        checked = check_options(self.spec, self.options)
        if checked != self.options:
            object.__setattr__(self, "options", checked)
        return self

    def member(self) -> Member:
        return Member(name=self.name, spec=self.spec, train=self.train, weight=self.weight, cost=self.cost,
                   temperature=self.temperature, answers=self.answers)


class PortfolioConfig(_Strict):
    """How the member proposing each iteration is chosen (evolve/policies/portfolio.py documents reward and decay)."""

    policy: str = Field("ucb", description="a name in evolve.policies.portfolio.CHOICES: fixed, round_robin, ucb, thompson")
    ucb_c: float = Field(0.2, ge=0, description="ucb: exploration constant")
    decay: float = Field(0.98, gt=0, le=1, description="ucb/thompson: weight of an observation per iteration of age")
    epsilon: float = Field(0.05, ge=0, le=1, description="ucb: share spread over the arms that are not the best")
    cost_weight: float = Field(0.0, ge=0, description="ucb/thompson: lambda in score - lambda * cost / max cost")

    @field_validator("policy")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in CHOICES:
            raise ValueError(f"unknown portfolio policy {v!r} (known: {', '.join(CHOICES)})")
        return v


def check_members(members: list[ProposerMember], algo: str) -> None:
    """Cross-field rules (ValueError, one line): unique names, one trained member when training."""
    names = [m.name for m in members]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"'proposers': member name given more than once: {', '.join(dup)}")
    trained = [m.name for m in members if m.train]
    if len(trained) > 1:
        raise ValueError(f"'proposers': at most one member can be trained, got {', '.join(trained)}")
    if members and trained and algo == "none":
        raise ValueError(f"'proposers': member {trained[0]!r} has train: true but train.algo is none")
    if members and algo != "none" and not trained:
        raise ValueError(f"'proposers': train.algo is {algo!r} but no member has train: true")
    for m in members:
        if m.train and m.temperature is not None:
            raise ValueError(f"'proposers': trained member {m.name!r} samples at sampling.temperature (the trainer's "
                             f"importance weights use it); drop its own temperature")
