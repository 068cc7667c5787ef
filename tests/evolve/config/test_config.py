from pathlib import Path

import pytest

from evolve.config.schema import CampaignConfig, ConfigError, config_to_yaml, load_config


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults():
    cfg = CampaignConfig()
    s = cfg.search
    assert (cfg.problems, cfg.suite, cfg.proposer.spec, s.iterations, s.islands) == ([], None, "tiny", 50, 2)
    assert (s.answers, s.group, s.selection.method, s.pipeline_depth, cfg.train.algo) == \
        (4, 8, "lexicase", 1, "none")
    assert s.selection.lexicase_epsilon is None and cfg.executor.eval_timeout is None and s.retire_solved is True
    assert cfg.train.lr == 1e-3 and s.migration.every == 10  # docs/TRAINING.md
    # the training schedule chosen by docs/results/ttt_check.md's third check: a step every iteration on its group of 8;
    # one G for every arm: train.group unset follows search.group, 8
    t = cfg.train
    assert (t.every, t.batch, t.group, t.probe_every, t.epochs) == (1, 1, None, 20, 1)
    assert cfg.trained_group == 8 and CampaignConfig(train={"algo": "vpo"}).trained_group == 8
    assert cfg.train.covrl.alpha == 0.5 and cfg.proposer.options == {} and cfg.executor.workers == 2


def test_load_yaml_and_overrides(tmp_path):
    p = write(tmp_path, "problems: [a, b]\nsearch: {iterations: 7, selection: {method: niches}}\ntrain: {lr: 1e-4}\n")
    cfg = load_config(p, {"search.iterations": 3, "search.islands": None, "seed": 11})
    assert cfg.problems == ["a", "b"]
    assert cfg.search.iterations == 3  # override wins
    assert cfg.search.islands == 2  # None override ignored
    assert cfg.seed == 11
    assert cfg.train.lr == pytest.approx(1e-4)  # PyYAML reads "1e-4" as a string; it still validates
    assert cfg.search.selection.method == "niches"  # the override kept the file's other search keys


def test_sections_and_dotted_overrides(tmp_path):
    p = write(tmp_path, "train:\n  algo: vpo\n  lr: 0.01\n  covrl: {alpha: 0.25}\nsampling: {temperature: 0.5}\n"
              "search: {selection: {method: tournament}, migration: {every: 4}}\n")
    cfg = load_config(p, {"train.every": 3, "sampling.temperature": 0.7, "train.covrl.kl_coef": 0.0,
                          "search": {"migration": {"count": 2}}})  # dotted or nested, merged key by key
    assert (cfg.train.algo, cfg.train.lr, cfg.train.every) == ("vpo", 0.01, 3)
    assert (cfg.train.covrl.alpha, cfg.train.covrl.kl_coef) == (0.25, 0.0)
    assert cfg.sampling.temperature == 0.7 and cfg.search.selection.method == "tournament"
    assert (cfg.search.migration.every, cfg.search.migration.count) == (4, 2)
    assert CampaignConfig(train={"algo": "grpo"}, executor={"workers": 3}).executor.workers == 3
    with pytest.raises(ConfigError, match="unknown key 'train.lrr'.*did you mean 'train.lr'"):
        load_config(write(tmp_path, "train: {lrr: 0.1}\n", "typo.yaml"), {})
    with pytest.raises(ConfigError, match="unknown key 'search.selection.tournament'.*did you mean "
                       "'search.selection.tournament_size'"):
        load_config(None, {"search.selection.tournament": 3})


@pytest.mark.parametrize("text,old,new", [
    ("train_lr: 0.1\n", "train_lr", "train.lr"),
    ("temperature: 0.5\n", "temperature", "sampling.temperature"),
    ("iterations: 5\n", "iterations", "search.iterations"),
    ("selection: lexicase\n", "selection", "search.selection.method"),
    ("selection: {migration_every: 3}\n", "selection.migration_every", "search.migration.every"),
    ("selection: {island_capacity: 9}\n", "selection.island_capacity", "search.island_capacity"),
    ("sandbox: {workers: 3}\n", "sandbox.workers", "executor.workers"),
    ("workers: 3\n", "workers", "executor.workers"),
    ("train: {covrl_alpha: 0.1}\n", "train.covrl_alpha", "train.covrl.alpha"),
    ("train_covrl_share: 0.1\n", "train_covrl_share", "train.covrl.share"),
    ("train_group: 4\n", "train_group", "train.group"),
    ("proposer: tiny\n", "proposer", "proposer.spec"),
    ("proposer_threads: 2\n", "proposer_threads", "proposer.threads"),
    ("vllm_sleep: true\n", "vllm_sleep", "proposer.options.sleep"),
    ("train: vpo\n", "train", "train.algo"),
])
def test_an_old_key_names_its_new_one(tmp_path, text, old, new):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    assert str(e.value) == f"{p}: '{old}' is now '{new}'"
    with pytest.raises(ConfigError, match=f"overrides: '{old}' is now '{new}'"):  # in overrides (--set) too
        import yaml

        load_config(None, yaml.safe_load(text))


