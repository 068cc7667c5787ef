"""The bundled proposer on a problem whose entry point is not `f`: the renaming (pure) and a real campaign."""
from __future__ import annotations

import json

from evolve.config.schema import load_config
from evolve.launch.runner import start
from proposer.answers.naming import Renaming, entry_name, present, rename_code, rename_text
from proposer.answers.parsing import format_answers
from proposer.answers.scoring import triage
from proposer.answers.prompting import PromptContext, build_prompt
from tests.campaign_helpers import vevo

PARENT = '''"""solve() docs stay as written."""
# EVOLVE-BLOCK-START
def solve(xs):
    # solve is recursive here
    return obj.solve + g(solve=1) + (solve(xs[1:]) if xs else 0)
# EVOLVE-BLOCK-END
'''


def test_rename_touches_identifiers_only_and_round_trips():
    ren = Renaming.make("solve", "f", PARENT)
    shown = ren.to_model(PARENT)
    assert "def f(xs):" in shown and "(f(xs[1:])" in shown
    # strings, comments, attributes and keyword arguments keep the name
    assert '"""solve() docs' in shown and "# solve is" in shown and "obj.solve" in shown and "g(solve=1)" in shown
    assert ren.from_model(shown) == PARENT
    a, b = "a, solve = 1, 2\n", "a, f = 1, 2\n"  # a tuple target at statement level is a variable
    assert rename_code(a, "solve", "f") == b
    assert rename_text("FAIL solve([1, 2]) == 3; see x.solve", "solve", "f") == "FAIL f([1, 2]) == 3; see x.solve"


def test_no_renaming_when_it_would_not_be_exact():
    assert Renaming.make("f", "f", "def f(x): pass") is None          # already the model's name
    assert Renaming.make(None, "f", "print(1)") is None                # stdin/stdout problem
    assert Renaming.make("solve", None, "def solve(x): pass") is None  # the backend knows every name
    assert Renaming.make("solve", "f", "def solve(x):\n    f = 2\n    return f\n") is None  # f taken in the parent
    ren = Renaming.make("solve", "f", "def solve(x): pass")
    # an answer that also uses the problem's name is left as written (renaming would merge two names)
    assert ren.from_model("def f(x):\n    return solve(x)\n") == "def f(x):\n    return solve(x)\n"
    assert entry_name(object()) is None


def test_prompt_shows_the_models_name_and_triage_maps_answers_back():
    ctx = PromptContext(problem_id="p", description="Write solve(xs): the sum.", parent_code=PARENT,
                        parent_vector=[0.0], test_labels=["solve([1, 2]) == 3"],
                        inspirations=[("def solve(xs):\n    return 1\n", [0.0])], m=2)
    ren = Renaming.make("solve", "f", PARENT)
    prompt = build_prompt(present(ctx, ren))
    assert "solve(" not in prompt.replace('"""solve()', "").replace("obj.solve", "").replace("g(solve=", "")
    assert "FAIL f([1, 2]) == 3" in prompt and "Write f(xs)" in prompt
    text = format_answers(["def f(xs):\n    return sum(xs)\n", "def f(xs):\n    return f(xs[:1])\n"])
    tri = triage([text[len("<answer_1>"):]], PARENT, 2, {}, ren)
    codes = [c.code for c in tri.fresh]
    assert len(codes) == 2 and all("def solve(xs):" in c and "def f" not in c for c in codes)
    assert "return solve(xs[:1])" in codes[1] and codes[0].startswith('"""solve() docs')


def test_tiny_proposer_improves_a_scaffolded_problem_named_solve(tmp_path):
    """The newcomer's path: `vevo problems new` (entry point solve), a short seeded campaign with the bundled
    proposer. Before the renaming every candidate failed with "entry point 'solve' is not defined"."""
    vevo("problems", "new", "sq", "--kind", "io", "--dir", str(tmp_path))
    assert "def solve(xs):" in (tmp_path / "sq" / "seed.py").read_text()
    cfg = load_config(None, {"problems_dir": [str(tmp_path)], "proposer.spec": "tiny", "search.iterations": 6,
                             "search.group": 2, "seed": 0, "out": str(tmp_path / "run")})
    _, summary = start(cfg, progress=False)
    best = summary["best"]["sq"]
    seed = json.loads(vevo("problems", "check", str(tmp_path / "sq"), "--json").stdout)["seed"]
    assert best["scalar"] > seed["scalar"], summary
    # the archive holds programs in the problem's names
    r = vevo("runs", "show", str(tmp_path / "run"), "--program", str(best["program_id"]))
    assert "def solve(xs):" in r.stdout and "def f(" not in r.stdout


def test_vevo_train_and_eval_score_answers_in_the_models_names(tmp_path):
    """proposer/answers/scoring.py (vevo train / eval): the seed prompt says f, answers written as f score as solve."""
    from evaluators.pool import SandboxPool
    from proposer.answers.scoring import score_completions, seed_prompt
    from problems.model import load_native
    from problems.scaffold import new_problem

    p = load_native(new_problem("sq", "io", tmp_path))
    text = format_answers(["def f(xs):\n    return sum(x * x for x in xs)\n", "def f(xs):\n    return 0\n"])
    with SandboxPool(workers=1) as pool:
        seed_ev = pool.evaluate(p, p.seed_code)
        assert "def f(xs):" in seed_prompt(p, seed_ev, 2, alias="f") and "solve" not in seed_prompt(p, seed_ev, 2,
                                                                                                     alias="f")
        renamed = score_completions(p, [text], 2, pool, d=3, alias="f").matrices
        as_is = score_completions(p, [text], 2, pool, d=3).matrices
    assert renamed[0].tolist() == [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]
    assert as_is[0].tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # NameError: entry point 'solve'
