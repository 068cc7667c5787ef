"""The fast sampler's C++ operators (proposer/backends/native_step.cpp). Its decode step: the Python step's bits,
tokens and log-probs, in every layout the sampler runs; chosen where it builds, the Python step (with a one-line
reason) where it cannot; the run config's ``proposer.options.step`` reaches every snapshot. Its ``native`` linear
products: the same matrices, packed; the products of torch.mm to fp32's noise, each row's the same whatever
the batch holds."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from proposer.backends import TINY_CHECKPOINT, make_backend, native_step  # noqa: E402
from proposer.backends import fast_sampler as fs  # noqa: E402
from proposer.training.lora import wrap_lora  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled checkpoint"),
              pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler")]
PRODUCTS = ["blas", pytest.param("onednn", marks=pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                                                    reason="this torch has no oneDNN")),
            pytest.param("native", marks=pytest.mark.skipif(not native_step.avx512(), reason="no AVX-512"))]


def _built() -> None:
    """A compiler's error fails (the source is broken); a machine that cannot build for want of a tool or a
    writable cache skips, as the sampler runs there without it."""
    if native_step.load() is None:
        why = native_step.reason()
        assert "error:" not in why, why
        pytest.skip(why)


@pytest.fixture(scope="module")
def models():
    """The bundled model with a LoRA (random B: the merge is not the identity), and a random Qwen2 with q/k/v
    biases and grouped-query heads."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _built()
    be = make_backend("tiny", threads=1)
    torch.manual_seed(0)
    lora = wrap_lora(be.model, rank=8)
    for n, p in lora.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0.0, 0.05)
    long = be.encode_prompt("def f(xs):\n    # EVOLVE-BLOCK-START\n    return sum(x * x for x in xs)\n"
                            "    # EVOLVE-BLOCK-END\n# the sum of squares\n<answer_1>", 200)[0]
    short = be.encode_prompt("# sort the list\n<answer_1>", 200)[0]
    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=256)).eval()
    return {"tiny lora": (lora, long, short, be.eos_ids), "qwen2 biases": (qwen, [5, 9, 13, 2, 7, 7, 1], [4, 4, 8],
                                                                            {96})}


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("layout", ["one prompt", "two prompts"])
@pytest.mark.parametrize("case", ["tiny lora", "qwen2 biases"])
@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (0.7, 0.9), (1.0, 1.0)])
def test_the_native_step_gives_the_python_steps_bits(models, case, layout, products, temperature, top_p):
    model, long, short, eos = models[case]
    rows = [long] * 8 if layout == "one prompt" else [long] * 5 + [short] * 3
    eos = eos if temperature > 0 else {-1}  # greedy rows run the whole budget; sampled ones end apart (compactions)
    got = {}
    for step in ("python", "native"):
        w = fs.Weights(model, products, step)
        assert w.step == step
        got[step] = fs.sample(model, rows, 120, temperature, top_p, eos, torch.Generator().manual_seed(7), weights=w)
    assert got["native"] == got["python"]  # tokens, log-probs (floats compared exactly), finished flags
    assert sum(len(g[0]) for g in got["native"]) > 40, [len(g[0]) for g in got["native"]]


def test_the_step_choice():
    """auto: native for fp32 CPU weights where it builds; python elsewhere; a bad choice, or native where it cannot
    run, is a one-line error, from the backend too."""
    from proposer.errors import BackendError

    _built()
    assert fs.choose_step("auto", "cpu", torch.float32) == "native"
    assert fs.choose_step("auto", "cpu", torch.float64) == "python"
    assert fs.choose_step("python", "cpu", torch.float32) == "python"
    assert fs.choose_step("native", "cpu", torch.float32) == "native"
    for bad, msg in ((("cuda-graphs", "cpu", torch.float32), "step must be one of auto, python, native, got "),
                     (("native", "cpu", torch.float64), "step native needs fp32 weights on a CPU")):
        with pytest.raises(ValueError, match=msg) as err:
            fs.choose_step(*bad)
        assert "\n" not in str(err.value)
    with pytest.raises(BackendError, match="^hf: fast sampler: step must be one of") as err:
        make_backend("tiny", threads=1, step="jit")
    assert "\n" not in str(err.value)
    assert make_backend("tiny", threads=1, fast_sampler=False).step == "python"  # the general loop builds nothing


def test_where_it_cannot_be_built_the_python_step_runs(tmp_path):
    """No compiler (CXX names none) and an empty extension cache: ``auto`` samples with the Python step and logs why
    once, in one line; ``native`` is a one-line backend error. A real build, in a fresh process."""
    code = ("import torch\nfrom proposer.backends import fast_sampler as fs, make_backend\n"
            "from proposer.backends.base import SamplingParams\n"
            "be = make_backend('tiny', threads=1)\nprint('step', be.step)\n"
            "print('gen', len(be.generate(['def f(x):'], 2, SamplingParams(max_tokens=4, seed=0))[0]))\n"
            "try:\n    make_backend('tiny', threads=1, step='native')\n"
            "except Exception as e:\n    print('error', type(e).__name__, str(e))\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-compiler"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["step python", "gen 2"]
    assert lines[2].startswith("error BackendError hf: fast sampler: step native: cannot build the C++ decode step")
    warned = [ln for ln in out.stderr.splitlines() if "the Python decode step runs" in ln]
    assert len(warned) == 1 and "cannot build the C++ decode step" in warned[0]


@pytest.mark.skipif(not native_step.avx512(), reason="no AVX-512")
@pytest.mark.parametrize("case", ["tiny lora", "qwen2 biases"])
def test_native_products_are_the_blas_weights_packed(models, case):
    """Each packed matrix is W^T in panels, bit for bit (a width not a multiple of 16, the Qwen2's 97-token head,
    stays W^T); the product of the identity gives W^T back exactly; at 1 to 37 rows (full and partial blocks of 8)
    the products are torch.mm's to fp32's noise, with the biases, and a row's bits do not depend on the rows
    beside it (the sampler's rows stay reproducible as others finish)."""
    model = models[case][0]
    with torch.no_grad():
        blas, nat = fs.Weights(model, "blas", "python"), fs.Weights(model, "native", "python")
    pairs = [(a, b) for la, lb in zip(blas.layers, nat.layers)
             for a, b in zip((la.qkv, la.o, la.gate_up, la.down), (lb.qkv, lb.o, lb.gate_up, lb.down))]
    packed_any = False
    for (wt, bias), (packed, nbias) in pairs + [(blas.head, nat.head)]:
        assert (bias is None and nbias is None) or torch.equal(bias, nbias)
        if wt.shape[1] % 16:
            assert torch.equal(packed, wt)
            continue
        packed_any = True
        assert packed.dim() == 3 and torch.equal(packed.permute(1, 0, 2).reshape(wt.shape), wt)
        assert torch.equal(fs._lin(torch.eye(wt.shape[0]), (packed, None)), wt)
        x = torch.randn(37, wt.shape[0], generator=torch.Generator().manual_seed(0))
        for rows in (1, 3, 8, 9, 16, 37):
            got = fs._lin(x[:rows], (packed, nbias))
            assert torch.allclose(got, fs._lin(x[:rows], (wt, bias)), rtol=1e-5, atol=1e-5)
            assert torch.equal(got[rows - 1:], fs._lin(x[rows - 1:rows], (packed, nbias)))
    assert packed_any
