from pathlib import Path

import pytest

from evolve.config import CampaignConfig, ConfigError, config_to_yaml, load_config


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults():
    cfg = CampaignConfig()
    assert (cfg.problems, cfg.suite, cfg.proposer, cfg.iterations, cfg.islands) == ([], None, "tiny", 50, 2)
    assert (cfg.answers, cfg.group, cfg.selection.method, cfg.pipeline_depth, cfg.train.algo) == \
        (4, 2, "lexicase", 1, "none")
    assert cfg.selection.lexicase_epsilon is None and cfg.sandbox.eval_timeout is None and cfg.retire_solved is True
    assert cfg.train.lr == 1e-3 and cfg.selection.migration_every == 10  # docs/TRAINING.md


def test_load_yaml_and_overrides(tmp_path):
    p = write(tmp_path, "problems: [a, b]\niterations: 7\ntrain_lr: 1e-4\nselection: niches\n")
    cfg = load_config(p, {"iterations": 3, "islands": None, "seed": 11})
    assert cfg.problems == ["a", "b"]
    assert cfg.iterations == 3  # override wins
    assert cfg.islands == 2  # None override ignored
    assert cfg.seed == 11
    assert cfg.train.lr == pytest.approx(1e-4)  # PyYAML reads "1e-4" as a string; it still validates
    assert cfg.selection.method == "niches"  # the flat keys of earlier versions still mean their section key


def test_sections_flat_keys_and_conflicts(tmp_path):
    p = write(tmp_path, "train:\n  algo: vpo\n  lr: 0.01\nsampling: {temperature: 0.5}\nselection: {method: tournament}\n")
    cfg = load_config(p, {"train_every": 3, "temperature": 0.7})  # flat overrides merge into the YAML's sections
    assert (cfg.train.algo, cfg.train.lr, cfg.train.every) == ("vpo", 0.01, 3)
    assert cfg.sampling.temperature == 0.7 and cfg.selection.method == "tournament"
    assert CampaignConfig(train="grpo", workers=3).sandbox.workers == 3
    with pytest.raises(ConfigError, match="'train_lr' is also given as 'train.lr'"):
        load_config(write(tmp_path, "train: {lr: 0.1}\ntrain_lr: 0.2\n", "both.yaml"), {})
    with pytest.raises(ConfigError, match="unknown key 'train.lrr'.*did you mean 'train.lr'"):
        load_config(write(tmp_path, "train: {lrr: 0.1}\n", "typo.yaml"), {})


def test_empty_file_and_no_file(tmp_path):
    assert load_config(write(tmp_path, ""), {}) == CampaignConfig()
    assert load_config(None, {"islands": 3}).islands == 3


