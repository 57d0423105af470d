"""Pub/Sub clients for ``ldpflow pubsub`` and ``ldpflow stream`` (no Beam): large pulls,
idempotent creation, and whether an emulator answers.

:func:`subscriber_client` is a subscriber that takes Pub/Sub's largest messages (10 MB) on
the emulator too: the client library opens the emulator's channel with gRPC's default 4 MiB
receive limit (the real service's channel has none), so one large message, or a pull of
many panes, failed with ``ResourceExhausted``. :func:`allow_large_pulls` makes every
``SubscriberClient`` made afterwards in this process (Beam's direct-runner reader's too)
such a subscriber; ``ldpflow stream`` and the emulator harness call it. Beam's direct-runner
reader also pulls at most 10 messages a bundle, and every bundle passes through every step
of the job (each step's set-up included): its subscriber (``google.cloud.pubsub.
SubscriberClient``, a name only that reader uses) asks for :data:`READER_PULL_MESSAGES` a
pull instead, so a backlog arrives in bundles of up to that many messages.

:func:`ensure_topic` and :func:`ensure_subscription` create resources by their full names and
accept ones that already exist (``ldpflow pubsub create`` uses them); :func:`emulator_answers`
tells whether an emulator listens at a host. The Google clients are imported when called.
"""

from __future__ import annotations

import os
import urllib.request

__all__ = [
    "CHANNEL_OPTIONS",
    "emulator_answers",
    "ensure_topic",
    "ensure_subscription",
    "subscriber_client",
    "allow_large_pulls",
    "READER_PULL_MESSAGES",
]

#: gRPC channel options of the emulator's subscriber: no receive limit below Pub/Sub's own
#: (10 MB a message; a pull answers with several), as the client library sets for the service.
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", -1),
                   ("grpc.max_send_message_length", -1))

#: Messages a pull of Beam's direct-runner reader asks for (Pub/Sub's largest pull; it
#: returns fewer when fewer are waiting). Beam's own figure is 10.
READER_PULL_MESSAGES = 1000


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


def _reader_subscriber_class(base):
    class ReaderSubscriberClient(base):
        """The subscriber of Beam's direct-runner reader: large messages, and pulls of at
        least :data:`READER_PULL_MESSAGES` messages."""

        def pull(self, *args, **kwargs):
            if kwargs.get("max_messages") is not None:
                kwargs["max_messages"] = max(int(kwargs["max_messages"]), READER_PULL_MESSAGES)
            return super().pull(*args, **kwargs)

    return ReaderSubscriberClient


def subscriber_client():
    """A Pub/Sub ``SubscriberClient`` that accepts messages up to Pub/Sub's 10 MB limit,
    on the emulator (``PUBSUB_EMULATOR_HOST``) as on the service. Use it as a context."""
    return _large_message_subscriber_class()()


def allow_large_pulls() -> None:
    """Make ``google.cloud.pubsub_v1.SubscriberClient`` a :func:`subscriber_client` class in
    this process, and ``google.cloud.pubsub.SubscriberClient`` (which Beam's direct runner
    builds for its Pub/Sub reads, and nothing else here) one that also pulls
    :data:`READER_PULL_MESSAGES` at a time. Idempotent; off the emulator the classes take
    large messages as the library's own do."""
    from google.cloud import pubsub, pubsub_v1

    if hasattr(pubsub_v1.SubscriberClient, "_ldpflow_base"):
        return
    cls = _large_message_subscriber_class()
    pubsub_v1.SubscriberClient = cls
    pubsub.SubscriberClient = _reader_subscriber_class(cls)


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
