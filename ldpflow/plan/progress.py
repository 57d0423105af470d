"""Progress of a long job on stderr: records read, reports/s and an ETA, every 10 s.

One mechanism for every engine: a job makes a :class:`ProgressSpec` (its id, the bytes its
ranges plan to read, the interval), which pickles and goes with the read tasks; each range
read (the plan's :func:`ldpflow.plan.steps.read_range`, Beam's ``ReadRangeFn``) asks the
spec for the process's :class:`Progress` of that job (:meth:`ProgressSpec.tracker`) and
adds what it read. The process that started the job (the driver: the local engine, Beam's
in-process runner) sees every range, so its lines are the job's: records read, their rate,
bytes read of those planned and an ETA from the rate of bytes. A worker process of another
engine logs its own share (records, rate), without an ETA, as it does not see the others.
At the end the job logs one closing line (:func:`finished`).

Lines go to the ``ldpflow.progress`` logger (INFO; the CLI's logging writes to stderr);
``--quiet`` silences them (:func:`set_quiet`). A clock can be injected, so the tests run on
a fake clock, not on time.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["PROGRESS_SECONDS", "Progress", "ProgressSpec", "RangeProgress", "finished",
           "set_quiet"]

#: Seconds between two progress lines.
PROGRESS_SECONDS = 10.0

_LOGGER = logging.getLogger("ldpflow.progress")
_TRACKERS: dict[str, Progress] = {}
_LOCK = threading.Lock()


def set_quiet(quiet: bool) -> None:
    """Silence the progress lines (``--quiet``), or let them through (at INFO, whatever
    the level of the root logger)."""
    _LOGGER.setLevel(logging.WARNING if quiet else logging.INFO)


def _count(n: float) -> str:
    return f"{n:,.0f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """What one process has read of one job, and its lines at a steady interval.

    Parameters
    ----------
    total_bytes : int, optional
        The bytes the job plans to read (None: unknown, no ETA).
    interval : float
        Seconds between two lines.
    clock : callable
        Seconds, monotonic (default :func:`time.monotonic`; tests pass a fake one).
    label : str
        What the lines are of (``job``, or ``worker PID``).
    eta : bool
        Whether this process sees the whole job (then the lines give bytes and an ETA).
    log : callable, optional
        ``log(line)`` (default: the ``ldpflow.progress`` logger at INFO).
    started : float, optional
        When the job started, on ``clock`` (default: now).
    """

    def __init__(self, total_bytes: int | None = None, interval: float = PROGRESS_SECONDS,
                 clock: Callable[[], float] = time.monotonic, label: str = "job",
                 eta: bool = True, log: Callable[[str], None] | None = None,
                 started: float | None = None):
        self.total_bytes = total_bytes
        self.interval = float(interval)
        self._clock = clock
        self._label = label
        self._eta = eta
        self._log = log or (lambda line: _LOGGER.info("%s", line))
        self.started = clock() if started is None else float(started)
        self._last = self.started
        self.records = 0
        self.bytes = 0  # of ranges done
        self._partial: dict = {}  # bytes read so far of the ranges under way
        self._lock = threading.Lock()

    def add(self, records: int, *, part=None, part_bytes: int | None = None,
            done_bytes: int | None = None) -> None:
        """Count ``records`` more; ``part_bytes``: bytes read so far of range ``part``;
        ``done_bytes``: a range finished, of that many bytes (its partial count dropped).
        Logs a line when the interval has passed since the last one."""
        with self._lock:
            self.records += int(records)
            if done_bytes is not None:
                self._partial.pop(part, None)
                self.bytes += int(done_bytes)
            elif part is not None and part_bytes is not None:
                self._partial[part] = int(part_bytes)
            now = self._clock()
            if now - self._last < self.interval:
                return
            self._last = now
            line = self.line(now)
        self._log(line)

    @property
    def bytes_read(self) -> int:
        return self.bytes + sum(self._partial.values())

    def line(self, now: float | None = None, final: bool = False) -> str:
        """The progress line at ``now``: ``progress (job): 1,234,567 records read
        (123,456/s), 1.2 of 4.8 GB (25%), ETA 30s``."""
        now = self._clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.records / elapsed
        line = (f"progress ({self._label}): {_count(self.records)} records read "
                f"({_count(rate)}/s) in {_duration(elapsed)}")
        if final:
            return line + ", done"
        read = self.bytes_read
        if self._eta and self.total_bytes:
            share = min(read / self.total_bytes, 1.0)
            line += (f", {read / 1e9:.2f} of {self.total_bytes / 1e9:.2f} GB planned "
                     f"({share:.0%})")
            if read > 0:
                line += f", ETA {_duration(elapsed * (self.total_bytes - read) / read)}"
        return line

    def finish(self) -> None:
        """Log the closing line."""
        self._log(self.line(final=True))


@dataclasses.dataclass(frozen=True)
class ProgressSpec:
    """What a job's range reads need to report progress (it pickles: sent with the tasks).

    ``job``: the job's id; ``total_bytes``: the bytes its ranges plan to read;
    ``driver``: the process id of the process that made it (whose lines are the job's);
    ``started``: when, on :func:`time.monotonic` (the driver's rates count from then)."""

    job: str
    total_bytes: int | None = None
    interval: float = PROGRESS_SECONDS
    driver: int = dataclasses.field(default_factory=os.getpid)
    started: float = dataclasses.field(default_factory=time.monotonic)

    def tracker(self, clock: Callable[[], float] = time.monotonic) -> Progress:
        """This process's :class:`Progress` of the job (one per process and job)."""
        with _LOCK:
            found = _TRACKERS.get(self.job)
            if found is None:
                whole = os.getpid() == self.driver
                found = Progress(self.total_bytes, self.interval, clock,
                                 "job" if whole else f"worker {os.getpid()}", eta=whole,
                                 started=self.started if whole and clock is time.monotonic
                                 else None)
                _TRACKERS[self.job] = found
            return found

    def release(self) -> None:
        """Forget this process's tracker of the job."""
        with _LOCK:
            _TRACKERS.pop(self.job, None)


def finished(spec: ProgressSpec | None, records: int | None = None) -> None:
    """The job's closing line (on the driver), then forget its tracker; ``records``: the
    job's count of records read, when the driver's tracker did not see the reads (they ran
    in worker processes)."""
    if spec is None:
        return
    progress = spec.tracker()
    if records is not None:
        progress.records = int(records)
    progress.finish()
    spec.release()


class RangeProgress:
    """One range read's share of its job's :class:`Progress`: :meth:`chunk` after each
    parsed chunk (records, and the bytes read so far where the stream tells them: an
    uncompressed file), :meth:`done` at its end (the range's bytes)."""

    def __init__(self, spec: ProgressSpec | None, path: str, start: int, end: int | None,
                 stream=None, size: int | None = None):
        self._tracker = spec.tracker() if spec is not None else None
        self._part = (path, start)
        self._stream = None
        if self._tracker is None:
            return
        self._start = int(start)
        if end is None and size is None:
            size = _file_size(path)
        self._bytes = max((int(end) if end is not None else int(size or 0)) - self._start, 0)
        from ldpflow.wire.formats import is_compressed

        self._stream = None if is_compressed(path) else stream

    def _position(self) -> int | None:
        if self._stream is None:
            return None
        try:
            return min(max(int(self._stream.tell()) - self._start, 0), self._bytes)
        except (OSError, ValueError, AttributeError):
            return None

    def chunk(self, records: int) -> None:
        if self._tracker is not None:
            self._tracker.add(records, part=self._part, part_bytes=self._position())

    def done(self) -> None:
        if self._tracker is not None:
            self._tracker.add(0, part=self._part, done_bytes=self._bytes)


def _file_size(path: str) -> int | None:
    try:
        from ldpflow.plan.files import match

        found = match(path)
        return found[0][1] if found else None
    except (OSError, ValueError, ImportError):
        return None
