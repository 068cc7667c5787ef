"""The ``hf`` backend: a transformers causal LM from a local folder, sampled with our own batched decode loop.

Why a hand-written loop instead of ``model.generate``: we need, per generated token, the behaviour log-prob under
the distribution actually sampled from (what ``proposer.backends.logprobs.completion_logprobs`` computes for PPO), a
per-call ``torch.Generator`` so the same seed gives the same completions without touching the global RNG, and
the same code path for a plain model and a PEFT-wrapped one. The loop is the textbook one: left-padded batch,
position ids from the attention mask, one prefill forward, then one token per step through the KV cache;
the recorded log-prob is ``logprobs.tempered_logprobs``: log_softmax(logits / T) in fp32, renormalised over the
top-p nucleus when top_p < 1 (greedy, T = 0: the T = 1 log-prob). On CUDA a bf16 backend whose weights a
trainer made fp32 decodes under bf16 autocast, as the trainer computes.

Decisions:

* ``n`` completions of a prompt are n rows of the batch (prompt repeated); rows are cut into chunks of
  ``batch_size``. Rows finish independently at an EOS token (it is kept in ``token_ids`` and its log-prob
  recorded, but not in ``text``); a row that reaches ``max_tokens`` finishes with ``"length"``.
* Prompts are left-truncated to fit the context (the end holds ``<answer_1>``): at most
  ``max_context - min(max_tokens, max_context // 2)`` prompt tokens are kept, and generation stops at the context
  end. ``meta["prompt_truncated"]`` says how many tokens were dropped.
* ``chat="auto"`` (the run config's default) is True when the tokenizer has a chat template.
* ``chat=True`` and a tokenizer with a ``chat_template``: the prompt becomes the user turn, and a trailing
  ``<answer_1>`` is moved into a pre-filled assistant turn (``continue_final_message``) so the completion
  continues the answer exactly as with the plain prompt. The tiny model uses the plain prompt.
* Temperature 0 is greedy. Seeded sampling is reproducible on CPU for the same prompts, n and batch_size.
* ``rescore=True`` recomputes the log-probs with ``logprobs.batch_sequence_logprobs`` after generation (one
  extra forward). By default the decode-loop log-probs are used; they agree with it to ~1e-6 in fp32 (bf16 on
  GPU: ~1e-2). Either way the trainer recomputes pi_old itself and uses these only for its IS weight.
* CPU threads: ``threads`` (default min(2, cores)) sets torch's intra-op threads, and the module sets
  ``OMP_WAIT_POLICY=PASSIVE`` (unless set) before importing torch: with evaluation processes competing for
  the cores, spinning OpenMP threads made generation and training steps several times slower here.
* Adapters: ``load_adapter(path, version)`` loads a PEFT LoRA adapter saved with ``save_pretrained`` and makes it
  the only active one (the previous adapter is deleted); the base weights are never touched.
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import itertools
import os
import threading
from pathlib import Path
from typing import Any

# libgomp spin-waits between parallel regions by default; when the cores are shared with busy evaluation
# workers that makes every op wait for a descheduled thread (measured here: a 2-thread step 5-10x slower).
# PASSIVE makes idle OpenMP threads sleep. It only takes effect if torch has not been imported yet.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from proposer.backends import fast_sampler as _fast
from proposer.backends import heap
from proposer.backends.base import TRAINABLE, AdapterState, Completion, SamplingParams
from proposer.backends.templating import encode_prompt, resolve_chat
from proposer.backends.logprobs import nucleus, tempered_logprobs
from proposer.errors import BackendError

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16, "half": torch.float16}


def _resolve_dtype(dtype: Any, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise BackendError(f"hf: unknown dtype {dtype!r} (expected float32, bfloat16 or float16)")


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero out the tail of each row outside the top-p nucleus (``logprobs.nucleus``)."""
    if top_p >= 1.0:
        return probs
    return torch.where(nucleus(probs, top_p), probs, 0.0)