def test_backend_options_are_the_backends_own(tmp_path):
    """proposer.options is validated by the options model the backend's factory declares (proposer/backends)."""
    cfg = load_config(None, {"proposer.spec": "vllm-ray:/m", "proposer.options": {"replicas": "3", "restarts": 0}})
    assert cfg.proposer.options == {"replicas": 3, "restarts": 0}  # validated values, only the keys given
    p = write(tmp_path, "proposer: {spec: 'hf:/m', options: {sleep: true}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    assert str(e.value) == (f"{p}: 'proposer.options.sleep' is not an option of backend 'hf' (its options: sampler, "
                            "products, step)")
    with pytest.raises(ConfigError, match="'proposer.options.replicas' is not an option of backend 'vllm' "
                       r"\(its options: gpu_memory_utilization, tensor_parallel_size, sleep\)"):
        load_config(None, {"proposer.spec": "vllm:/m", "proposer.options.replicas": 2})
    with pytest.raises(ConfigError, match="'proposer.options.tensor_parallel_size' of backend 'vllm': Input should "
                       "be greater than or equal to 1"):
        load_config(None, {"proposer.spec": "vllm:/m", "proposer.options.tensor_parallel_size": 0})
    with pytest.raises(ConfigError, match=r"'proposers.0.options.sleep' is not an option of backend 'tiny'"):
        load_config(None, {"proposers": [{"name": "a", "spec": "tiny", "options": {"sleep": True}}]})


def test_a_registered_backend_declares_its_options():
    """Adding a backend with options is one registry entry: its flags, validation and arguments follow."""
    from proposer.backends import BACKENDS, OPTIONS, backend_kwargs, register_backend
    from proposer.backends.options import BackendOptions, BackendRun

    class EchoOptions(BackendOptions):
        loudness: int = 1

        def kwargs(self, run: BackendRun) -> dict:
            return {"loudness": self.loudness, "seeded": run.trained}

    register_backend("echo-test", lambda arg, spec, kw: None, options=EchoOptions)
    try:
        from evolve.config.schema import run_flags

        cfg = load_config(None, {"proposer.spec": "echo-test:x", "proposer.options.loudness": 4})
        assert backend_kwargs(cfg.proposer.spec, cfg.proposer.options, cfg.backend_run()) == \
            {"loudness": 4, "seeded": False}
        assert any(f.flag == "echo-test-loudness" and f.key == "proposer.options.loudness" for f in run_flags())
        with pytest.raises(ConfigError, match="'proposer.options.loudness' is not an option of backend 'tiny'"):
            load_config(None, {"proposer.options.loudness": 4})
    finally:
        BACKENDS.pop("echo-test"), OPTIONS.pop("echo-test")


def test_empty_file_and_no_file(tmp_path):
    assert load_config(write(tmp_path, ""), {}) == CampaignConfig()
    assert load_config(None, {"search.islands": 3}).search.islands == 3


def test_unknown_key_names_file_and_key(tmp_path):
    p = write(tmp_path, "search: {iteratons: 5}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    msg = str(e.value)
    assert msg.startswith(f"{p}: unknown key 'search.iteratons'")
    assert "did you mean 'search.iterations'" in msg
    assert "\n" not in msg


def test_unknown_override_key_is_an_error():
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        load_config(None, {"bogus": 1})


@pytest.mark.parametrize("text,key", [
    ("search: {islands: 0}\n", "search.islands"),
    ("search: {iterations: -1}\n", "search.iterations"),
    ("search: {answers: 0}\n", "search.answers"),
    ("search: {pipeline_depth: 65}\n", "search.pipeline_depth"),
    ("search: {pipeline_depth: -1}\n", "search.pipeline_depth"),
    ("search: {selection: {method: roulette}}\n", "search.selection.method"),
    ("train: {algo: ppo}\n", "train.algo"),
    ("train: {covrl: {alpha: 2}}\n", "train.covrl.alpha"),
    ("sampling: {answer_mode: patch}\n", "sampling.answer_mode"),
    ("sampling: {top_p: 1.5}\n", "sampling.top_p"),
    ("executor: {workers: 0}\n", "executor.workers"),
    ("executor: {kind: slurm}\n", "executor.kind"),
    ("proposer: {dtype: int8}\n", "proposer.dtype"),
    ("search: {islands: two}\n", "search.islands"),
    ("search: {iterations: 2.5}\n", "search.iterations"),
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
    p = write(tmp_path, "search: {islands: 0}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    assert str(e.value) == f"{p}: 'search.islands': Input should be greater than or equal to 1"


def test_several_errors_stay_on_one_line(tmp_path):
    p = write(tmp_path, "search: {islands: 0}\nfoo: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, {})
    msg = str(e.value)
    assert "\n" not in msg and "'search.islands'" in msg and "unknown key 'foo'" in msg


def test_yaml_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid YAML at line 2") as e:
        load_config(write(tmp_path, "seed: 2\n  bad: [\n"), {})
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n", "list.yaml"), {})
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml", {})


def test_cross_field_validation():
    with pytest.raises(ConfigError, match="'problems': listed more than once: a"):
        load_config(None, {"problems": ["a", "b", "a"]})
    with pytest.raises(ConfigError, match="'search.migration.count': 5 exceeds 'search.island_capacity' 3"):
        load_config(None, {"search.migration.count": 5, "search.island_capacity": 3})
    # train.group unset: the trained proposer samples search.group
    with pytest.raises(ConfigError, match="'search.group'"):
        load_config(None, {"train": {"algo": "vpo", "group": None}, "search": {"group": 1}})
    with pytest.raises(ConfigError, match="'proposer.dtype': float16 cannot be trained"):
        load_config(None, {"train.algo": "vpo", "proposer.dtype": "float16"})
    assert load_config(None, {"train.algo": "vpo", "search.group": 2}).train.algo == "vpo"
    with pytest.raises(ConfigError, match="'train.group'"):
        load_config(None, {"train.algo": "vpo", "train.group": 1})
    # a search group of 1 is fine when the trained proposer samples its own train.group; unset, it follows the search
    assert load_config(None, {"train.algo": "vpo", "search.group": 1, "train.group": 4}).trained_group == 4
    assert load_config(None, {"train.algo": "vpo", "search.group": 3}).trained_group == 3
    with pytest.raises(ConfigError, match="'search.group'"):
        load_config(None, {"train.algo": "vpo", "search.group": 1})


def test_trained_group_is_train_group_only_while_training():
    assert load_config(None, {"train.algo": "vpo", "search.group": 2, "train.group": 8}).trained_group == 8
    assert load_config(None, {"train.algo": "none", "search.group": 2, "train.group": 8}).trained_group == 2
    assert load_config(None, {"train": {"algo": "vpo", "group": None}, "search": {"group": 3}}).trained_group == 3


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
        cfg.search.islands = 0


def test_yaml_round_trip(tmp_path):
    cfg = load_config(None, {"problems": ["a"], "suite": "s", "problems_dir": ["d"], "seed": 5,
                             "search.selection.lexicase_epsilon": 0.05, "executor.eval_timeout": 2.5,
                             "train.algo": "gdpo", "train.lr": 3e-6, "train.covrl.share": 0.25,
                             "sampling.answer_mode": "diff", "out": "runs/x", "search.retire_solved": False,
                             "proposer.spec": "vllm:/m", "proposer.options.sleep": True})
    text = config_to_yaml(cfg)
    assert text.index("problems:") < text.index("archive_sync:")  # declaration order
    again = load_config(write(tmp_path, text), {})
    assert again == cfg
    assert again.model_dump() == cfg.model_dump()
    assert load_config(write(tmp_path, config_to_yaml(CampaignConfig()), "d.yaml"), {}) == CampaignConfig()
    assert again != CampaignConfig()


def test_assignment_keeps_sections():
    cfg = load_config(None, {"train.algo": "vpo", "train.lr": 0.01, "search.selection.method": "niches"})
    cfg.suite = "pbe"  # validate_assignment re-runs the validators with the sections as models
    assert (cfg.train.algo, cfg.train.lr, cfg.search.selection.method, cfg.suite) == ("vpo", 0.01, "niches", "pbe")
    assert cfg.model_copy(update={"seed": 3}).train.lr == 0.01


@pytest.mark.parametrize("argv,want", [
    (["--train", "vpo", "--train-every", "5", "--set", "train.probe_every=1"], ("vpo", 5, 1e-3, 1)),
    (["--train-lr", "0.1", "--set", "train.lr=0.2"], ("none", 1, 0.2, 20)),
    (["--set", "train.algo=grpo", "--set", "train.lr=0.3"], ("grpo", 1, 0.3, 20)),
])
def test_flags_and_set_merge_by_key(argv, want, monkeypatch):
    """A dotted --set adds to a section the flags (or another --set) started: `--train vpo --set train.lr=...`
    trains with that rate."""
    import evolve.launch.runner
    from evolve import cli

    seen = []
    monkeypatch.setattr(evolve.launch.runner, "start", lambda cfg, progress: seen.append(cfg) or (Path("x"), {}))
    monkeypatch.setattr(cli, "_print_summary", lambda *a: None)
    cli.cmd_run(cli.build_parser("run").parse_args(["run", "--suite", "pbe", *argv]))
    t = seen[0].train
    assert (t.algo, t.every, t.lr, t.probe_every) == want


def test_set_null_sets_a_key_to_null(monkeypatch):
    """`--set train.group=8` then `--set train.group=null` gives the key null (the trained proposer then samples
    search.group), where a None from an absent flag leaves the earlier value."""
    import evolve.launch.runner
    from evolve import cli

    seen = []
    monkeypatch.setattr(evolve.launch.runner, "start", lambda cfg, progress: seen.append(cfg) or (Path("x"), {}))
    monkeypatch.setattr(cli, "_print_summary", lambda *a: None)
    for argv, want in ((["--set", "train.group=8", "--set", "train.group=null"], (None, 3)),
                       (["--set", "train.group=8"], (8, 8)), ([], (None, 3))):
        cli.cmd_run(cli.build_parser("run").parse_args(["run", "--suite", "pbe", "--train", "vpo", "--group", "3",
                                                        *argv]))
        assert (seen[-1].train.group, seen[-1].trained_group) == want


OLD_RUN_CONFIG = """\
problems: []
suite: pbe
problems_dir: []
proposer: vllm-ray:/m
proposers: []
proposer_threads: 1
proposer_dtype: bfloat16
vllm_gpu_memory_utilization: null
vllm_sleep: false
vllm_tensor_parallel_size: 2
vllm_replicas: 3
vllm_restarts: 1
iterations: 12
islands: 3
answers: 4
group: 2
seed: 7
out: /tmp/x
retire_solved: false
pipeline_depth: 3
archive_sync: normal
selection:
  method: tournament
  lexicase_epsilon: null
  tournament_size: 5
  inspirations: 2
  island_capacity: 30
  migration_every: 4
  migration_count: 2
sampling:
  temperature: 0.8
train:
  algo: vpo
  lr: 0.01
  covrl_alpha: 0.25
  covrl_share: 0.75
sandbox:
  workers: 3
  eval_timeout: 2.5
  unsafe_no_sandbox: false
executor:
  kind: local
  ray_address: null
portfolio:
  policy: ucb
"""


def test_a_run_folder_of_an_earlier_version_is_read_through_the_converter(tmp_path):
    """The one converter (evolve/config/legacy.py) reads what earlier versions wrote into run folders."""
    from evolve.config.schema import load_run_config, stored_config

    p = write(tmp_path, OLD_RUN_CONFIG)
    with pytest.raises(ConfigError, match="'proposer' is now 'proposer.spec'"):  # as a user's file: an error
        load_config(p, {})
    cfg = load_run_config(p, {"search.iterations": 20})
    s = cfg.search
    assert (cfg.proposer.spec, cfg.proposer.dtype, cfg.proposer.options) == \
        ("vllm-ray:/m", "bfloat16", {"gpu_memory_utilization": None, "tensor_parallel_size": 2, "replicas": 3,
                                     "restarts": 1})  # sleep: an option vllm-ray does not take, dropped
    assert (s.iterations, s.islands, s.pipeline_depth, s.retire_solved, s.island_capacity) == (20, 3, 3, False, 30)
    assert (s.selection.method, s.selection.tournament_size, s.migration.every, s.migration.count) == \
        ("tournament", 5, 4, 2)
    assert (cfg.train.lr, cfg.train.covrl.alpha, cfg.train.covrl.share) == (0.01, 0.25, 0.75)
    assert (cfg.executor.workers, cfg.executor.eval_timeout, cfg.sampling.temperature) == (3, 2.5, 0.8)
    import yaml

    assert stored_config(yaml.safe_load(OLD_RUN_CONFIG)).model_dump() == load_run_config(p).model_dump()
    assert load_run_config(write(tmp_path, config_to_yaml(cfg), "new.yaml")) == cfg  # today's shape: unchanged
    # a tiny run kept the vllm_* defaults: they are dropped, not given to a backend without options
    tiny = OLD_RUN_CONFIG.replace("proposer: vllm-ray:/m", "proposer: tiny").replace("proposer_dtype: bfloat16",
                                                                                    "proposer_dtype: auto")
    assert load_run_config(write(tmp_path, tiny, "tiny.yaml")).proposer.options == {}


def test_run_help_is_grouped_by_section(capsys):
    """Every flag is generated from the config models, in its section's group; the documented names stay."""
    from evolve import cli
    from evolve.config.schema import run_flags

    flags = {f.flag: f.key for f in run_flags()}
    assert len(flags) == len(run_flags())  # no two flags share a name
    for name, key in {"iterations": "search.iterations", "islands": "search.islands", "answers": "search.answers",
                      "group": "search.group", "train": "train.algo", "train-every": "train.every",
                      "train-lr": "train.lr", "temperature": "sampling.temperature",
                      "selection": "search.selection.method", "workers": "executor.workers",
                      "proposer": "proposer.spec", "pipeline-depth": "search.pipeline_depth",
                      "migration-every": "search.migration.every",
                      "tournament-size": "search.selection.tournament_size",
                      "train-covrl-alpha": "train.covrl.alpha", "unsafe-no-sandbox": "executor.unsafe_no_sandbox",
                      "vllm-replicas": "proposer.options.replicas", "executor": "executor.kind",
                      "portfolio": "portfolio.policy"}.items():
        assert flags[name] == key
    with pytest.raises(SystemExit):
        cli.build_parser("run").parse_args(["run", "--help"])
    out = capsys.readouterr().out
    heads = [out.index(f"{sec} section:") for sec in ("proposer", "search", "sampling", "train", "executor",
                                                      "portfolio")]
    assert heads == sorted(heads)
    assert heads[1] < out.index("--migration-every") < heads[2] and heads[4] < out.index("--workers") < heads[5]


def test_vevo_train_reads_its_config_file_and_flags_into_the_sections(tmp_path):
    """`vevo train`'s flags name dotted keys (TRAIN_FLAG_KEYS) or are generated from the train section; the
    algorithm is --algo, else the file's train.algo, else vpo."""
    from evolve import cli

    def cfg(*argv):
        return cli._train_config(cli.build_parser("train").parse_args(["train", "--proposer", "tiny", "--out", "x",
                                                                       *argv]))

    c = cfg("--group", "4", "--lr", "0.01", "--train-covrl-alpha", "0.25", "--set", "search.answers=3")
    assert (c.train.algo, c.train.group, c.trained_group, c.train.lr, c.train.covrl.alpha, c.search.answers) == \
        ("vpo", 4, 4, 0.01, 0.25, 3)
    p = write(tmp_path, "train: {algo: grpo, batch: 3}\nsearch: {group: 3}\n")
    assert (cfg("--config", str(p)).train.algo, cfg("--config", str(p)).train.batch) == ("grpo", 3)
    assert cfg("--config", str(p), "--algo", "vpo", "--full").train.model_dump(include={"algo", "lora"}) == \
        {"algo": "vpo", "lora": False}


def test_a_portfolio_member_gets_its_own_backend_options():
    from evolve.launch.members import build_members
    from evolve.launch.runner import backend_kwargs

    cfg = load_config(None, {"proposers": [{"name": "v", "spec": "vllm:/m", "options": {"sleep": True}},
                                           {"name": "t", "spec": "tiny"}]})
    made = []
    build_members(cfg, lambda spec, options: made.append((spec, options)) or object())
    assert made == [("vllm:/m", {"sleep": True}), ("tiny", {})]
    kw = backend_kwargs(cfg, "vllm:/m", cfg.proposers[0].options)
    assert kw["enable_sleep_mode"] is True and kw["gpu_memory_utilization"] == 0.85


def test_an_old_key_in_set_is_a_one_line_cli_error(capsys):
    from evolve import cli

    assert cli.main(["run", "--suite", "pbe", "--set", "train_lr=1e-4", "--iterations", "1"]) == 2
    err = capsys.readouterr().err
    assert err == "vevo: error: --set: 'train_lr' is now 'train.lr'\n"
