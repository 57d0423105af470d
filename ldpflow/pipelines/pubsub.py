"""``ldpflow pubsub``: Pub/Sub helpers that make ``ldpflow stream`` work locally, end to end.

Against the Pub/Sub emulator (``gcloud beta emulators pubsub start``, or the Debian package
``google-cloud-cli-pubsub-emulator``)::

    export PUBSUB_EMULATOR_HOST=127.0.0.1:8085
    ldpflow pubsub create --topic projects/ldpflow-dev/topics/reports \\
        --subscription projects/ldpflow-dev/subscriptions/reports-stream \\
        --output_topic projects/ldpflow-dev/topics/estimates \\
        --output_subscription projects/ldpflow-dev/subscriptions/estimates-pull
    ldpflow stream --subscription projects/ldpflow-dev/subscriptions/reports-stream \\
        --output_topic projects/ldpflow-dev/topics/estimates --window_size 60 \\
        --allowed_lateness 600 &
    ldpflow pubsub publish --topic projects/ldpflow-dev/topics/reports --input '/tmp/r/*.avro'
    ldpflow pubsub pull --subscription projects/ldpflow-dev/subscriptions/estimates-pull \\
        --wake_topic projects/ldpflow-dev/topics/reports --until_reports N --final_only

Commands
--------
create
    Topics and subscriptions by their full names; ones that exist already are kept.
publish
    Report files (Avro, JSON lines, Parquet) -> messages of ``--batch_size`` reports, their
    event times spread over the current window (``--event_times``), so the job's windows
    fire.
pull
    Print (and acknowledge) the messages of a subscription, e.g. the job's estimates;
    ``--until_reports N`` waits until the panes hold N reports (exit 1 on ``--timeout``),
    ``--wake_topic`` keeps a job on Beam's direct runner emitting its panes on time.

Contract: every command works on the emulator of ``--emulator_host`` or
``PUBSUB_EMULATOR_HOST`` and refuses real Pub/Sub unless ``--allow_production`` is given.
:func:`run` returns 0 when done and 1 on a run-time failure (no emulator answers, a resource
does not exist, no credentials), after one line on stderr; a usage error (a malformed
resource name, no emulator named) is a ``SystemExit`` whose code is one line of text (the
CLI prints it and exits 2). :func:`check_name`, :func:`check_job_resources` and
:func:`failure_message` give ``ldpflow stream`` the same one-line errors, and
:func:`guard_production` the same refusal of real Pub/Sub.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence

from ldpflow.pipelines import options

__all__ = [
    "run",
    "PubSubFailure",
    "check_name",
    "check_job_resources",
    "failure_message",
    "exit_failure",
    "guard_production",
    "rewrite_event_times",
    "parse_event_times",
    "DEFAULT_EVENT_TIMES",
    "MAX_MESSAGE_BYTES",
]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow pubsub"
_START_EMULATOR = "gcloud beta emulators pubsub start --host-port={host}"
#: Pub/Sub refuses larger messages (10 MB); bigger batches are split.
MAX_MESSAGE_BYTES = 10_000_000
# A project id as Beam's Pub/Sub source checks it (and Google Cloud's rule), and a topic or
# subscription id as Pub/Sub checks it: a letter, then 2 to 254 of [-A-Za-z0-9_.~+%].
_PROJECT = re.compile(r"[a-z][-a-z0-9:.]{4,61}[a-z0-9]")
_RESOURCE = re.compile(r"[A-Za-z][-A-Za-z0-9_.~+%]{2,254}")


class PubSubFailure(RuntimeError):
    """A run-time failure told in one line: no emulator answers, a topic or subscription
    does not exist, no credentials, or a Pub/Sub call failed."""


def exit_failure(prog: str, message: str) -> SystemExit:
    """Print ``prog: error: message`` on stderr; returns ``SystemExit(1)`` to raise."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return SystemExit(1)


