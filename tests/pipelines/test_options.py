"""One options system for every command (``ldpflow.pipelines.options``): the same usage
errors, help and Beam hand-off everywhere, without importing Beam to parse."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from ldpflow.pipelines import cli, options
from ldpflow.pipelines.options import COMMANDS, Flag, Group, parse

#: A command line each command accepts as far as parsing goes, and one of its flags misspelt.
VALID = {
    "demo": (["--users=10"], "--user=10", "--users"),
    "simulate": (["--oracle=olh", "--epsilon=1", "--output=o"], "--domain_sise=4",
                 "--domain_size"),
    "estimate": (["--input=i", "--output=o"], "--expect_epsilom=1", "--expect_epsilon"),
    "stream": (["--subscription=projects/p/subscriptions/s"], "--window_sise=5",
               "--window_size"),
    "heavy-hitters": (["--input=i", "--output=o"], "--protocl=pem", "--protocol"),
    "pubsub": (["create", "--topic=projects/p/topics/t"], "--subscriptoin=x",
               "--subscription"),
    "audit": (["--oracle=olh"], "--other_valeu=1", "--other_value"),
    "report": (["--input=i", "--output=o.html"], "--titel=x", "--title"),
}


def test_every_command_is_declared_and_checked_here():
    assert set(VALID) == set(COMMANDS) == set(cli.COMMANDS)


@pytest.mark.parametrize("command", sorted(VALID))
def test_a_misspelt_flag_is_one_line_naming_the_closest_with_status_2(command, capsys):
    argv, wrong, meant = VALID[command]
    status = cli.main([command, *argv, wrong])
    err = capsys.readouterr().err.strip().splitlines()
    prog = f"ldpflow {command}" + (f" {argv[0]}" if command == "pubsub" else "")
    assert status == 2
    assert err == [f"{prog}: error: unrecognized flag {wrong.split('=')[0]}; "
                   f"did you mean {meant}?"]


@pytest.mark.parametrize("command", sorted(VALID))
def test_an_unknown_flag_far_from_any_points_at_help(command, capsys):
    argv, _, _ = VALID[command]
    status = cli.main([command, *argv, "--zzzzzzzz=1"])
    err = capsys.readouterr().err.strip().splitlines()
    prog = f"ldpflow {command}" + (f" {argv[0]}" if command == "pubsub" else "")
    assert status == 2 and len(err) == 1
    assert err[0] == f"{prog}: error: unrecognized flag --zzzzzzzz (see {prog} --help)"


@pytest.mark.parametrize("command", sorted(VALID))
def test_help_lists_every_group_and_flag_of_the_command(command, capsys):
    argv = ["create"] if command == "pubsub" else []
    assert cli.main([command, *argv, "--help"]) == 0
    out = capsys.readouterr().out
    declared = options._command(f"{command} {argv[0]}" if argv else command)
    assert out.startswith(f"usage: {declared.prog}")
    for group in declared.groups:
        assert f"{group.title}:" in out
        for flag in group.flags:
            assert f"--{flag.name}" in out
    assert "``" not in out


def test_pubsub_help_lists_its_commands(capsys):
    assert cli.main(["pubsub", "--help"]) == 0
    out = capsys.readouterr().out
    for name, sub in COMMANDS["pubsub"].commands.items():
        assert f"  {name}" in out and sub.summary in out


def test_a_misspelt_command_names_the_closest(capsys):
    assert cli.main(["estimat", "--input=x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ldpflow: error: unknown command 'estimat'; did you mean estimate?")


def test_beam_flags_go_to_beam_unchanged_and_in_order():
    parsed = parse("estimate", ["--input=i", "--runner", "DataflowRunner", "--output=o",
                                "--project=p", "--region=europe-west1",
                                "--temp_location=gs://b/t", "--experiments=use_runner_v2",
                                "--flink_master=localhost:8081"])
    assert parsed.args.input == "i" and parsed.args.output == "o"
    assert parsed.beam_argv == ["--runner", "DataflowRunner", "--project=p",
                                "--region=europe-west1", "--temp_location=gs://b/t",
                                "--experiments=use_runner_v2", "--flink_master=localhost:8081"]
    assert not hasattr(parsed.args, "runner")


def test_a_misspelt_beam_flag_names_the_beam_flag():
    with pytest.raises(SystemExit, match=r"unrecognized flag --tmp_location; did you mean "
                                         r"--temp_location\?$"):
        parse("estimate", ["--input=i", "--output=o", "--tmp_location=gs://b/t"])


def test_beam_flags_are_refused_off_beam_saying_why():
    with pytest.raises(SystemExit, match="--runner is an Apache Beam flag: it applies with "
                                         "--engine beam \\(or auto\\) only, not --engine local"):
        parse("estimate", ["--input=i", "--output=o", "--engine=local", "--runner=Direct"])
    with pytest.raises(SystemExit, match="unrecognized flag --runner"):
        parse("simulate", ["--oracle=olh", "--epsilon=1", "--output=o", "--runner=Direct"])
    parsed = parse("estimate", ["--input=i", "--output=o", "--engine=local"])
    assert parsed.beam_argv == []


def test_a_stray_argument_is_refused_but_a_beam_flags_value_is_not():
    with pytest.raises(SystemExit, match=r"unexpected argument 'extra'"):
        parse("report", ["--input=i", "--output=o", "extra"])
    with pytest.raises(SystemExit, match=r"unexpected argument 'extra'"):
        parse("estimate", ["--input=i", "--output=o", "--runner=X", "extra"])
    assert parse("stream", ["--subscription=s", "--streaming", "--job_name", "j"]
                 ).beam_argv == ["--streaming", "--job_name", "j"]


def test_required_flags_are_checked_after_unknown_ones():
    with pytest.raises(SystemExit, match=r"unrecognized flag --inptu; did you mean --input\?$"):
        parse("estimate", ["--inptu=i", "--output=o"])
    with pytest.raises(SystemExit, match=r"required: --input, --output \(see ldpflow estimate "
                                         r"--help\)$"):
        parse("estimate", [])


@pytest.mark.parametrize("command,old,new,value", [
    ("heavy-hitters", "epsilon", "expect_epsilon", 2.5),
    ("audit", "epsilon", "expect_epsilon", 2.5),
    ("audit", "format", "input_format", "json"),
])
def test_a_former_spelling_is_a_deprecated_alias(command, old, new, value, caplog):
    argv = (["--input=i", "--output=o"] if command == "heavy-hitters" else ["--oracle=olh"])
    with caplog.at_level(logging.WARNING, logger="ldpflow.pipelines.options"):
        args = parse(command, [*argv, f"--{old}={value}"]).args
    assert getattr(args, new) == value and not hasattr(args, old)
    assert [r.getMessage() for r in caplog.records] == [
        f"ldpflow {command}: --{old} is deprecated: use --{new}"]
    assert getattr(parse(command, [*argv, f"--{new}", str(value)]).args, new) == value


def test_epsilon_means_perturb_with_and_expect_epsilon_check_against():
    perturbing = {name for name, command in COMMANDS.items() if "epsilon" in command.flags()}
    checking = {name for name, command in COMMANDS.items()
                if "expect_epsilon" in command.flags()}
    assert perturbing == {"simulate", "demo"}
    assert checking == {"estimate", "stream", "heavy-hitters", "audit"}


def test_lazy_defaults_are_the_acceptance_policys():
    from ldpflow.wire.parse import AcceptancePolicy

    args = parse("estimate", ["--input=i", "--output=o"]).args
    policy = AcceptancePolicy()
    for name in ("max_domain_size", "max_hash_range", "max_epsilon", "max_keys",
                 "max_counters", "max_key_bytes"):
        assert getattr(args, name) == getattr(policy, name), name
    assert parse("simulate", ["--oracle=olh", "--epsilon=1", "--output=o"]
                 ).args.max_domain_size == policy.max_domain_size


def test_the_protocol_flags_are_one_table_for_simulate_and_heavy_hitters():
    specs = options.protocol_flag_specs()
    heavy_hitters = COMMANDS["heavy-hitters"].flags()
    simulate = COMMANDS["simulate"].flags()
    for flag in specs.flags:
        assert heavy_hitters[flag.name] == flag
        if flag.name != "hash_range":  # simulate's is olh's too
            assert simulate[flag.name] == flag
    assert tuple(heavy_hitters["protocol"].choices) == specs.heavy_hitters
    assert set(specs.heavy_hitters) <= set(simulate["oracle"].choices)


def test_a_groups_variant_and_a_new_flag_are_one_declaration():
    group = Group("g", (Flag("a", int, 1, help="A."), Flag("b", help="B.")))
    variant = group.but("b", a={"default": 2})
    assert variant.names() == ("a",) and variant.flags[0].default == 2
    with pytest.raises(KeyError):
        group.but("c")
    extended = Group(group.title, (*group.flags, Flag("c", float, help="C.")))
    command = options.Command("x", "X.", (extended,))
    assert parse(command, ["--c=0.5"]).args.c == 0.5


@pytest.mark.parametrize("argv", [
    ["estimate", "--help"], ["simulate", "--help"], ["heavy-hitters", "--help"],
    ["stream", "--help"], ["estimate", "--input=x", "--method=base"],
    ["estimate", "--input=x", "--output=y", "--runer=Direct"], ["audit", "--orcale=olh"],
    ["estimate", "--input=x", "--output=y", "--zzzzzzzz=1"],
    ["estimate", "--input=x", "--output=y", "--temp_locaton=gs://b"],
    ["heavy-hitters", "--input=x", "--output=y", "--bogus"],
    ["stream", "--subscription=s", "--bogus"],
    ["pubsub", "publish", "--topic=t"],
])
def test_help_and_usage_errors_do_not_import_beam(argv):
    code = ("import sys\nfrom ldpflow.pipelines.cli import main\nstatus = main(sys.argv[1:])\n"
            "sys.exit(10 + status if 'apache_beam' in sys.modules else status)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode in (0, 2), done.stderr


def _fresh(code: str, *argv: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = None
    if path is not None:
        import os

        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [path, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                          text=True, timeout=300, env=env)


def test_the_stored_beam_flags_are_the_installed_beams_live_parser():
    """An upgrade of Beam fails here until ``python -m ldpflow.pipelines.beam_flags`` has
    regenerated the table (from a fresh process: only Beam's own options classes)."""
    import importlib.metadata
    import pathlib

    from ldpflow.pipelines import beam_flags

    pytest.importorskip("apache_beam")
    assert options._installed_beam_version() == importlib.metadata.version("apache-beam")
    done = _fresh("import sys\nfrom ldpflow.pipelines.options import beam_flag_table\n"
                  "sys.stdout.write(beam_flag_table())")
    assert done.returncode == 0, done.stderr
    assert pathlib.Path(beam_flags.__file__).read_text(encoding="utf-8") == done.stdout
    assert options._beam_flags_stored() == beam_flags.FLAGS
    assert {"--runner", "--temp_location", "--beam_plugins"} <= beam_flags.FLAGS


def test_an_unknown_flag_asks_beam_only_when_the_table_is_of_another_version(monkeypatch):
    from ldpflow.pipelines import beam_flags

    asked = []

    def imported(plugins=()):
        asked.append(list(plugins))
        return frozenset({"--runner", "--some_plugins_flag"})

    monkeypatch.setattr(options, "_beam_flags_imported", imported)
    monkeypatch.setattr(options, "_installed_beam_version", lambda: beam_flags.BEAM_VERSION)
    options._beam_flags_stored.cache_clear()
    argv = ["--input=i", "--output=o", "--some_plugins_flag=1"]
    with pytest.raises(SystemExit, match="unrecognized flag --some_plugins_flag"):
        parse("estimate", argv)
    with pytest.raises(SystemExit, match=r"--runer; did you mean --runner\?$"):
        parse("estimate", ["--input=i", "--output=o", "--runer=X"])
    assert asked == []
    monkeypatch.setattr(options, "_installed_beam_version", lambda: "0.0.1")
    options._beam_flags_stored.cache_clear()
    try:
        assert parse("estimate", argv).beam_argv == ["--some_plugins_flag=1"]
        with pytest.raises(SystemExit, match=r"--some_plugin_flag; did you mean "
                                             r"--some_plugins_flag\?$"):
            parse("estimate", ["--input=i", "--output=o", "--some_plugin_flag=1"])
        assert asked == [[], []]
        # a flag close to one of ldpflow's is a misspelling of it, Beam not asked
        with pytest.raises(SystemExit, match=r"did you mean --output\?$"):
            parse("estimate", ["--input=i", "--output=o", "--outptu=o"])
        assert len(asked) == 2
    finally:
        options._beam_flags_stored.cache_clear()


_PLUGIN = """
from apache_beam.options.pipeline_options import PipelineOptions


class SomePluginOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--some_plugin_flag")
"""


def test_a_beam_plugins_options_are_beams_flags_when_it_is_named(tmp_path):
    pytest.importorskip("apache_beam")
    (tmp_path / "ldpflow_some_plugin.py").write_text(_PLUGIN)
    code = ("import sys\nfrom ldpflow.pipelines.options import parse\n"
            "try:\n    print(parse('estimate', sys.argv[1:]).beam_argv)\n"
            "except SystemExit as exc:\n    sys.exit(exc.code)")
    given = ["--input=i", "--output=o"]
    done = _fresh(code, *given, "--beam_plugins=ldpflow_some_plugin", "--some_plugin_flag=3",
                  path=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['--beam_plugins=ldpflow_some_plugin', '--some_plugin_flag=3']"
    # as a class path too, and Beam's flags and suggestions still hold
    done = _fresh(code, *given, "--beam_plugin", "ldpflow_some_plugin.SomePluginOptions",
                  "--some_plugin_flg=3", path=str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip().endswith("unrecognized flag --some_plugin_flg; did you mean "
                                        "--some_plugin_flag?")
    # not named: not Beam's flag (the table holds Beam's own)
    done = _fresh(code, *given, "--some_plugin_flag=3", path=str(tmp_path))
    assert done.returncode == 1
    assert "unrecognized flag --some_plugin_flag (see ldpflow estimate --help)" in done.stderr
    # a plugin that cannot be imported here is the workers' business; the check still holds
    done = _fresh(code, *given, "--beam_plugins=no_such_plugin_module", "--bogus")
    assert done.returncode == 1
    assert "unrecognized flag --bogus (see ldpflow estimate --help)" in done.stderr
    done = _fresh(code, *given, "--beam_plugins=no_such_plugin_module")
    assert done.returncode == 0, done.stderr


def test_the_top_level_help_imports_neither_numpy_nor_beam():
    code = ("import sys\nfrom ldpflow.pipelines.cli import main\nmain(['--help'])\n"
            "sys.exit(bool({'numpy', 'apache_beam'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_estimate_on_the_local_engine_runs_without_beam(tmp_path):
    from ldpflow.pipelines import simulate

    simulate.run(["--oracle=grr", "--epsilon=1", "--domain_size=4", "--users=200",
                  "--shards=1", "--seed=3", f"--output={tmp_path}/r"])
    code = ("import sys; sys.modules['apache_beam'] = None\n"
            "from ldpflow.pipelines.cli import main\nsys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "estimate", f"--input={tmp_path}/r/*.avro",
                           f"--output={tmp_path}/e", "--engine=local", "--methods=base"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "e" / "estimates.json").read_text())
    assert [result["n"] for result in document["results"]] == [200]


# -- --engine auto: the engine a batch job runs on, and why ------------------------------------
#: (command, flags beyond --input=i --output=o, the engine chosen, a part of the reason).
ENGINE_CHOICES = [
    ("estimate", [], "local", "no Beam flag, runner or remote path given"),
    ("heavy-hitters", [], "local", "no Beam flag, runner or remote path given"),
    ("estimate", ["--runner=DirectRunner"], "beam", "--runner is an Apache Beam flag"),
    ("estimate", ["--runner", "FnApiRunner"], "beam", "--runner is an Apache Beam flag"),
    ("heavy-hitters", ["--runner=DataflowRunner"], "beam", "--runner is an Apache Beam flag"),
    ("estimate", ["--project=p", "--region=r", "--temp_location=gs://b/t", "--setup_file=s"],
     "beam", "--project, --region, --temp_location, ... are Apache Beam flags"),
    ("estimate", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"], "beam",
     "--direct_num_workers, --direct_running_mode are Apache Beam flags"),
    ("heavy-hitters", ["--direct_num_workers", "2"], "beam", "--direct_num_workers is an"),
    ("estimate", ["--no_wait_until_finish"], "beam", "--no_wait_until_finish is an Apache"),
    ("estimate", ["--job_name=j"], "beam", "--job_name is an Apache Beam flag"),
    ("estimate", ["--sdk_container_image=i"], "beam", "--sdk_container_image is an Apache"),
    ("estimate", ["--input=gs://b/r/*.avro"], "beam",
     "--input gs://b/r/*.avro is on another file system (Beam's file systems)"),
    ("heavy-hitters", ["--input=s3://b/r/*.avro"], "beam", "--input s3://b/r/*.avro is on"),
    ("estimate", ["--output=gs://b/e"], "beam", "--output gs://b/e is on another file system"),
    ("heavy-hitters", ["--truth=gs://b/truth.json"], "beam", "--truth gs://b/truth.json is"),
    ("estimate", ["--value_labels=gs://b/l.csv"], "beam", "--value_labels gs://b/l.csv is on"),
    ("estimate", ["--input=file:///tmp/r/*.avro"], "local", "no Beam flag"),
    ("estimate", ["--dedup_store=disk"], "local", "no Beam flag"),
    ("heavy-hitters", ["--pass_store=reread"], "local", "no Beam flag"),
    ("estimate", ["--workers=2"], "dask", "--workers is dask's flag"),
    ("estimate", ["--dask_scheduler=tcp://h:8786"], "dask", "--dask_scheduler is dask's flag"),
    ("heavy-hitters", ["--spark_master=local[2]"], "spark", "--spark_master is spark's flag"),
    ("estimate", ["--engine=beam"], "beam", "--engine beam"),
    ("estimate", ["--engine=local", "--input=gs://b/r/*.avro"], "local", "--engine local"),
    ("heavy-hitters", ["--engine=dask"], "dask", "--engine dask"),
    ("estimate", ["--engine=spark"], "spark", "--engine spark"),
    ("estimate", ["--engine=beam", "--workers=2"], "beam", "--engine beam"),
]


@pytest.mark.parametrize("command,flags,engine,reason", ENGINE_CHOICES,
                         ids=[" ".join([c, *f]) for c, f, _, _ in ENGINE_CHOICES])
def test_engine_auto_chooses_beam_only_for_what_only_beam_does(command, flags, engine, reason):
    parsed = parse(command, ["--input=i", "--output=o", *flags])
    assert parsed.args.engine == engine
    assert reason in parsed.engine_reason
    ours = COMMANDS[command].flags()
    beams = [flag for flag in flags if flag.split("=", 1)[0].lstrip("-") not in ours]
    assert parsed.beam_argv == (beams if engine == "beam" else [])


def test_engine_auto_is_the_default_of_the_batch_jobs_and_stream_stays_on_beam():
    for command in ("estimate", "heavy-hitters"):
        assert COMMANDS[command].flags()["engine"].default == "auto"
    parsed = parse("stream", ["--subscription=projects/p/subscriptions/s", "--runner=X"])
    assert parsed.engine_reason is None and parsed.beam_argv == ["--runner=X"]
    assert COMMANDS["stream"].on_beam(parsed.args)


@pytest.mark.parametrize("flags", [["--runner=DirectRunner", "--workers=2"],
                                   ["--project=p", "--spark_master=local"],
                                   ["--dask_scheduler=tcp://h:1", "--spark_master=local"]])
def test_engine_auto_refuses_flags_of_two_engines_in_one_line(flags):
    with pytest.raises(SystemExit, match=r"the flags name two engines, \w+ \(--\w+\) and \w+ "
                                         r"\(--\w+\): choose one with --engine"):
        parse("estimate", ["--input=i", "--output=o", *flags])


def test_engine_auto_knows_beams_flags_without_beam_installed():
    """A Beam flag chooses beam where Beam is missing (the job then says what to install),
    and the choice imports no Beam where it is installed."""
    code = ("import sys\nsys.modules['apache_beam'] = None\n"
            "from ldpflow.pipelines import options\n"
            "assert options._installed_beam_version() is None\n"
            "p = options.parse('estimate', ['--input=i', '--output=o'])\n"
            "assert p.args.engine == 'local', p.engine_reason\n"
            "from ldpflow.pipelines.cli import main\n"
            "sys.exit(main(['estimate', '--input=i', '--output=o', '--runner=X']))\n")
    done = _fresh(code)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "ldpflow estimate: needs the Python module 'apache_beam', which is not installed: "
        "pip install 'ldpflow[beam]'")
    code = ("import sys\nfrom ldpflow.pipelines import options\n"
            "options.parse('estimate', ['--input=i', '--output=o', '--temp_location=t'])\n"
            "options.parse('heavy-hitters', ['--input=gs://b/i', '--output=o'])\n"
            "sys.exit('apache_beam' in sys.modules)")
    done = _fresh(code)
    assert done.returncode == 0, done.stderr
