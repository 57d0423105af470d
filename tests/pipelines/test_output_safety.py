"""What a job may do to its output folder: nothing outside it, no file it did not write
removed, no staging folder left after a failure, an unwritable output refused up front."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ldpflow.pipelines import cli, estimate, simulate

MANIFEST = ".ldpflow-manifest.json"  # docs/pipeline.md, "Output safety"

pytestmark = pytest.mark.pipeline


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    simulate.run(["--oracle", "grr", "--epsilon", "1", "--domain_size", "8", "--users", "300",
                  "--seed", "3", "--output", str(out), "--shards", "1"])
    return out


@pytest.fixture(params=["beam", "local"])
def run_estimate(request):
    """``ldpflow estimate`` on each engine: what it may do to its output is the same."""

    def run(capsys, inputs, output):
        status = cli.main(["estimate", f"--input={inputs}", f"--output={output}",
                           "--methods=base", f"--engine={request.param}"])
        return status, capsys.readouterr().err.strip().splitlines()

    return run


def staging_left(output) -> list[str]:
    return [p.name for p in output.iterdir() if p.name.startswith(".staging-")]


def with_dead_letters(tmp_path, reports):
    """An input of the valid reports and one bad file: its run writes a dead-letter file."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "reports.avro").write_bytes((reports / "reports-00000-of-00001.avro").read_bytes())
    (mixed / "junk.jsonl").write_text('{"oracle": "nope"}\n')
    return mixed