def check_name(path: str, kind: str, flag: str) -> str:
    """Check a full resource name: ``projects/PROJECT/topics/NAME`` (``kind`` "topics") or
    ``projects/PROJECT/subscriptions/NAME`` ("subscriptions").

    Raises
    ------
    ValueError
        Naming ``flag``, the form and the value received.
    """
    form = f"projects/PROJECT/{kind}/NAME"
    parts = str(path).split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != kind:
        raise ValueError(f"{flag} must be {form}, got {path!r}")
    project, name = parts[1], parts[3]
    if not _PROJECT.fullmatch(project):
        raise ValueError(f"{flag}: the project of {path!r} must be a Google Cloud project id "
                         f"(6 to 63 lower-case letters, digits and hyphens, starting with a "
                         f"letter; e.g. ldpflow-dev), got {project!r}")
    if not _RESOURCE.fullmatch(name) or name.startswith("goog"):
        raise ValueError(f"{flag}: the name of {path!r} must be 3 to 255 letters, digits or "
                         f"-_.~+% starting with a letter (not 'goog'), got {name!r}")
    return path


def _where() -> str:
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    return f"the Pub/Sub emulator at {host}" if host else "Pub/Sub"


def failure_message(exc: BaseException) -> str | None:
    """One line for a failure of the Google Cloud clients (``None`` for any other
    exception): missing credentials, a missing resource, a refused or timed-out call."""
    try:
        from google.api_core import exceptions
        from google.auth import exceptions as auth_exceptions
    except ImportError:
        return None
    if isinstance(exc, auth_exceptions.DefaultCredentialsError):
        return _NO_CREDENTIALS
    if isinstance(exc, auth_exceptions.GoogleAuthError):
        return f"Google Cloud authentication failed: {_first_line(exc)}"
    if isinstance(exc, (exceptions.RetryError, exceptions.DeadlineExceeded)):
        return f"{_where()} did not answer in time ({_first_line(exc)})"
    if isinstance(exc, exceptions.NotFound):
        return f"not found on {_where()}: {_first_line(exc)}"
    if isinstance(exc, exceptions.GoogleAPICallError):
        return f"{_where()} refused a call: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_NO_CREDENTIALS = (
    "no Pub/Sub emulator and no Google Cloud credentials: set PUBSUB_EMULATOR_HOST=HOST:PORT "
    "to use the emulator (start it: gcloud beta emulators pubsub start, or the Debian "
    "package google-cloud-cli-pubsub-emulator; docs/streaming.md), or set up credentials for "
    "real Pub/Sub (gcloud auth application-default login)")


def _check_emulator(host: str, variable: str = "PUBSUB_EMULATOR_HOST") -> None:
    from ldpflow.pipelines.pubsub_client import emulator_answers

    if not emulator_answers(host, timeout=3.0):
        raise PubSubFailure(f"no Pub/Sub emulator answers at {variable}={host}: start one "
                            f"({_START_EMULATOR.format(host=host)})")


def _check_credentials() -> None:
    import google.auth
    from google.auth import exceptions as auth_exceptions

    try:
        google.auth.default()
    except auth_exceptions.DefaultCredentialsError:
        raise PubSubFailure(_NO_CREDENTIALS) from None


def _create_hint(subscription: str) -> str:
    project = subscription.split("/")[1]
    return (f"create it: ldpflow pubsub create --topic projects/{project}/topics/TOPIC "
            f"--subscription {subscription}")


def check_job_resources(subscription: str, topics: Mapping[str, str | None]) -> None:
    """Before a job runs locally: Pub/Sub is reachable (the emulator of
    ``PUBSUB_EMULATOR_HOST`` answers, or credentials exist), the subscription exists, and so
    does each topic (``{flag: path}``; ``None`` values are skipped).

    Raises
    ------
    PubSubFailure
        Saying what is missing and how to make it.
    """
    from google.api_core import exceptions
    from google.cloud import pubsub_v1

    from ldpflow.pipelines.pubsub_client import subscriber_client

    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if host:
        _check_emulator(host)
    else:
        _check_credentials()
    try:
        with subscriber_client() as client:
            try:
                client.get_subscription(subscription=subscription, timeout=30)
            except exceptions.NotFound:
                raise PubSubFailure(f"--subscription {subscription} does not exist on "
                                    f"{_where()}; {_create_hint(subscription)}") from None
        publisher = pubsub_v1.PublisherClient()
        for flag, topic in topics.items():
            if not topic:
                continue
            try:
                publisher.get_topic(topic=topic, timeout=30)
            except exceptions.NotFound:
                raise PubSubFailure(f"--{flag} {topic} does not exist on {_where()}; create "
                                    f"it: ldpflow pubsub create --topic {topic}") from None
    except PubSubFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - only the clients' failures are turned to a line
        message = failure_message(exc)
        if message is None:
            raise
        raise PubSubFailure(message) from None


