"""The Pub/Sub emulator for tests, benchmarks and local development.

    with PubSubEmulator() as emulator:          # starts the emulator on a free port
        emulator.create_topic("reports")        # projects/<project>/topics/reports
        ...                                     # PUBSUB_EMULATOR_HOST is set meanwhile

The emulator is Google's Java emulator (Debian package ``google-cloud-cli-pubsub-emulator``;
``gcloud beta emulators pubsub start`` runs the same). It is started in its own process
group and stopped with it; its state lives in memory only.

:func:`subscriber_client` is a subscriber that takes Pub/Sub's largest messages (10 MB) on
the emulator too: the client library opens the emulator's channel with gRPC's default 4 MiB
receive limit (the real service's channel has none), so one large message, or a pull of
many panes, failed with ``ResourceExhausted``. :func:`allow_large_pulls` makes every
``SubscriberClient`` made afterwards in this process (Beam's direct-runner reader's too)
such a subscriber; the emulator harness calls it.

:func:`ensure_topic` and :func:`ensure_subscription` create resources by their full names and
accept ones that already exist (``ldpflow pubsub create`` uses them); :func:`emulator_answers`
tells whether an emulator listens at a host.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

__all__ = [
    "EmulatorUnavailable",
    "PubSubEmulator",
    "find_emulator",
    "emulator_answers",
    "ensure_topic",
    "ensure_subscription",
    "cancel_streaming",
    "subscriber_client",
    "allow_large_pulls",
]

#: gRPC channel options of the emulator's subscriber: no receive limit below Pub/Sub's own
#: (10 MB a message; a pull answers with several), as the client library sets for the service.
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", -1),
                   ("grpc.max_send_message_length", -1))


def _large_message_subscriber_class():
    from google.cloud import pubsub_v1

    base = getattr(pubsub_v1.SubscriberClient, "_ldpflow_base", pubsub_v1.SubscriberClient)

    class LargeMessageSubscriberClient(base):
        """A ``SubscriberClient`` whose emulator channel takes messages over 4 MiB."""

        _ldpflow_base = base

        def __init__(self, *args, **kwargs):
            host = os.environ.get("PUBSUB_EMULATOR_HOST")
            if host and "transport" not in kwargs:
                import grpc
                from google.pubsub_v1.services.subscriber.transports import (
                    SubscriberGrpcTransport,
                )

                channel = grpc.insecure_channel(host, options=list(CHANNEL_OPTIONS))
                kwargs["transport"] = SubscriberGrpcTransport(channel=channel)
            super().__init__(*args, **kwargs)

    return LargeMessageSubscriberClient


def subscriber_client():
    """A Pub/Sub ``SubscriberClient`` that accepts messages up to Pub/Sub's 10 MB limit,
    on the emulator (``PUBSUB_EMULATOR_HOST``) as on the service. Use it as a context."""
    return _large_message_subscriber_class()()


def allow_large_pulls() -> None:
    """Make ``google.cloud.pubsub.SubscriberClient`` (which Beam's direct runner builds for
    its Pub/Sub reads) a :func:`subscriber_client` class in this process. Idempotent; off
    the emulator the class behaves as the library's own."""
    from google.cloud import pubsub, pubsub_v1

    if hasattr(pubsub_v1.SubscriberClient, "_ldpflow_base"):
        return
    cls = _large_message_subscriber_class()
    pubsub_v1.SubscriberClient = cls
    pubsub.SubscriberClient = cls

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


def emulator_answers(host: str, timeout: float = 1.0) -> bool:
    """Whether a Pub/Sub emulator answers at ``host`` (``HOST:PORT``; it serves ``Ok`` on /)."""
    try:
        with urllib.request.urlopen(f"http://{host}/", timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):  # refused, timed out, or not a host:port
        return False


def ensure_topic(path: str) -> bool:
    """Create the topic ``projects/P/topics/T`` unless it exists; returns whether it was
    created."""
    from google.api_core import exceptions
    from google.cloud import pubsub_v1

    try:
        pubsub_v1.PublisherClient().create_topic(name=path, timeout=30)
    except exceptions.AlreadyExists:
        return False
    return True


def ensure_subscription(path: str, topic: str, ack_deadline_seconds: int = 60) -> bool:
    """Create the subscription ``path`` to ``topic`` (full names) unless it exists; returns
    whether it was created. An existing subscription is left as it is, whatever its topic."""
    from google.api_core import exceptions

    with subscriber_client() as client:
        try:
            client.create_subscription(name=path, topic=topic,
                                       ack_deadline_seconds=ack_deadline_seconds, timeout=30)
        except exceptions.AlreadyExists:
            return False
    return True


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
