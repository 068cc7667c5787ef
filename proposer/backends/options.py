"""Each backend's own options, and what every backend is told about the run.

A backend factory declares an options model (`register_backend(..., options=Model)`); the run config's
``proposer.options`` mapping is validated against the model of the spec's backend, so an option given to a backend
that does not take it is an error naming both. ``Model.kwargs(options, run)`` turns the options and the run's shared
settings (`BackendRun`: chat template, threads, dtype, training, Ray cluster) into the factory's keyword
arguments: what a backend takes lives beside it, not in evolve/.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class BackendRun:
    """The run's settings every backend may use (evolve/ builds it from the run config)."""

    chat: bool | str = "auto"  # chat template + chat prompt style; "auto": when the tokenizer has one
    threads: int | None = None  # torch threads on CPU; None: the backend's default
    dtype: str = "auto"  # weights: auto | float32 | bfloat16 | float16
    trained: bool = False  # a trainer updates this proposer during the run
    lora_rank: int = 8  # the trainer's LoRA rank (an engine serving adapters must accept it)
    ray_address: str | None = None  # the Ray cluster of the run (None: a local one)


class BackendOptions(BaseModel):
    """A backend without options of its own; subclasses add fields and extend `kwargs`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
    flag_prefix: ClassVar[str | None] = None  # `vevo run --PREFIX-OPTION`; None: the backend's spec prefix

    def kwargs(self, run: BackendRun) -> dict[str, Any]:
        return {}


class HFOptions(BackendOptions):
    """tiny and hf:PATH: transformers on this machine."""

    flag_prefix: ClassVar[str | None] = "hf"  # --hf-sampler, for tiny and hf
    sampler: Literal["fast", "general"] = Field(
        "fast", description="fast: the KV-cached plain-torch sampler where the model's layout allows it "
                            "(proposer/backends/fast_sampler.py; else the general loop); general: the transformers "
                            "decode loop always (the sampler of earlier versions, for their exports)")
    products: Literal["auto", "blas", "onednn", "native"] = Field(
        "auto", description="the fast sampler's linear products: blas: torch.mm (MKL); onednn: oneDNN on weights "
                            "packed once per call; native: vevo's AVX-512 kernel for a few rows "
                            "(proposer/backends/native_step.cpp); the last two fp32 on a CPU only. auto: on a CPU "
                            "that is not Intel's native where it runs, else onednn (MKL's decode-step products ran "
                            "~1.5x slower than oneDNN's, ~3x slower than native's there); blas elsewhere "
                            "(proposer/backends/fast_sampler.py choose_products)")
    step: Literal["auto", "python", "native"] = Field(
        "auto", description="the fast sampler's decode step: python; native: the same operators in C++, the same "
                            "bits, built once per machine (fp32 on a CPU only: proposer/backends/native_step.py); "
                            "auto: native where it builds, else python")

    def kwargs(self, run: BackendRun) -> dict[str, Any]:
        kw: dict[str, Any] = {"chat": run.chat, "fast_sampler": self.sampler == "fast", "products": self.products,
                              "step": self.step}
        if run.threads:
            kw["threads"] = run.threads
        if run.dtype != "auto":
            kw["dtype"] = run.dtype
        return kw


class OpenAIOptions(BackendOptions):
    """openai:URL: a server (no options of its own; no tokenizer here to decide chat "auto")."""

    def kwargs(self, run: BackendRun) -> dict[str, Any]:
        return {} if run.chat == "auto" else {"chat": run.chat}


class _EngineOptions(BackendOptions):
    """What every vLLM engine takes (vllm: and vllm-ray:)."""

    flag_prefix: ClassVar[str | None] = "vllm"  # --vllm-tensor-parallel-size, for both

    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="vLLM's share of each of its GPUs; None: 0.85, or (vllm:) 0.5 when a trainer "
        "shares the GPU without sleep")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per vLLM engine")

    def _share(self, run: BackendRun) -> float:
        return 0.85 if self.gpu_memory_utilization is None else self.gpu_memory_utilization

    def kwargs(self, run: BackendRun) -> dict[str, Any]:
        kw: dict[str, Any] = {"chat": run.chat, "dtype": run.dtype, "gpu_memory_utilization": self._share(run),
                              "tensor_parallel_size": self.tensor_parallel_size}
        if run.trained:
            kw["max_lora_rank"] = max(64, run.lora_rank)
        return kw


class VLLMOptions(_EngineOptions):
    """vllm:PATH: the vLLM offline engine in this process."""

    sleep: bool = Field(False, description="vLLM sleep mode: the engine frees its GPU memory during each training "
                        "step (CUDA only)")

    def _share(self, run: BackendRun) -> float:  # the learner shares the engine's GPU
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return 0.5 if run.trained and not self.sleep else 0.85

    def kwargs(self, run: BackendRun) -> dict[str, Any]:
        return {**super().kwargs(run), "enable_sleep_mode": self.sleep}


class VLLMRayOptions(_EngineOptions):
    """vllm-ray:PATH: vLLM engines as Ray actors on the run's cluster (executor.ray_address); the trainer is on the
    driver, not in the engines' GPUs, so no sleep and no smaller share when training."""

    replicas: int = Field(1, ge=1, description="vLLM engines started as Ray actors")
    restarts: int = Field(1, ge=0, description="new actors started for each replica whose actor is lost")

    def kwargs(self, run: BackendRun) -> dict[str, Any]:
        return {**super().kwargs(run), "replicas": self.replicas, "restarts": self.restarts,
                "ray_address": run.ray_address}