# -- the command line --------------------------------------------------------------------------
def _event_times_ok(args: argparse.Namespace) -> bool:
    try:
        parse_event_times(args.event_times)
    except ValueError:
        return False
    return True


def _check_args(args: argparse.Namespace) -> None:
    """Check every resource name given, and the numbers, before any call (usage errors)."""
    kinds = {"topic": "topics", "output_topic": "topics", "dead_letter_topic": "topics",
             "wake_topic": "topics", "subscription": "subscriptions",
             "output_subscription": "subscriptions"}
    prog = f"{_PROG} {args.command}"
    for dest, kind in kinds.items():
        value = getattr(args, dest, None)
        if value is not None:
            try:
                check_name(value, kind, f"--{dest}")
            except ValueError as exc:
                raise SystemExit(f"{prog}: error: {exc}") from None
    checks = {"output_subscription": (lambda a: a.output_topic is not None,
                                      "--output_subscription needs --output_topic"),
              "ack_deadline_seconds": (lambda a: 10 <= a.ack_deadline_seconds <= 600,
                                       "--ack_deadline_seconds must be in [10, 600]"),
              "batch_size": (lambda a: a.batch_size >= 1, "--batch_size must be >= 1"),
              "max_messages": (lambda a: a.max_messages >= 1, "--max_messages must be >= 1"),
              "until_reports": (lambda a: a.until_reports >= 1, "--until_reports must be >= 1"),
              "final_only": (lambda a: a.until_reports is not None,
                             "--final_only needs --until_reports"),
              "event_times": (_event_times_ok, "--event_times must be now, from_file, "
                                               "spread:SECONDS or window:SECONDS (SECONDS > 0)"),
              "timeout": (lambda a: a.timeout > 0, "--timeout must be > 0"),
              "wake_seconds": (lambda a: a.wake_seconds > 0, "--wake_seconds must be > 0")}
    for dest, (ok, message) in checks.items():
        value = getattr(args, dest, None)
        if value is not None and value is not False and not ok(args):
            raise SystemExit(f"{prog}: error: {message}, got {value!r}")


def guard_production(prog: str, allow_production: bool, emulator_host: str | None,
                     how: str, reason: str | None = None) -> None:
    """The guard of every command that can reach real Pub/Sub: without an emulator (or with
    ``reason``, why this run works on real Pub/Sub whatever the emulator), refuse unless
    ``allow_production``. ``how`` tells how to name an emulator.

    Raises
    ------
    SystemExit
        A one-line usage error (status 2).
    """
    if allow_production or (emulator_host and reason is None):
        return
    why = reason or (f"no Pub/Sub emulator given: {how} (start one: "
                     f"{_START_EMULATOR.format(host='127.0.0.1:8085')})")
    raise SystemExit(f"{prog}: error: {why}; real Pub/Sub only with --allow_production")


def _connect(args: argparse.Namespace) -> str:
    """Point the clients at the emulator (or real Pub/Sub with ``--allow_production``);
    returns where they point, for messages."""
    host = args.emulator_host or os.environ.get("PUBSUB_EMULATOR_HOST")
    guard_production(f"{_PROG} {args.command}", args.allow_production, host,
                     "set PUBSUB_EMULATOR_HOST or pass --emulator_host HOST:PORT")
    if host:
        os.environ["PUBSUB_EMULATOR_HOST"] = host  # the Google clients read it
        _check_emulator(host, "--emulator_host" if args.emulator_host else
                        "PUBSUB_EMULATOR_HOST")
        return f"the Pub/Sub emulator at {host}"
    _check_credentials()
    return "Pub/Sub (production)"


