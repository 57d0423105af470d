"""The Pub/Sub emulator for tests, benchmarks and local development (not used by the jobs).

    with PubSubEmulator() as emulator:          # starts the emulator on a free port
        emulator.create_topic("reports")        # projects/<project>/topics/reports
        ...                                     # PUBSUB_EMULATOR_HOST is set meanwhile

The emulator is Google's Java emulator (Debian package ``google-cloud-cli-pubsub-emulator``;
``gcloud beta emulators pubsub start`` runs the same). It is started in its own process
group and stopped with it; its state lives in memory only. The clients it uses are the
jobs' own (:mod:`ldpflow.pipelines.pubsub_client`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from ldpflow.pipelines.pubsub_client import (
    allow_large_pulls,
    emulator_answers,
    ensure_subscription,
    ensure_topic,
)

__all__ = [
    "EmulatorUnavailable",
    "PubSubEmulator",
    "find_emulator",
    "cancel_streaming",
]

_CANDIDATES = (
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
    "/usr/share/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
)


class EmulatorUnavailable(RuntimeError):
    """The emulator (or Java, or google-cloud-pubsub) is not installed here."""


def find_emulator() -> str:
    """The emulator's launcher, from ``LDPFLOW_PUBSUB_EMULATOR``, the package, or PATH."""
    for path in (os.environ.get("LDPFLOW_PUBSUB_EMULATOR"), *_CANDIDATES,
                 shutil.which("cloud-pubsub-emulator")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise EmulatorUnavailable(
        "the Pub/Sub emulator is not installed (Debian package "
        "google-cloud-cli-pubsub-emulator; or set LDPFLOW_PUBSUB_EMULATOR to its launcher)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PubSubEmulator:
    """Start the emulator on 127.0.0.1 and point the Pub/Sub clients at it."""

    def __init__(self, project: str = "ldpflow-test", port: int | None = None,
                 start_timeout: float = 60.0):
        self.project = project
        self.port = port or _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self._timeout = start_timeout
        self._process: subprocess.Popen | None = None
        self._log = None
        self._previous_host: str | None = None

    def __enter__(self) -> PubSubEmulator:
        launcher = find_emulator()
        if shutil.which("java") is None:
            raise EmulatorUnavailable("the Pub/Sub emulator needs Java, which is not installed")
        try:
            from google.cloud import pubsub_v1  # noqa: F401
        except ImportError as exc:
            raise EmulatorUnavailable(
                "google-cloud-pubsub is not installed (pip install ldpflow[gcp])") from exc
        self._log = tempfile.NamedTemporaryFile(prefix="pubsub-emulator-", suffix=".log",
                                                delete=False)
        self._process = subprocess.Popen(
            [launcher, "--host=127.0.0.1", f"--port={self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self._timeout
        while not emulator_answers(self.host):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EmulatorUnavailable(f"the emulator did not start; see {self._log.name}")
            time.sleep(0.2)
        self._previous_host = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = self.host
        allow_large_pulls()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            try:
                os.killpg(self._process.pid, signal.SIGTERM)
                self._process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process = None
        if self._previous_host is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = self._previous_host

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) the emulator's processes have used so far (Linux
        ``/proc``; 0.0 elsewhere): benchmarks report the JVM's share of a run with it."""
        if self._process is None:
            return 0.0
        group, total = os.getpgid(self._process.pid), 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if int(fields[2]) == group:  # pgrp; then utime and stime at 11 and 12
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def topic(self, name: str) -> str:
        return f"projects/{self.project}/topics/{name}"

    def subscription(self, name: str) -> str:
        return f"projects/{self.project}/subscriptions/{name}"

    def create_topic(self, name: str) -> str:
        """Create (or keep) the topic ``name`` of the emulator's project; returns its path."""
        path = self.topic(name)
        ensure_topic(path)
        return path

    def create_subscription(self, name: str, topic: str) -> str:
        """Create (or keep) the subscription ``name`` to the topic ``topic``; returns its
        path."""
        path = self.subscription(name)
        ensure_subscription(path, self.topic(topic))
        return path


def cancel_streaming(result, wake_topic: str | None = None) -> None:
    """Cancel a streaming job on the direct runner without waiting out an idle pull.

    The direct runner's Pub/Sub reader blocks up to 30 s in a pull on an idle subscription and
    only then sees the cancellation; an empty message (no reports: ldpflow ignores it) on the
    job's input topic ends that pull at once.
    """
    if wake_topic:
        from google.cloud import pubsub_v1

        pubsub_v1.PublisherClient().publish(wake_topic, b"", ldpflow="wake").result(timeout=10)
    result.cancel()
