"""A small OpenAI-compatible server on 127.0.0.1 over a random tiny Llama sampled with transformers (real text,
token ids and log-probs; vLLM's extensions unless ``strict``; failure modes for retries), and the model and LoRA
adapter it serves: for the OpenAI backend, replica and vLLM tests and bench/perf/replica_depth.py."""
from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
MODEL_NAME = "tiny-llama"


# ------------------------------------------------------------------------------------------------ tiny model
def _corpus() -> list[str]:
    out = []
    for i in range(300):
        out.append(f"def f{i % 17}(x, y):\n    return x * {i} + y - {i % 7}\n")
        out.append(f"<answer_1>\n```python\nprint({i} + {i % 5})\n```\n</answer_1>\n")
        out.append(f"Task: add {i} to every element of the list and return it.\n")
    return out


def build_tiny_llama(out: str | os.PathLike[str], seed: int = 0, vocab_size: int = 512) -> Path:
    """A random tiny Llama (~0.2M params, head_dim 64, peaked next-token distributions) + byte-level BPE
    tokenizer with a chat template, saved with save_pretrained to ``out``. Loadable by transformers and vLLM."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from proposer.tiny.tokenizer import train_tokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(_corpus(), vocab_size=vocab_size, model_max_length=512)
    tok.chat_template = CHAT_TEMPLATE
    eos = tok.eos_token_id
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                      bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False,
                      initializer_range=0.25, rms_norm_eps=1e-5)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    model.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def make_lora_adapter(model_dir: str | os.PathLike[str], out: str | os.PathLike[str], seed: int = 1) -> Path:
    """A PEFT LoRA adapter on q/v projections with random (non-zero) A and B, so it changes the outputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                     init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(4.0)
    peft_model.save_pretrained(str(out))
    return Path(out)