class HFBackend(AdapterState):
    """Backend protocol over a local transformers causal LM (CPU or GPU, optional PEFT adapter)."""

    capabilities = AdapterState.capabilities | {TRAINABLE}

    _state_has_calls = False

    def __init__(self, path: str | os.PathLike[str], device: str | torch.device | None = None,
                 dtype: Any = None, adapter: str | os.PathLike[str] | None = None, batch_size: int = 16,
                 max_context: int | None = None, *, threads: int | None = None, chat: bool | str = False,
                 rescore: bool = False, policy_version: int = 0, name: str | None = None,
                 seed: int | None = None, fast_sampler: bool = True, products: str = "auto",
                 step: str = "auto") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import warnings

        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # no weight-loading progress bars in a campaign's output
        hf_logging.disable_progress_bar()
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise BackendError(f"hf: no model at {self.path} (expected a folder with config.json)")
        self.device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cpu":
            cores = os.cpu_count() or 1
            torch.set_num_threads(max(1, int(threads) if threads else min(2, cores)))
            heap.keep_freed_memory()  # the forwards' freed activations stay in the heap (proposer/backends/heap.py)
        self.dtype = _resolve_dtype(dtype, self.device)
        if batch_size < 1:
            raise BackendError(f"hf: batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.rescore = bool(rescore)
        self.fast_sampler = bool(fast_sampler)  # False: the general transformers loop even where the fast one applies
        try:  # the fast sampler's linear products (fast_sampler.choose_products), resolved once here
            self.products = _fast.choose_products(products, self.device, self.dtype)
            self.step = _fast.choose_step(step, self.device, self.dtype) if self.fast_sampler else "python"
        except ValueError as exc:
            raise BackendError(f"hf: {exc}") from None
        self.seed = seed  # used when a call's SamplingParams has no seed (then calls differ: a counter is added)
        self._calls = 0
        self.name = name or f"hf:{self.path}"
        self.policy_version = int(policy_version)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(self.path), local_files_only=True, dtype=self.dtype)
        except (OSError, ValueError) as exc:
            raise BackendError(f"hf: cannot load {self.path}: {' '.join(str(exc).split())[:200]}") from None
        self._model = model.to(self.device).eval()
        self._tokenizer.padding_side = "left"
        self.chat = resolve_chat(chat, self._tokenizer, "hf")
        self.eos_ids = self._eos_ids()
        if not self.eos_ids:
            raise BackendError(f"hf: {self.path}: tokenizer has no EOS token")
        self.pad_id = self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else min(self.eos_ids)
        ctx = [getattr(model.config, "max_position_embeddings", None)]
        if max_context is not None:
            ctx.append(int(max_context))
        ctx = [c for c in ctx if isinstance(c, int) and c > 0]
        self.max_context = min(ctx) if ctx else 2048
        if self.max_context < 2:
            raise BackendError(f"hf: max_context must be >= 2, got {self.max_context}")
        self._adapter_seq = itertools.count()
        self.adapter_path: str | None = None
        self._pinned: _fast.Weights | None = None  # pin_sampling(): the fast path samples this snapshot
        self._live = threading.local()  # live_sampling(): this thread samples the live model despite a pin
        if adapter is not None:
            self.load_adapter(adapter, self.policy_version)

    # ------------------------------------------------------------------------------------------ properties
    @property
    def model(self) -> torch.nn.Module:
        """The live model (a PeftModel once an adapter is loaded); trainers update it in place."""
        return self._model

    @model.setter
    def model(self, model: torch.nn.Module) -> None:
        """Install a model object (e.g. the trainer wrapped the base in a fresh LoRA with get_peft_model)."""
        self._model, self._pinned = model, None

    @property
    def tokenizer(self):
        return self._tokenizer

    def set_policy_version(self, v: int) -> None:
        """Publish a policy version: completions from now on record it."""
        self.policy_version = int(v)

    def pinnable(self) -> bool:
        """Whether `pin_sampling` pins: not where sampling reads the live model anyway (the general loop, or a
        rescore pass)."""
        return bool(self.fast_sampler and not self.rescore and _fast.supports(self._model))

    def pin_sampling(self) -> bool:
        """Snapshot the policy as it is now and sample only from it until `unpin_sampling`, so a trainer may
        update the live model on another thread meanwhile. False (nothing pinned) where `pinnable` is not."""
        if not self.pinnable():
            return False
        with torch.no_grad():
            self._pinned = _fast.Weights(self._model, self.products, self.step)
        return True

    def unpin_sampling(self) -> None:
        self._pinned = None

    @contextlib.contextmanager
    def live_sampling(self):
        """In this thread only, sample the live model even while a snapshot is pinned: the learner thread
        probes the policy it has just trained while the loop samples the published one."""
        self._live.on = True
        try:
            yield
        finally:
            self._live.on = False

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        if self._tokenizer.eos_token_id is not None:
            ids.add(int(self._tokenizer.eos_token_id))
        gen = getattr(self._model if hasattr(self, "_model") else None, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        for e in (eos if isinstance(eos, (list, tuple)) else [eos]):
            if e is not None:
                ids.add(int(e))
        return ids

    # ------------------------------------------------------------------------------------------- adapters
    def load_adapter(self, path: str | os.PathLike[str], version: int | None = None) -> None:
        """Load a PEFT adapter folder (``save_pretrained`` output) and make it the only active adapter."""
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise BackendError(f"hf: no PEFT adapter at {path} (expected adapter_config.json)")
        from peft import PeftModel

        name = f"a{next(self._adapter_seq)}"
        self._pinned = None
        try:
            if isinstance(self._model, PeftModel):
                old = list(self._model.peft_config)
                self._model.load_adapter(str(path), adapter_name=name, is_trainable=False)
                self._model.set_adapter(name)
                for o in old:
                    self._model.delete_adapter(o)
            else:
                self._model = PeftModel.from_pretrained(self._model, str(path), adapter_name=name,
                                                        is_trainable=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise BackendError(f"hf: cannot load adapter {path}: {' '.join(str(exc).split())[:200]}") from None
        self._model.to(self.device).eval()
        self.adapter_path = str(path)
        if version is not None:
            self.set_policy_version(version)

    def unload_adapter(self, version: int | None = None) -> None:
        """Back to the plain base model."""
        from peft import PeftModel

        self._pinned = None
        if isinstance(self._model, PeftModel):
            self._model = self._model.unload()
        self.adapter_path = None
        if version is not None:
            self.set_policy_version(version)

    # ------------------------------------------------------------------------------------------ prompting
    def encode_prompt(self, prompt: str, max_tokens: int) -> tuple[list[int], int]:
        """(prompt token ids, number of tokens dropped from the left to fit the context)."""
        return encode_prompt(self._tokenizer, prompt, chat=self.chat, max_context=self.max_context, max_tokens=max_tokens)

    # ----------------------------------------------------------------------------------------- generation
    def _forward_kwargs(self) -> tuple[str, bool]:
        base = self._model.get_base_model() if hasattr(self._model, "get_base_model") else self._model
        params = inspect.signature(base.forward).parameters
        return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params

    @torch.no_grad()
    def _decode(self, rows: list[list[int]], sampling: SamplingParams, gen: torch.Generator | None):
        """Sample one continuation per row; returns [(token_ids, logprobs, finished_by_eos)]."""
        dev = self.device
        b = len(rows)
        width = max(len(r) for r in rows)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        att = torch.zeros((b, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            att[i, width - len(r):] = 1
        ids, att = ids.to(dev), att.to(dev)
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        budget = min(int(sampling.max_tokens), self.max_context - width)
        cache_kw, has_keep = self._forward_kwargs()
        extra = {"logits_to_keep": 1} if has_keep else {}
        out = self._model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, **extra)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        logits = out.logits[:, -1, :]
        toks: list[list[int]] = [[] for _ in range(b)]
        lps: list[list[float]] = [[] for _ in range(b)]
        done = [False] * b
        stopped = [False] * b
        eos = torch.tensor(sorted(self.eos_ids), device=dev)
        last_pos = pos[:, -1:]
        temp, top_p = float(sampling.temperature), float(sampling.top_p)
        for step in range(max(budget, 0)):
            logits = logits.float()
            if temp <= 0:
                nxt = logits.argmax(dim=-1)
            else:
                probs = F.softmax(logits / temp, dim=-1)
                probs = _top_p_filter(probs, top_p)
                nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            chosen = tempered_logprobs(logits, nxt, temp, top_p if temp > 0 else 1.0)
            is_eos = torch.isin(nxt, eos)
            nxt_l, lp_l, eos_l = nxt.tolist(), chosen.tolist(), is_eos.tolist()
            for i in range(b):
                if done[i]:
                    continue
                toks[i].append(nxt_l[i])
                lps[i].append(lp_l[i])
                if eos_l[i]:
                    done[i] = stopped[i] = True
            if all(done) or step == budget - 1:
                break
            feed = torch.tensor([self.pad_id if d else t for d, t in zip(done, nxt_l)], device=dev)[:, None]
            att = torch.cat([att, torch.ones((b, 1), dtype=att.dtype, device=dev)], dim=1)
            last_pos = last_pos + 1
            out = self._model(input_ids=feed, attention_mask=att, position_ids=last_pos, use_cache=True,
                              **{cache_kw: cache}, **extra)
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            logits = out.logits[:, -1, :]
        return [(toks[i], lps[i], stopped[i]) for i in range(b)]

    def _fast_decode(self, rows: list[list[int]], sampling: SamplingParams, gen: torch.Generator | None):
        """The fast path (proposer/backends/fast_sampler.py): same contract as ``_decode``."""
        width = max(len(r) for r in rows)
        budget = max(min(int(sampling.max_tokens), self.max_context - width), 0)
        return _fast.sample(self._model, rows, budget, float(sampling.temperature), float(sampling.top_p),
                            self.eos_ids, gen, weights=None if getattr(self._live, "on", False) else self._pinned,
                            products=self.products, step=self.step)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        """For each prompt, n sampled completions (one group)."""
        if n < 0:
            raise ValueError(f"{self.name}: n must be >= 0, got {n}")
        if not 0 < float(sampling.top_p) <= 1:
            raise ValueError(f"{self.name}: top_p must be in (0, 1], got {sampling.top_p}")
        encoded = [self.encode_prompt(p, sampling.max_tokens) for p in prompts]
        rows = [(pi, j) for pi in range(len(prompts)) for j in range(n)]
        gen = None
        seed = sampling.seed if sampling.seed is not None else (
            None if self.seed is None else int(self.seed) * 1_000_003 + self._calls)
        self._calls += 1
        if seed is not None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(int(seed) % (2**63))
        results: dict[tuple[int, int], tuple[list[int], list[float], bool]] = {}
        bf16 = self.device.type == "cuda" and self.dtype == torch.bfloat16
        temp, top_p = float(sampling.temperature), float(sampling.top_p)
        fast = self.fast_sampler and _fast.supports(self._model)
        # the fast path reads weights only; the module's train/eval flag is a trainer's, perhaps on another thread
        toggle = not fast or self.rescore
        was_training = self._model.training
        if toggle:
            self._model.eval()
        try:
            for c in range(0, len(rows), self.batch_size):
                chunk = rows[c: c + self.batch_size]
                if fast:
                    res = self._fast_decode([encoded[pi][0] for pi, _ in chunk], sampling, gen)
                    for key, r in zip(chunk, res):
                        results[key] = r
                    continue
                with torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                    res = self._decode([encoded[pi][0] for pi, _ in chunk], sampling, gen)
                for key, r in zip(chunk, res):
                    results[key] = r
            if self.rescore and rows:
                from proposer.backends.logprobs import batch_sequence_logprobs

                keys = [k for k in rows if results[k][0]]
                for c in range(0, len(keys), self.batch_size):
                    chunk = keys[c: c + self.batch_size]
                    new = batch_sequence_logprobs(self._model, [encoded[pi][0] for pi, _ in chunk],
                                                  [results[k][0] for k in chunk], bf16_autocast=bf16,
                                                  temperature=temp if temp > 0 else 1.0,
                                                  top_p=top_p if temp > 0 else 1.0)
                    for k, lp in zip(chunk, new):
                        results[k] = (results[k][0], lp, results[k][2])
        finally:
            if toggle:
                self._model.train(was_training)
        groups: list[list[Completion]] = []
        for pi in range(len(prompts)):
            ids, dropped = encoded[pi]
            group = []
            for j in range(n):
                toks, lps, stopped = results[(pi, j)]
                body = toks[:-1] if stopped else toks
                text = self._tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                meta: dict[str, Any] = {"backend": "hf"}
                if dropped:
                    meta["prompt_truncated"] = dropped
                group.append(Completion(text=text, policy_version=self.policy_version, token_ids=list(toks),
                                        logprobs=[float(x) for x in lps], prompt_token_ids=list(ids),
                                        finish_reason="stop" if stopped else "length", meta=meta))
            groups.append(group)
        return groups

    # ------------------------------------------------------------------------------------------- bookkeeping
    def close(self) -> None:
        """Drop the model; the backend cannot generate afterwards."""
        self._model = None  # type: ignore[assignment]
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