def run(argv: Sequence[str] | options.Parsed | None = None) -> int:
    """``ldpflow pubsub COMMAND [flags]``: returns 0 when done, 1 on a run-time failure (one
    line on stderr); a usage error raises ``SystemExit`` with one line of text."""
    args = (argv if isinstance(argv, options.Parsed) else options.parse("pubsub", argv)).args
    _check_args(args)
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    prog = f"{_PROG} {args.command}"
    try:
        where = _connect(args)
        return {"create": _create, "publish": _publish, "pull": _pull}[args.command](args, where)
    except PubSubFailure as exc:
        raise exit_failure(prog, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - only the clients' failures are turned to a line
        message = failure_message(exc)
        if message is None:
            raise
        raise exit_failure(prog, message) from None
    finally:  # --emulator_host points this process's clients at the emulator only meanwhile
        if previous is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = previous


# -- create ------------------------------------------------------------------------------------
def _create(args: argparse.Namespace, where: str) -> int:
    from ldpflow.pipelines.pubsub_client import ensure_subscription, ensure_topic

    def say(created: bool, path: str) -> None:
        print(f"{'created' if created else 'exists '} {path}")

    say(ensure_topic(args.topic), args.topic)
    if args.subscription:
        say(ensure_subscription(args.subscription, args.topic, args.ack_deadline_seconds),
            args.subscription)
    if args.output_topic:
        say(ensure_topic(args.output_topic), args.output_topic)
        if args.output_subscription:
            say(ensure_subscription(args.output_subscription, args.output_topic,
                                    args.ack_deadline_seconds), args.output_subscription)
    if args.dead_letter_topic:
        say(ensure_topic(args.dead_letter_topic), args.dead_letter_topic)
    _LOGGER.info("resources ready on %s", where)
    return 0


# -- publish -----------------------------------------------------------------------------------
def _read_table(path: str, fmt: str):
    """One report file as an envelope table of the report schema's columns and types, its
    values as they are (the job validates the reports)."""
    import pyarrow as pa
    from apache_beam.io.filesystems import FileSystems

    from ldpflow.wire.parse import arrow_schema

    with FileSystems.open(path) as f:  # .gz is decompressed
        data = io.BytesIO(f.read())
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(data)
        elif fmt == "avro":
            import polars as pl

            table = pl.read_avro(data).to_arrow()
        else:
            import pyarrow.json as pj

            table = pj.read_json(data, parse_options=pj.ParseOptions(
                explicit_schema=arrow_schema(json_form=True, nullable=True),
                unexpected_field_behavior="ignore"))
            if table.column("bits").null_count < table.num_rows:  # hex text in JSON
                bits = pa.array([None if v is None else bytes.fromhex(v)
                                 for v in table.column("bits").to_pylist()], pa.binary())
                table = table.set_column(table.schema.get_field_index("bits"), "bits", bits)
        # One schema for every format (polars reads large_string, JSON hex text, ...); the
        # columns a file lacks are null, and columns the schema does not know are left out.
        schema = arrow_schema(nullable=True)
        return pa.Table.from_arrays(
            [table.column(field.name).cast(field.type) if field.name in table.column_names
             else pa.nulls(table.num_rows, field.type) for field in schema], schema=schema)
    except Exception as exc:  # noqa: BLE001 - the readers raise many types on bad files
        raise PubSubFailure(f"cannot read {path} as {fmt}: {_first_line(exc)}") from None


#: ``publish --event_times`` unless given: every report in the current 60-second window.
DEFAULT_EVENT_TIMES = options.DEFAULT_EVENT_TIMES


def parse_event_times(text: str) -> tuple[str, float]:
    """``--event_times`` as ``(mode, seconds)``: ``now``, ``from_file``, ``spread:SECONDS``
    or ``window:SECONDS`` (seconds > 0).

    Raises
    ------
    ValueError
        Naming the flag, the forms accepted and the value received.
    """
    mode, _, seconds = str(text).partition(":")
    if mode in ("now", "from_file") and not seconds:
        return mode, 0.0
    if mode in ("spread", "window"):
        try:
            value = float(seconds)
        except ValueError:
            value = float("nan")
        if 0 < value < float("inf"):
            return mode, value
    raise ValueError(f"--event_times must be now, from_file, spread:SECONDS or "
                     f"window:SECONDS (SECONDS > 0), got {text!r}")


def _onto(times, lo_ms: int, span_ms: int):
    """``times`` mapped linearly onto ``[lo_ms, lo_ms + span_ms]``, their order kept
    (missing times count as the earliest; equal times are spread by position)."""
    import numpy as np

    n = times.size
    known = times[~np.isnan(times)]
    lo, hi = (known.min(), known.max()) if known.size else (0.0, 0.0)
    if hi > lo:
        position = (np.nan_to_num(times, nan=lo) - lo) / (hi - lo)
    else:
        position = np.arange(n) / max(n - 1, 1)
    return lo_ms + np.floor(position * span_ms).astype(np.int64)


def rewrite_event_times(times, now_ms: int, mode: str = DEFAULT_EVENT_TIMES):
    """New event times (int64) for ``--event_times mode`` (:func:`parse_event_times`).

    ``now``: every time ``now_ms``. ``spread:S``: the times mapped linearly onto
    ``[now_ms - S, now_ms]``, events of the last S seconds. ``window:S``: onto the window of
    S seconds that holds ``now_ms``, aligned to the epoch as the job's fixed windows are
    (``[start, start + S)``), so a job whose window size is a multiple of S puts every report
    in one window. Mapped times keep their order; missing times count as the earliest, and
    equal times are spread by position. ``from_file``: the times as they are.
    """
    import numpy as np

    kind, seconds = parse_event_times(mode)
    times = np.asarray(times, dtype=np.float64)
    if kind == "from_file":
        return times
    if kind == "now" or times.size == 0:
        return np.full(times.size, now_ms, dtype=np.int64)
    span = int(round(seconds * 1000))
    if kind == "spread":
        return _onto(times, now_ms - span, span)
    start = now_ms // span * span
    return _onto(times, start, span - 1)


def _messages(table, batch_size: int, fmt: str, codec: str
              ) -> Iterator[tuple[bytes, object]]:
    """``(body, rows)`` of the table cut into messages, each at most MAX_MESSAGE_BYTES."""
    from ldpflow.wire import formats

    pending = [table.slice(lo, batch_size) for lo in range(0, table.num_rows, batch_size)]
    while pending:
        part = pending.pop(0)
        body = formats.encode_message(part, fmt, codec)
        if len(body) > MAX_MESSAGE_BYTES:
            if part.num_rows == 1:
                raise PubSubFailure(f"one report encodes to {len(body)} bytes, more than a "
                                    f"Pub/Sub message may hold ({MAX_MESSAGE_BYTES})")
            half = part.num_rows // 2
            pending[:0] = [part.slice(0, half), part.slice(half)]
            continue
        yield body, part


def _publish(args: argparse.Namespace, where: str) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from apache_beam.io.filesystems import FileSystems
    from google.api_core import exceptions
    from google.cloud import pubsub_v1

    from ldpflow.pipelines.common import check_inputs
    from ldpflow.wire import formats

    prog = f"{_PROG} publish"
    check_inputs(args.input, args.input_format, prog)  # no file: a usage error
    paths = sorted(m.path for m in FileSystems.match([args.input])[0].metadata_list)
    publisher = pubsub_v1.PublisherClient()
    try:
        publisher.get_topic(topic=args.topic, timeout=30)
    except exceptions.NotFound:
        raise PubSubFailure(f"--topic {args.topic} does not exist on {where}; create it: "
                            f"ldpflow pubsub create --topic {args.topic} --subscription "
                            f"SUBSCRIPTION") from None
    tables = [_read_table(path, args.input_format or formats.detect_format(path))
              for path in paths]
    total = sum(t.num_rows for t in tables)
    _LOGGER.info("read %d reports from %d files", total, len(paths))
    if args.event_times != "from_file" and total:
        times = np.concatenate([  # a missing event time is NaN here
            t.column("event_time").to_numpy(zero_copy_only=False).astype(np.float64)
            for t in tables])
        new = rewrite_event_times(times, int(time.time() * 1000), args.event_times)
        at = 0
        for i, t in enumerate(tables):
            column = pa.array(new[at:at + t.num_rows], pa.int64())
            at += t.num_rows
            tables[i] = t.set_column(t.schema.get_field_index("event_time"), "event_time",
                                     column)
        _LOGGER.info("event times rewritten to %d .. %d (ms since the epoch)",
                     int(new.min()), int(new.max()))
    published = messages = 0
    pending: list = []
    last_log = time.monotonic()

    def settle() -> None:
        nonlocal published, messages
        for future, rows in pending:
            future.result(timeout=60)
            published += rows
            messages += 1
        pending.clear()

    for table in tables:
        for body, part in _messages(table, args.batch_size, args.message_format,
                                    args.message_codec):
            attributes = {}
            if args.timestamp_attribute and part.num_rows:
                earliest = pc.min(part.column("event_time")).as_py()
                if earliest is not None:
                    attributes[args.timestamp_attribute] = str(earliest)
            pending.append((publisher.publish(args.topic, body, **attributes), part.num_rows))
            if len(pending) >= 100:
                settle()
                if time.monotonic() - last_log >= 2.0:
                    _LOGGER.info("published %d of %d reports (%d messages)", published, total,
                                 messages)
                    last_log = time.monotonic()
    settle()
    print(f"published {published} reports in {messages} messages to {args.topic}")
    return 0


# -- pull --------------------------------------------------------------------------------------
def _pane_window(pane) -> tuple | None:
    """The window and parameter set of an estimate pane (``None``: not a pane)."""
    if not isinstance(pane, dict) or not isinstance(pane.get("n"), int):
        return None
    return (pane.get("window_start"), pane.get("window_end"), pane.get("oracle"),
            json.dumps(pane.get("parameters"), sort_keys=True))


def _pull(args: argparse.Namespace, where: str) -> int:
    from google.api_core import exceptions
    from google.cloud import pubsub_v1

    from ldpflow.pipelines.pubsub_client import subscriber_client  # takes 10 MB messages

    limit = args.max_messages or (10 if args.until_reports is None else float("inf"))
    finals: dict[tuple, dict] = {}  # per window and parameter set: the pane with most reports

    def covered() -> int:
        return sum(pane["n"] for pane in finals.values())

    received = 0
    deadline = time.monotonic() + args.timeout
    publisher = pubsub_v1.PublisherClient() if args.wake_topic else None
    next_wake = time.monotonic()
    with subscriber_client() as client:
        try:
            client.get_subscription(subscription=args.subscription, timeout=30)
        except exceptions.NotFound:
            raise PubSubFailure(f"--subscription {args.subscription} does not exist on "
                                f"{where}; {_create_hint(args.subscription)}") from None
        while (received < limit and time.monotonic() < deadline
               and (args.until_reports is None or covered() < args.until_reports)):
            if publisher is not None and time.monotonic() >= next_wake:
                publisher.publish(args.wake_topic, b"", ldpflow="wake").result(timeout=30)
                next_wake = time.monotonic() + args.wake_seconds
            wait = min(5.0, args.wake_seconds if publisher is not None else 5.0,
                       deadline - time.monotonic())
            try:
                response = client.pull(request={
                    "subscription": args.subscription,
                    "max_messages": int(min(100, limit - received))},
                    timeout=max(0.5, wait))
            except (exceptions.DeadlineExceeded, exceptions.RetryError):
                continue  # nothing yet
            if not response.received_messages:
                continue
            client.acknowledge(request={"subscription": args.subscription, "ack_ids": [
                m.ack_id for m in response.received_messages]})
            for item in response.received_messages:
                if args.until_reports is not None:
                    try:
                        pane = json.loads(item.message.data)
                    except ValueError:
                        pane = None
                    window = _pane_window(pane)
                    if window is not None and pane["n"] >= finals.get(window, {"n": -1})["n"]:
                        finals[window] = pane
                if not args.final_only:
                    print(_show(item.message.data), flush=True)
            received += len(response.received_messages)
    _LOGGER.info("pulled %d messages from %s", received, args.subscription)
    if args.until_reports is None:
        return 0
    if covered() < args.until_reports:
        raise PubSubFailure(
            f"--timeout {args.timeout:g} s passed before the estimates held --until_reports "
            f"{args.until_reports} reports: the latest panes of {len(finals)} windows hold "
            f"{covered()}")
    if args.final_only:
        for window in sorted(finals, key=lambda w: tuple(map(str, w))):
            print(json.dumps(finals[window], sort_keys=True), flush=True)
    return 0


def _show(data: bytes) -> str:
    """A message body on one line: its text (JSON kept compact), or the size of binary data."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return json.dumps({"binary_bytes": len(data)})
    if "\n" in text.strip():
        try:
            return json.dumps(json.loads(text), separators=(",", ":"))
        except ValueError:
            return text.strip().replace("\n", "\\n")
    return text.strip()