# -- item 8: never through a link, never a file ldpflow did not write --------------------------
def test_a_dead_letters_link_is_refused_and_the_folder_it_points_to_is_untouched(
        run_estimate, tmp_path, reports, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.jsonl").write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "dead_letters").symlink_to(outside, target_is_directory=True)
    status, err = run_estimate(capsys, f"{reports}/*.avro", out)
    assert (outside / "precious.jsonl").read_text() == "keep me\n"  # the file outside survives
    assert status == 2 and len(err) == 1
    assert err[0].startswith(f"ldpflow estimate: error: --output '{out}': dead_letters is a "
                             "symbolic link")
    assert sorted(p.name for p in out.iterdir()) == ["dead_letters"]  # nothing ran


def test_the_commit_itself_never_follows_a_dead_letters_link(run_estimate, tmp_path, reports,
                                                             capsys):
    """Past the check (the link made after it): the commit refuses, removes nothing."""
    import apache_beam as beam

    from ldpflow.pipelines.common import job_options, parse_methods, run_pipeline

    mixed = with_dead_letters(tmp_path, reports)
    out = tmp_path / "out"
    assert run_estimate(capsys, f"{mixed}/*", out)[0] == 0
    written = sorted(p.name for p in (out / "dead_letters").iterdir())
    assert written and all(name.startswith("junk.jsonl-") for name in written)
    outside = tmp_path / "outside"
    (out / "dead_letters").rename(outside)
    (outside / "precious.jsonl").write_text("keep me\n")
    (out / "dead_letters").symlink_to(outside, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    _, args = job_options("estimate", [f"--input={reports}/*.avro", f"--output={out}",
                                       "--methods=base"])
    pipeline = beam.Pipeline(runner="DirectRunner")
    estimate.build(pipeline, args, parse_methods("base"))
    with pytest.raises(Exception, match="symbolic link"):
        run_pipeline(pipeline, pipeline._options, "ldpflow estimate")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert staging_left(out) == []


def test_input_files_in_the_outputs_dead_letters_are_refused_not_deleted(
        run_estimate, tmp_path, reports, capsys):
    out = tmp_path / "out"
    (out / "dead_letters").mkdir(parents=True)
    mine = out / "dead_letters" / "reports.avro"
    mine.write_bytes((reports / "reports-00000-of-00001.avro").read_bytes())
    status, err = run_estimate(capsys, f"{out}/dead_letters/*", out)
    assert mine.exists()
    assert status == 2 and len(err) == 1
    assert "dead_letters/ holds 1 entry ldpflow did not write (reports.avro)" in err[0]


def test_a_rerun_removes_exactly_the_stale_dead_letters_ldpflow_wrote(
        run_estimate, tmp_path, reports, capsys):
    mixed = with_dead_letters(tmp_path, reports)
    out = tmp_path / "out"
    assert run_estimate(capsys, f"{mixed}/*", out)[0] == 0
    manifest = json.loads((out / MANIFEST).read_text())
    (letter,) = [f for f in manifest["files"] if f.startswith("dead_letters/")]
    assert (out / letter).exists()
    assert run_estimate(capsys, f"{reports}/*.avro", out)[0] == 0
    assert list((out / "dead_letters").iterdir()) == []  # the stale one went
    assert json.loads((out / MANIFEST).read_text())["files"] == [
        "estimates.avro", "estimates.json"]


def test_an_output_without_a_manifest_keeps_its_own_dead_letters_removable_only(
        run_estimate, tmp_path, reports, capsys):
    """An output of an earlier version (no manifest): its dead-letter files are known by
    their content; a file of the same form whose content names another source is not."""
    mixed = with_dead_letters(tmp_path, reports)
    out = tmp_path / "out"
    assert run_estimate(capsys, f"{mixed}/*", out)[0] == 0
    (out / MANIFEST).unlink()
    (letter,) = (out / "dead_letters").iterdir()
    impostor = out / "dead_letters" / "other.jsonl-0123456789.jsonl"
    impostor.write_text(letter.read_text())  # its source gives another name
    status, err = run_estimate(capsys, f"{reports}/*.avro", out)
    assert status == 2 and "(other.jsonl-0123456789.jsonl)" in err[0]
    impostor.unlink()
    assert run_estimate(capsys, f"{reports}/*.avro", out)[0] == 0
    assert list((out / "dead_letters").iterdir()) == []


# -- item 9: a full disk leaves no staging folder; the rerun succeeds ---------------------------
def test_a_full_disk_leaves_the_output_as_it_was_and_a_rerun_succeeds(
        run_estimate, tmp_path, reports, capsys, monkeypatch):
    from ldpflow.wire import formats

    out = tmp_path / "out"
    assert run_estimate(capsys, f"{reports}/*.avro", out)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    real = formats.write_records

    def full(stream, *args, **kwargs):
        stream.write(b"\0" * 4096)  # a partial file in the staging folder
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(formats, "write_records", full)
    status, err = run_estimate(capsys, f"{reports}/*.avro", out)
    assert status == 1
    assert err[-1] == ("ldpflow estimate: error: the job failed, its output is unchanged: "
                       "[Errno 28] No space left on device")
    assert staging_left(out) == []
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    monkeypatch.setattr(formats, "write_records", real)  # space is back
    assert run_estimate(capsys, f"{reports}/*.avro", out)[0] == 0
    assert staging_left(out) == []


# -- item 10: an output that cannot be written is refused before the job runs -------------------
@pytest.fixture
def blocked(tmp_path):
    """An output path under a regular file: no one (root neither) can create it."""
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "out"


def test_an_output_that_cannot_be_created_is_one_line_before_the_job(
        run_estimate, tmp_path, reports, blocked, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the pipeline was built")

    monkeypatch.setattr(estimate, "build", never)
    status, err = run_estimate(capsys, f"{reports}/*.avro", blocked)
    assert status == 2
    assert err == [f"ldpflow estimate: error: cannot create --output '{blocked}': "
                   "Not a directory"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_read_only_output_is_one_line_before_the_job(run_estimate, tmp_path, reports, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        status, err = run_estimate(capsys, f"{reports}/*.avro", out)
    finally:
        out.chmod(0o700)
    assert status == 2 and err == [f"ldpflow estimate: error: --output '{out}' is not "
                                   "writable: Permission denied"]


def test_an_output_that_is_a_file_is_refused(run_estimate, tmp_path, reports, capsys):
    target = tmp_path / "a-file"
    target.write_text("x")
    status, err = run_estimate(capsys, f"{reports}/*.avro", target)
    assert status == 2 and err == [f"ldpflow estimate: error: --output '{target}' is a file, "
                                   "not a folder"]
    assert target.read_text() == "x"


@pytest.mark.parametrize("command", [
    ["heavy-hitters", "--input={pem}/*", "--output={blocked}"],
    ["heavy-hitters", "--input={pem}/*", "--output={blocked}", "--engine=beam"],
    ["simulate", "--oracle=grr", "--epsilon=1", "--domain_size=8", "--users=10",
     "--output={blocked}"],
    ["report", "--input={estimates}", "--output={blocked}/page.html"],
    ["stream", "--subscription=projects/ldpflow-dev/subscriptions/s",
     "--output_topic=projects/ldpflow-dev/topics/t", "--output={blocked}"],
    ["stream", "--subscription=projects/ldpflow-dev/subscriptions/s",
     "--output_topic=projects/ldpflow-dev/topics/t", "--dead_letter_output={blocked}"],
])
def test_every_job_refuses_an_unwritable_output_in_one_line(
        run_estimate, command, tmp_path, reports, blocked, capsys, monkeypatch):
    if command[0] == "stream":  # no Pub/Sub: the output is checked before it would be used
        from ldpflow.pipelines import stream

        monkeypatch.setattr(stream, "_check_pubsub", lambda opts, runner: None)
    pem = tmp_path / "pem"
    simulate.run(["--oracle=pem", "--bits=8", "--k=2", "--epsilon=4", "--domain_size=20",
                  "--users=200", f"--output={pem}", "--shards=1"])
    estimates = tmp_path / "est"
    assert run_estimate(capsys, f"{reports}/*.avro", estimates)[0] == 0
    argv = [arg.format(pem=pem, blocked=blocked, estimates=estimates) for arg in command]
    status = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"ldpflow {command[0]}: error: cannot create ")
    assert "Traceback" not in err[0]


def test_a_full_disk_on_the_heavy_hitter_plan_is_one_line_and_leaves_no_staging(
        tmp_path, capsys, monkeypatch):
    """The default heavy-hitters run (the job plan) fails as the Beam job does: one line,
    exit 1, the previous output as it was, no staging folder left."""
    from ldpflow.plan import outputs

    pem = tmp_path / "pem"
    simulate.run(["--oracle=pem", "--bits=8", "--k=2", "--epsilon=4", "--domain_size=20",
                  "--users=200", f"--output={pem}", "--shards=1"])
    out = tmp_path / "hh"
    argv = ["heavy-hitters", f"--input={pem}/*.avro", f"--output={out}", "--quiet"]
    assert cli.main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    real = outputs.write_staged

    def full(staging, name, data):
        real(staging, name, data[:10])  # a partial file in the staging folder
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "write_staged", full)
    capsys.readouterr()
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("ldpflow heavy-hitters: error: the job failed, its output is "
                       "unchanged: [Errno 28] No space left on device")
    assert staging_left(out) == []
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def _a_concurrent_run_stages_then_the_disk_fills(monkeypatch, out):
    """While this run writes, another run on the same output makes its staging folder
    (with a file in it); then this run's disk fills. Returns the other run's folder."""
    from ldpflow.plan import outputs

    other = out / ".staging-0123456789abcdef0123456789abcdef"
    real = outputs.write_staged

    def full(staging, name, data):
        other.mkdir(exist_ok=True)
        (other / "estimates.json").write_bytes(b"{}")
        real(staging, name, data[:10])  # a partial file in this run's staging folder
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "write_staged", full)
    return other


@pytest.mark.parametrize("job", ["estimate", "heavy-hitters"])
def test_a_failed_plan_run_removes_its_own_staging_not_a_concurrent_runs(
        job, tmp_path, reports, capsys, monkeypatch):
    """A failed run removes the staging folder it made, and only that one: a folder another
    run made meanwhile under the same output (its files on their way) is left to that run."""
    source = reports
    if job == "heavy-hitters":
        source = tmp_path / "pem"
        simulate.run(["--oracle=pem", "--bits=8", "--k=2", "--epsilon=4", "--domain_size=20",
                      "--users=200", f"--output={source}", "--shards=1"])
    out = tmp_path / "out"
    argv = [job, f"--input={source}/*.avro", f"--output={out}", "--quiet", "--engine=local"]
    if job == "estimate":
        argv.append("--methods=base")
    assert cli.main(argv) == 0
    other = _a_concurrent_run_stages_then_the_disk_fills(monkeypatch, out)
    capsys.readouterr()
    assert cli.main(argv) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "[Errno 28] No space left on device")
    assert staging_left(out) == [other.name]  # this run's own folder is gone
    assert (other / "estimates.json").read_bytes() == b"{}"


def test_the_plan_run_functions_remove_their_staging_themselves(tmp_path, reports,
                                                                monkeypatch):
    """Called as a library (``ldpflow.plan.job.run_estimate``, without the command line's
    wrapper), a failed run leaves no staging folder of its own and raises its error."""
    from ldpflow.plan.backend import LocalBackend
    from ldpflow.plan.job import EstimateJob, run_estimate
    from ldpflow.wire.parse import AcceptancePolicy

    out = tmp_path / "lib"
    out.mkdir()
    other = _a_concurrent_run_stages_then_the_disk_fills(monkeypatch, out)
    job = EstimateJob(input=f"{reports}/*.avro", output=str(out), methods=("base",),
                      policy=AcceptancePolicy())
    with pytest.raises(OSError, match="No space left on device"):
        run_estimate(LocalBackend(), job)
    assert staging_left(out) == [other.name]
