"""Small archive records (evaluations, groups of completions, seed programs) for the tests that fill an archive."""
from evaluators.types import Evaluation
from evolve.archive import CompletionRecord, GroupRecord, ProgramRecord


def ev(vector, solved=None, status=None):
    vector = [float(x) for x in vector]
    scalar = sum(vector) / len(vector) if vector else 0.0
    solved = all(x == 1.0 for x in vector) if solved is None else solved
    return Evaluation(vector=vector, scalar=scalar, solved=solved, status=status or ("ok" if solved else "wrong"))


def group(problem="p", island=0, parent_id=None, n=2, m=2, version=0, d=3):
    comps = [CompletionRecord(idx=i, text=f"text {i}", answers=[f"a{i}{j}" for j in range(m)],
                              answer_vectors=[[float(j == 0)] * d for j in range(m)], policy_version=version,
                              sampling={"temperature": 1.0}, token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3],
                              prompt_token_ids=[7, 8])
             for i in range(n)]
    return GroupRecord(problem=problem, island=island, parent_id=parent_id, prompt=f"prompt for {problem}", m=m,
                       completions=comps, policy_version=version)


def seed_program(problem="p", island=0, vector=(0, 0, 0), code=None):
    return ProgramRecord(problem=problem, island=island, code=code or f"def f(): return {problem!r}",
                         evaluation=ev(vector))
