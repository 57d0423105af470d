"""Progress lines of long jobs (``ldpflow.plan.progress``), on a fake clock."""

from __future__ import annotations

import logging
import os

import pytest

from ldpflow.plan import progress as progress_module
from ldpflow.plan import steps
from ldpflow.plan.job import plan_ranges
from ldpflow.plan.progress import Progress, ProgressSpec
from ldpflow.wire.parse import AcceptancePolicy
from tests.plan import inputs


class FakeClock:
    def __init__(self, step: float = 0.0):
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_progress_logs_at_the_interval_with_rate_bytes_and_eta():
    clock, lines = FakeClock(), []
    progress = Progress(total_bytes=4_000_000_000, interval=10, clock=clock, log=lines.append)
    clock.now += 4
    progress.add(1_000_000, part="a", part_bytes=500_000_000)
    assert lines == []  # 4 s: not yet
    clock.now += 6
    progress.add(1_000_000, part="a", part_bytes=1_000_000_000)
    assert lines == ["progress (job): 2,000,000 records read (200,000/s) in 10s, 1.00 of "
                     "4.00 GB planned (25%), ETA 30s"]
    clock.now += 5
    progress.add(0, part="a", done_bytes=1_000_000_000)  # a range done: its bytes, once
    progress.add(500_000, part="b", part_bytes=1_000_000_000)
    assert len(lines) == 1 and progress.bytes_read == 2_000_000_000
    clock.now += 5
    progress.add(500_000, part="b", part_bytes=2_000_000_000)
    assert lines[-1] == ("progress (job): 3,000,000 records read (150,000/s) in 20s, 3.00 "
                         "of 4.00 GB planned (75%), ETA 7s")
    progress.finish()
    assert lines[-1] == "progress (job): 3,000,000 records read (150,000/s) in 20s, done"


def test_progress_of_a_worker_or_of_an_unknown_size_has_no_eta():
    clock, lines = FakeClock(), []
    worker = Progress(1000, interval=1, clock=clock, label="worker 7", eta=False,
                      log=lines.append)
    unsized = Progress(None, interval=1, clock=clock, log=lines.append)
    clock.now += 90
    worker.add(30, part=1, part_bytes=10)
    unsized.add(60)
    assert lines == ["progress (worker 7): 30 records read (0/s) in 1m30s",
                     "progress (job): 60 records read (1/s) in 1m30s"]


def test_range_reads_add_their_records_and_bytes_to_the_jobs_progress(tmp_path):
    files = inputs.write_inputs(tmp_path)
    tasks = plan_ranges(files)
    spec = ProgressSpec("test-job", total_bytes=sum(os.path.getsize(t.path) for t in tasks),
                        interval=10)
    clock = FakeClock(step=6.0)  # every call 6 s later: a line every other chunk at most
    tracker = spec.tracker(clock=clock)
    lines = []
    tracker._log = lines.append
    try:
        reads = [steps.read_range(t, AcceptancePolicy(), progress=spec) for t in tasks]
        assert tracker.records == sum(r.records for r in reads) == 1303
        assert tracker.bytes_read == spec.total_bytes  # every range done, by its bytes
        assert lines and all(line.startswith("progress (job): ") for line in lines)
        assert "ETA" in lines[-1]
        # Reads that do not account (the light ids pass) add nothing.
        steps.read_range(tasks[0], AcceptancePolicy(), account=False, progress=spec)
        assert tracker.records == 1303
    finally:
        spec.release()


@pytest.mark.pipeline
@pytest.mark.parametrize("engine", ["local", "beam"])
@pytest.mark.parametrize("quiet", [False, True])
def test_estimate_logs_its_progress_unless_quiet(tmp_path, caplog, engine, quiet):
    from ldpflow.pipelines import estimate

    files = inputs.write_inputs(tmp_path)
    argv = [f"--input={files}", f"--output={tmp_path}/out", f"--engine={engine}"]
    with caplog.at_level(logging.INFO, logger="ldpflow.progress"):
        try:
            estimate.run(argv + (["--quiet"] if quiet else []))
        finally:
            progress_module.set_quiet(False)
    lines = [r.getMessage() for r in caplog.records if r.name == "ldpflow.progress"]
    if quiet:
        assert lines == []
    else:
        assert lines[-1].startswith("progress (job): 1,303 records read")
        assert lines[-1].endswith(", done")