def test_unknown_key_names_file_and_key(tmp_path):
    p = write(tmp_path, "iteratons: 5\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    msg = str(e.value)
    assert msg.startswith(f"{p}: unknown key 'iteratons'")
    assert "did you mean 'iterations'" in msg
    assert "\n" not in msg


def test_unknown_override_key_is_an_error():
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        load_config(None, {"bogus": 1})


@pytest.mark.parametrize("text,key", [
    ("islands: 0\n", "islands"),
    ("iterations: -1\n", "iterations"),
    ("answers: 0\n", "answers"),
    ("pipeline_depth: 65\n", "pipeline_depth"),
    ("pipeline_depth: -1\n", "pipeline_depth"),
    ("selection: roulette\n", "selection.method"),
    ("train: ppo\n", "train.algo"),
    ("answer_mode: patch\n", "sampling.answer_mode"),
    ("top_p: 1.5\n", "sampling.top_p"),
    ("sandbox: {workers: 0}\n", "sandbox.workers"),
    ("islands: two\n", "islands"),
    ("iterations: 2.5\n", "iterations"),
    ("problems: {a: 1}\n", "problems"),
])
def test_bad_values_name_the_key(tmp_path, text, key):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    msg = str(e.value)
    assert msg.startswith(f"{p}: '{key}': ")
    assert "\n" not in msg


def test_islands_message_format(tmp_path):
    p = write(tmp_path, "islands: 0\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    assert str(e.value) == f"{p}: 'islands': Input should be greater than or equal to 1"


def test_several_errors_stay_on_one_line(tmp_path):
    p = write(tmp_path, "islands: 0\nfoo: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    msg = str(e.value)
    assert "\n" not in msg and "'islands'" in msg and "unknown key 'foo'" in msg


def test_yaml_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid YAML at line 2") as e:
        load_config(write(tmp_path, "islands: 2\n  bad: [\n"), {})
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n", "list.yaml"), {})
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml", {})


def test_cross_field_validation():
    with pytest.raises(ConfigError, match="'problems': listed more than once: a"):
        load_config(None, {"problems": ["a", "b", "a"]})
    with pytest.raises(ConfigError, match="'selection.migration_count'"):
        load_config(None, {"migration_count": 5, "island_capacity": 3})
    with pytest.raises(ConfigError, match="'group'"):
        load_config(None, {"train": "vpo", "group": 1})
    assert load_config(None, {"train": "vpo", "group": 2}).train.algo == "vpo"
    with pytest.raises(ConfigError, match="'train.group'"):
        load_config(None, {"train": "vpo", "train_group": 1})


def test_trained_group_is_train_group_only_while_training():
    assert load_config(None, {"train": "vpo", "group": 2, "train_group": 8}).trained_group == 8
    assert load_config(None, {"train": "none", "group": 2, "train_group": 8}).trained_group == 2
    assert load_config(None, {"train": "vpo", "group": 3, "train_group": None}).trained_group == 3


def test_require_problems(tmp_path):
    cfg = load_config(write(tmp_path, "seed: 1\n"), {})  # constructing without problems is fine
    with pytest.raises(ConfigError, match=r"config.yaml: 'problems': no problems"):
        cfg.require_problems()
    assert load_config(None, {"suite": "basic"}).require_problems().suite == "basic"
    both = load_config(None, {"suite": "basic", "problems": ["x"]})
    assert both.require_problems() is both


def test_assignment_is_validated():
    cfg = CampaignConfig()
    with pytest.raises(Exception):
        cfg.islands = 0


def test_yaml_round_trip(tmp_path):
    cfg = load_config(None, {"problems": ["a"], "suite": "s", "problems_dir": ["d"], "seed": 5,
                             "lexicase_epsilon": 0.05, "eval_timeout": 2.5, "train": "gdpo", "train_lr": 3e-6,
                             "answer_mode": "diff", "out": "runs/x", "retire_solved": False})
    text = config_to_yaml(cfg)
    assert text.index("problems:") < text.index("archive_sync:")  # declaration order
    again = load_config(write(tmp_path, text), {})
    assert again == cfg
    assert again.model_dump() == cfg.model_dump()
    assert load_config(write(tmp_path, config_to_yaml(CampaignConfig()), "d.yaml"), {}) == CampaignConfig()
    assert again != CampaignConfig()


def test_assignment_keeps_sections():
    cfg = load_config(None, {"train": "vpo", "train_lr": 0.01, "selection": "niches"})
    cfg.suite = "pbe"  # validate_assignment re-runs the validators with the sections as models
    assert (cfg.train.algo, cfg.train.lr, cfg.selection.method, cfg.suite) == ("vpo", 0.01, "niches", "pbe")
    assert cfg.model_copy(update={"seed": 3}).train.lr == 0.01


@pytest.mark.parametrize("argv,want", [
    (["--train", "vpo", "--train-every", "5", "--set", "train.probe_every=1"], ("vpo", 5, 1e-3, 1)),
    (["--train-lr", "0.1", "--set", "train.lr=0.2"], ("none", 10, 0.2, 5)),
    (["--set", "train=grpo", "--set", "train.lr=0.3"], ("grpo", 10, 0.3, 5)),
])
def test_flags_and_set_merge_by_key(argv, want, monkeypatch):
    """A dotted --set adds to a section the flags (or a flat --set) started; it used to replace it, so
    `--train vpo --set train.lr=...` silently ran with no training."""
    import evolve.runner
    from evolve import cli

    seen = []
    monkeypatch.setattr(evolve.runner, "start", lambda cfg, progress: seen.append(cfg) or (Path("x"), {}))
    monkeypatch.setattr(cli, "_print_summary", lambda *a: None)
    cli.cmd_run(cli.build_parser("run").parse_args(["run", "--suite", "pbe", *argv]))
    t = seen[0].train
    assert (t.algo, t.every, t.lr, t.probe_every) == want
