"""The ``ldpflow`` command's conventions: flags, help, version, exit status, missing extras."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ldpflow.pipelines import cli  # noqa: E402
from ldpflow.pipelines.common import job_help, job_options  # noqa: E402
from ldpflow.pipelines.options import COMMANDS, JOBS  # noqa: E402


def test_version_prints_the_package_version(capsys):
    import ldpflow

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ldpflow {ldpflow.__version__}"


def test_top_level_help_lists_every_command_with_one_line(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command, declared in COMMANDS.items():
        assert f"  {command}" in out and declared.summary in out
    assert "``" not in out  # no raw reStructuredText
    assert cli.main([]) == 2  # no command: the help, and a usage status


@pytest.mark.parametrize("flag,closest", [("--expect_epsilom=1", "--expect_epsilon"),
                                          ("--method=base", "--methods"),
                                          ("--max_dead_letters=0.5",
                                           "--max_dead_letter_fraction")])
def test_a_misspelt_flag_is_an_error_naming_the_closest(capsys, flag, closest):
    status = cli.main(["estimate", "--engine=beam", "--input=x", "--output=y", flag])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == [f"ldpflow estimate: error: unrecognized flag {flag.split('=')[0]}; "
                   f"did you mean {closest}?"]


def test_another_jobs_flag_is_refused():
    with pytest.raises(SystemExit, match="unrecognized flag --k"):
        job_options("estimate", ["--input=x", "--output=y", "--k=3"])
    with pytest.raises(SystemExit, match="unrecognized flag --methods"):
        job_options("heavy-hitters", ["--input=x", "--output=y", "--k=3", "--bits=8",
                                      "--methods=base"])


def test_beam_flags_are_accepted_and_reach_the_options():
    options, args = job_options("estimate", ["--input=x", "--output=y", "--runner=FnApiRunner",
                                             "--direct_num_workers=2"])
    assert args.input == "x" and args.dedup == "report_id"  # a default
    assert options.get_all_options()["direct_num_workers"] == 2


def test_a_stray_argument_and_a_bad_value_are_usage_errors():
    with pytest.raises(SystemExit, match="unexpected argument 'extra'"):
        job_options("estimate", ["--input=x", "--output=y", "extra"])
    with pytest.raises(SystemExit, match="argument --max_keys: invalid int value"):
        job_options("estimate", ["--input=x", "--output=y", "--max_keys=many"])
    with pytest.raises(SystemExit, match="argument --dedup: invalid choice"):
        job_options("estimate", ["--input=x", "--output=y", "--dedup=sometimes"])


def test_missing_required_flags_are_named():
    with pytest.raises(SystemExit,
                       match=r"required: --input, --output \(see ldpflow estimate --help\)$"):
        job_options("estimate", [])


@pytest.mark.parametrize("job", sorted(JOBS))
def test_job_help_marks_required_flags_and_shows_defaults_and_choices(job, capsys):
    assert cli.main([job, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ldpflow {job}")
    parser = job_help(JOBS[job])
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag = action.option_strings[0]
        assert flag in out
        if action.required:
            assert f"[{flag} " not in out  # argparse brackets only optional flags
        if action.choices:
            assert "{" + ",".join(map(str, action.choices)) + "}" in out
    assert [action.dest for action in parser._actions if action.required] == list(
        JOBS[job].required)
    assert "(default: " in out and "``" not in out


def test_the_dask_runner_is_refused_with_the_reason(tmp_path, capsys):
    (tmp_path / "r.jsonl").write_text("")
    status = cli.main(["estimate", f"--input={tmp_path}/r.jsonl", f"--output={tmp_path}/o",
                       "--runner=DaskRunner"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert "--runner=DaskRunner is not supported" in err[0] and "tagged output" in err[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv,module", [
    # the acceptance policy's defaults (pyarrow's wire layer) come before the Beam job
    (["estimate", "--input=IN/*", "--output=OUT"], "pyarrow"),
    (["heavy-hitters", "--input=IN/*", "--output=OUT", "--k=4", "--bits=8"], "pyarrow"),
    (["stream", "--subscription=projects/p/subscriptions/s", "--output=OUT"], "pyarrow"),
    (["simulate", "--oracle=grr", "--epsilon=1", "--domain_size=4", "--users=10",
      "--output=OUT"], "pyarrow"),
    # the demo's estimate runs on the default engine (--engine auto: local), without Beam
    (["demo", "--output=OUT"], "pyarrow"),
])
def test_a_core_only_install_names_the_extra_and_writes_nothing(tmp_path, argv, module):
    hide = "; ".join(f"sys.modules[{name!r}] = None" for name in
                     ("apache_beam", "fastavro", "pyarrow", "polars", "cramjam"))
    argv = [arg.replace("IN", str(tmp_path)).replace("OUT", str(tmp_path / "out"))
            for arg in argv]
    code = (f"import sys; {hide}\nfrom ldpflow.pipelines.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"ldpflow {argv[0]}: needs the Python module {module!r}, which is not installed: "
        "pip install 'ldpflow[beam]'")
    assert not (tmp_path / "out").exists()
