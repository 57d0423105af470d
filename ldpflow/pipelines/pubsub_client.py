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
pull instead; since the emulator answers at most 100 a pull whatever is asked, it then
takes what else is waiting, by pulls that return at once, up to
:data:`READER_BUNDLE_MESSAGES` a bundle; and once a bundle held messages it pulls the next
one on a thread of its own while the job decodes this one (one pull ahead at most, handed
back to Pub/Sub when the reader does not take it: the job was cancelled). Beam acknowledges
a bundle's messages when it takes them, as before: what is pulled ahead and not yet taken
is not acknowledged, so nothing is lost that a job's end did not take.

:func:`ensure_topic` and :func:`ensure_subscription` create resources by their full names and
accept ones that already exist (``ldpflow pubsub create`` uses them); :func:`emulator_answers`
tells whether an emulator listens at a host. The Google clients are imported when called.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.request
import warnings

__all__ = [
    "CHANNEL_OPTIONS",
    "emulator_answers",
    "ensure_topic",
    "ensure_subscription",
    "subscriber_client",
    "allow_large_pulls",
    "READER_PULL_MESSAGES",
    "READER_BUNDLE_MESSAGES",
]

_LOGGER = logging.getLogger(__name__)

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


#: Messages a bundle of Beam's direct-runner reader gathers at most from what is waiting
#: (pulls that return at once after the first): a bundle is decoded while the next one is
#: pulled, so bundles of a few hundred messages keep both busy.
READER_BUNDLE_MESSAGES = 300
#: Seconds a pull made ahead waits to be taken before its messages are handed back to
#: Pub/Sub (``modify_ack_deadline`` 0, so they are delivered again at once): the reader was
#: cancelled meanwhile.
UNCLAIMED_SECONDS = 5.0
#: Whether the reader pulls its next bundle ahead (False: each pull when Beam asks, as
#: before; for measuring what pulling ahead gains).
PULL_AHEAD = True


class _PullAhead:
    """One pull of the reader's next bundle, made on a thread of its own while the job
    processes the bundle before it.

    ``pull()`` returns a response or raises; :meth:`take` waits for it (the error is raised
    in the caller). A response not taken within :data:`UNCLAIMED_SECONDS` of its arrival is
    handed back with ``hand_back(response)`` (the reader stopped), and :meth:`take` then
    returns None, as it does while the pull has not answered.
    """

    def __init__(self, pull, hand_back):
        self._pull, self._hand_back = pull, hand_back
        self._answered, self._claimed = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self._response = self._error = None
        threading.Thread(target=self._run, name="ldpflow-pull-ahead", daemon=True).start()

    def _run(self):
        try:
            self._response = self._pull()
        except BaseException as exc:  # noqa: BLE001 - raised again in the reader's thread
            self._error = exc
        self._answered.set()
        if self._claimed.wait(UNCLAIMED_SECONDS):
            return
        with self._lock:
            if self._claimed.is_set():
                return
            self._abandoned = True
        if self._response is not None:
            try:
                self._hand_back(self._response)
            except Exception:  # noqa: BLE001 - they are delivered again at their deadline
                _LOGGER.debug("could not hand back messages pulled ahead", exc_info=True)

    @property
    def handed_back(self) -> bool:
        """Whether its messages went back to Pub/Sub untaken."""
        return self._abandoned

    def take(self, timeout: float | None):
        """The response, or None while the pull has not answered in ``timeout`` s (or its
        messages were handed back)."""
        if not self._answered.wait(timeout):
            return None
        with self._lock:
            if self._abandoned:
                return None
            self._claimed.set()
        if self._error is not None:
            raise self._error
        return self._response


class _Pulled:
    """The messages of a bundle gathered from several pulls, as Beam's reader reads a
    ``PullResponse`` (its ``received_messages`` only)."""

    __slots__ = ("received_messages",)

    def __init__(self, received_messages: list):
        self.received_messages = received_messages


def _reader_subscriber_class(base):
    class ReaderSubscriberClient(base):
        """The subscriber of Beam's direct-runner reader: large messages, pulls of at
        least :data:`READER_PULL_MESSAGES` messages, bundles of up to
        :data:`READER_BUNDLE_MESSAGES` of the messages waiting, and the next bundle pulled
        while the job works on this one."""

        _ahead: dict | None = None

        def pull(self, *args, **kwargs):
            if kwargs.get("max_messages") is None:
                return super().pull(*args, **kwargs)
            kwargs["max_messages"] = max(int(kwargs["max_messages"]), READER_PULL_MESSAGES)
            subscription = kwargs.get("subscription")
            if args or not subscription:
                return super().pull(*args, **kwargs)
            if self._ahead is None:
                self._ahead = {}
            ahead = self._ahead.pop(subscription, None)
            if ahead is None:
                response = self._bundle(kwargs)
            else:
                response = ahead.take(kwargs.get("timeout"))
                if response is None:  # not answered yet (an idle subscription)
                    if not ahead.handed_back:
                        self._ahead[subscription] = ahead
                        return type(self)._empty_response()
                    response = self._bundle(kwargs)
            received = getattr(response, "received_messages", None)
            if received and PULL_AHEAD:  # traffic: pull the next bundle meanwhile
                self._ahead[subscription] = _PullAhead(
                    lambda: self._bundle(kwargs),
                    lambda r: self._hand_back(subscription, r))
            return response

        def _bundle(self, kwargs):
            """One pull as asked, then (while answers hold messages) pulls that return at
            once: the emulator answers at most 100 messages a pull whatever is asked (the
            service, fewer than asked at times), so a backlog arrives in bundles of up to
            :data:`READER_BUNDLE_MESSAGES` rather than 100. Every message pulled is in the
            one response that Beam acknowledges."""
            response = super().pull(**kwargs)
            received = getattr(response, "received_messages", None)
            if received is None or not 0 < len(received) < READER_BUNDLE_MESSAGES:
                return response
            received = list(received)  # a list: extending the response would copy them
            while len(received) < READER_BUNDLE_MESSAGES:
                more = self._pull_waiting(kwargs["subscription"],
                                          READER_BUNDLE_MESSAGES - len(received),
                                          kwargs.get("timeout"))
                if not more:
                    break
                received += more
            return _Pulled(received)

        def _pull_waiting(self, subscription, count, timeout):
            """The messages waiting now (a pull that returns at once, empty when none)."""
            with warnings.catch_warnings():  # return_immediately is deprecated for the
                # service's subscribers that wait on idle subscriptions; here it is meant
                warnings.simplefilter("ignore", DeprecationWarning)
                return super().pull(subscription=subscription, max_messages=count,
                                    return_immediately=True, timeout=timeout
                                    ).received_messages

        def _hand_back(self, subscription, response):
            ack_ids = [m.ack_id for m in response.received_messages]
            if ack_ids:
                self.modify_ack_deadline(subscription=subscription, ack_ids=ack_ids,
                                         ack_deadline_seconds=0)

        @staticmethod
        def _empty_response():
            from google.pubsub_v1 import types

            return types.PullResponse()

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