class TinyLM:
    """Samples from a transformers causal LM: n rows of one prompt, no padding, no KV cache (it is tiny)."""

    def __init__(self, path: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = path
        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.base = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        self.models = {MODEL_NAME: self.base}
        self.eos = self.tok.eos_token_id
        self.lock = threading.Lock()

    def load_adapter(self, name: str, path: str) -> None:
        import copy

        from peft import PeftModel

        with self.lock:
            self.models[name] = PeftModel.from_pretrained(copy.deepcopy(self.base), path).eval()

    @torch.no_grad()
    def sample(self, model_name: str, prompt_ids: list[int], n: int, max_tokens: int, temperature: float,
               top_p: float, seed: int | None):
        model = self.models[model_name]
        gen = torch.Generator().manual_seed(seed if seed is not None else int(time.time_ns() % 2**31))
        ids = torch.tensor([prompt_ids] * n, dtype=torch.long)
        toks = [[] for _ in range(n)]
        lps = [[] for _ in range(n)]
        done = [False] * n
        with self.lock:
            for _ in range(max_tokens):
                logits = model(input_ids=ids).logits[:, -1, :].float()
                logp = torch.log_softmax(logits, -1)
                if temperature <= 0:
                    nxt = logits.argmax(-1)
                else:
                    probs = torch.softmax(logits / temperature, -1)
                    if top_p < 1:
                        sp, idx = probs.sort(-1, descending=True)
                        sp = sp.masked_fill(sp.cumsum(-1) - sp >= top_p, 0)
                        probs = torch.zeros_like(probs).scatter_(-1, idx, sp)
                    nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                for i in range(n):
                    if not done[i]:
                        toks[i].append(int(nxt[i]))
                        lps[i].append(float(logp[i, nxt[i]]))
                        done[i] = int(nxt[i]) == self.eos
                if all(done):
                    break
                ids = torch.cat([ids, nxt[:, None]], dim=1)
        return [(t, lp, "stop" if d else "length") for t, lp, d in zip(toks, lps, done)]


# ------------------------------------------------------------------------------------------------ the server
STANDARD = {"model", "prompt", "messages", "n", "max_tokens", "temperature", "top_p", "seed", "logprobs",
            "top_logprobs", "stop", "stream", "user", "max_completion_tokens"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "Server"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, obj, headers: dict | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _send_text(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, msg: str, headers: dict | None = None) -> None:
        self._send(status, {"error": {"message": msg, "type": "error", "code": status}}, headers)

    def _enter(self, body) -> bool:
        """Record the request; apply the server's failure script. False: an error was already sent."""
        s = self.server
        with s.state_lock:
            s.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            s.count += 1
            count = s.count
        if s.delay:
            time.sleep(s.delay)
        if s.always_status:
            self._error(s.always_status, f"scripted failure {s.always_status}")
            return False
        if count <= s.fail_first:
            self._error(s.fail_status, "scripted transient failure", {"Retry-After": "0"})
            return False
        return True

    def do_GET(self):
        if not self._enter(None):
            return
        if self.path.rstrip("/") == "/v1/models":
            names = list(self.server.lm.models) if self.server.lm else [MODEL_NAME]
            return self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in names]})
        self._error(404, f"no route {self.path}")

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        s = self.server
        with s.state_lock:  # in flight: from receipt until the answer is ready (counted before it is sent, so a
            s.inflight += 1  # client that reads the answer and sends its next request never sees a stale count)
            s.max_inflight = max(s.max_inflight, s.inflight)
        try:
            ok = self._enter(body)
        finally:
            with s.state_lock:
                s.inflight -= 1
        if not ok:
            return
        if self.path == "/v1/load_lora_adapter":
            s.lm.load_adapter(body["lora_name"], body["lora_path"])  # vLLM answers in plain text
            return self._send_text(200, f"Success: LoRA adapter '{body['lora_name']}' added successfully.")
        if self.path == "/v1/unload_lora_adapter":
            s.lm.models.pop(body["lora_name"], None)
            return self._send_text(200, f"Success: LoRA adapter '{body['lora_name']}' removed successfully.")
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._error(404, f"no route {self.path}")
        chat = self.path.endswith("chat/completions")
        if s.strict:
            unknown = sorted(set(body) - STANDARD)
            if unknown:
                return self._error(400, f"Unrecognized request argument supplied: {unknown[0]}")
        if body.get("model") not in s.lm.models:
            return self._error(404, f"The model `{body.get('model')}` does not exist.")
        return self._send(200, self._generate(body, chat))

    def _generate(self, body, chat: bool):
        lm = self.server.lm
        if chat:
            text = lm.tok.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        else:
            text = body["prompt"]
        prompt_ids = lm.tok(text, add_special_tokens=False)["input_ids"]
        n = min(int(body.get("n", 1)), self.server.cap_n)
        rows = lm.sample(body["model"], prompt_ids, n, int(body.get("max_tokens", 16)),
                         float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)), body.get("seed"))
        as_ids = body.get("return_tokens_as_token_ids")
        choices = []
        for i, (ids, lps, finish) in enumerate(rows):
            shown = ids[:-1] if finish == "stop" else ids
            out_text = lm.tok.decode(shown, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            names = [f"token_id:{t}" if as_ids else lm.tok.decode([t]) for t in ids]
            c = {"index": i, "finish_reason": finish}
            if chat:
                c["message"] = {"role": "assistant", "content": out_text}
                if body.get("logprobs"):
                    c["logprobs"] = {"content": [{"token": nm, "logprob": lp, "bytes": None, "top_logprobs": []}
                                                 for nm, lp in zip(names, lps)]}
            else:
                c["text"] = out_text
                if body.get("logprobs") is not None:
                    c["logprobs"] = {"tokens": names, "token_logprobs": lps,
                                     "top_logprobs": [{nm: lp} for nm, lp in zip(names, lps)],
                                     "text_offset": [0] * len(ids)}
            if body.get("return_token_ids"):
                c["token_ids"] = ids
                if not chat:
                    c["prompt_token_ids"] = prompt_ids
            choices.append(c)
        resp = {"id": "x", "object": "chat.completion" if chat else "text_completion", "created": 0,
                "model": body["model"], "choices": choices}
        if chat and body.get("return_token_ids"):
            resp["prompt_token_ids"] = prompt_ids
        return resp


class Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins handler threads: none is left inside torch at exit

    def __init__(self, lm: TinyLM | None = None, *, strict=False, fail_first=0, fail_status=500, always_status=0,
                 delay=0.0, cap_n=10**9):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lm, self.strict, self.fail_first, self.fail_status = lm, strict, fail_first, fail_status
        self.always_status, self.delay, self.cap_n = always_status, delay, cap_n
        self.state_lock = threading.Lock()
        self.requests: list[dict] = []
        self.count = self.inflight = self.max_inflight = 0
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def handle_error(self, request, client_address):
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # a client that gave up (timeout test) is no error

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
