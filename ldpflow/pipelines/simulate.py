"""``ldpflow simulate``: synthetic users -> perturbed reports (sharded files) + ``truth.json``.

    ldpflow simulate --oracle olh --epsilon 1.0 --domain_size 1024 --users 1000000 \\
        --distribution zipf:1.1 --seed 7 --output /tmp/reports

Writes ``OUTPUT/reports-SSSSS-of-NNNNN.avro`` (or ``.jsonl`` / ``.parquet``) and
``OUTPUT/truth.json`` (``{"counts": [...], ...}``: the true number of users per value).
Values come from a synthetic distribution over the domain (rank r is value r) or from
``--values_file`` (one integer in [0, domain_size) per line). Simulation is seeded: it is for
evaluation, not for real clients, whose perturbation draws from the OS CSPRNG. The same flags
write the same bytes (Avro sync markers come from the seed and the shard).

Every flag is checked before any file is opened: a configuration whose probabilities are
not finite (an epsilon so large that ``e^epsilon`` overflows, or so small that every value
is reported alike), a domain over ``--max_domain_size``, a report the wire cannot carry or
an output folder that cannot be written is one line and exit status 2, with nothing
written (one report is perturbed and encoded in memory first). A run that fails while
writing removes the files it wrote.

Heavy hitters (``--oracle pem``, ``spm``, ``mcm``, ``treehist`` or ``sfp``: the protocols of
:mod:`ldpflow.core.heavy_hitters`)::

    ldpflow simulate --oracle pem --bits 64 --k 32 --epsilon 4 --domain_size 100000 \\
        --users 1000000 --distribution zipf:1.1 --seed 7 --output /tmp/pem

draws each user's value from ``N = --domain_size`` distinct ``--bits``-bit values (a seeded
random map from rank to value, then ranks from the distribution), or reads them from
``--values_file`` (integers, or with ``--codec string`` one string per line). User ``i``
(id ``user-i``) reports in the group of its id. ``truth.json`` is ``{"top": [{"value": V,
"count": C}, ...], ...}``: the ``--truth_top`` (default 1000) most frequent values by count
(ties: the smaller code first), decoded, with the configuration. Without parameter flags
PEM's configuration is chosen automatically (:func:`ldpflow.core.heavy_hitters.configure`);
the other protocols take their defaults.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import io
import json
import logging
import math
import multiprocessing
import os
import time
from typing import Any

import numpy as np

from ldpflow.core import codecs, simulation, validation
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.oracles import FrequencyOracle, registry
from ldpflow.core.registry import is_heavy_hitter
from ldpflow.pipelines import options
from ldpflow.pipelines.usage import check_output
from ldpflow.wire import formats

__all__ = ["run"]

_LOGGER = logging.getLogger(__name__)
_SUFFIX = {"avro": ".avro", "json": ".jsonl", "parquet": ".parquet"}
DEFAULT_START_MS = options.DEFAULT_START_MS


def _oracle(args: argparse.Namespace) -> FrequencyOracle:
    params: dict[str, Any] = {"epsilon": args.epsilon, "domain_size": args.domain_size}
    if args.hash_range is not None:
        params["hash_range"] = args.hash_range
    return registry.make(args.oracle, **params)


_WIRE_INT_MAX = 2**31 - 1  # hash_range travels as an Avro int


def _check_wire_limits(parser: argparse.ArgumentParser, protocol: Any) -> None:
    """Refuse configurations whose reports the wire cannot carry; warn about those that a
    server with the default acceptance policy would refuse."""
    from ldpflow.wire.parse import AcceptancePolicy

    try:
        hash_range = getattr(protocol, "hash_range", None)
    except (ArithmeticError, ValueError) as exc:  # derived from epsilon
        _unusable(parser, argparse.Namespace(epsilon=protocol.epsilon), protocol.name, exc)
    if hash_range is not None and hash_range > _WIRE_INT_MAX:
        parser.error(f"epsilon {protocol.epsilon} gives hash_range {hash_range}, more than a "
                     f"report's hash_range field carries ({_WIRE_INT_MAX}); pass a smaller "
                     "--hash_range (a power of two)")
    limit = AcceptancePolicy().max_hash_range
    if hash_range is not None and hash_range > limit:
        _LOGGER.warning("hash_range %d exceeds the default --max_hash_range %d of ldpflow "
                        "estimate: estimate these reports with --max_hash_range %d",
                        hash_range, limit, hash_range)


def _check_domain(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The domain (for heavy hitters: the distinct values drawn) within --max_domain_size,
    before anything of its size is allocated."""
    if args.max_domain_size < 2:
        parser.error(f"--max_domain_size must be >= 2, got {args.max_domain_size}")
    if args.domain_size is not None and args.domain_size > args.max_domain_size:
        parser.error(f"--domain_size {args.domain_size} is more than --max_domain_size "
                     f"{args.max_domain_size} (ldpflow estimate refuses such reports unless "
                     "given a larger --max_domain_size too)")


def _sync_marker(args: argparse.Namespace, shard: int) -> bytes:
    """A shard's Avro sync marker: from the flags that make its content, so a rerun writes
    the same bytes (a random one would differ per run)."""
    return hashlib.sha256(f"ldpflow-simulate-{args.seed}-{shard}-{args.shards}".encode()
                          ).digest()[:16]


def _unusable(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str,
              exc: Exception) -> None:
    """The usage error of an epsilon whose probabilities overflow or vanish."""
    parser.error(f"epsilon {args.epsilon} gives no usable {name} report "
                 f"({type(exc).__name__}: {exc or 'no detail'}); pass a finite epsilon "
                 "whose e^epsilon neither overflows nor rounds to 1")


def _dry_run(parser: argparse.ArgumentParser, args: argparse.Namespace, oracle: Any,
             codec: str | None = None) -> None:
    """Perturb one value and encode its report in memory, before any file is opened: an
    epsilon whose probabilities are not finite, or a report the wire cannot carry, is a
    usage error here rather than a traceback after the output's first bytes."""
    rng = np.random.default_rng(0)
    one = formats.numbered_ids("user-", 0, 1)
    try:
        if is_heavy_hitter(oracle.name):
            reports = oracle.perturb(np.zeros(1, dtype=np.uint64), np.array(["user-0"]), rng)
        else:
            kwargs = {"columns": np.zeros(1, dtype=np.int64)} if oracle.name == "onebit" \
                else {}
            reports = oracle.perturb(np.zeros(1, dtype=np.int64), rng=rng, **kwargs)
            # the fewest reports it estimates from (one-bit: one per column)
            variance = oracle.variance(getattr(oracle, "users_needed", 1))
            if not (math.isfinite(variance) and variance > 0):
                raise ValueError(f"the estimate's variance is {variance}")
        table = formats.reports_table(oracle, reports, formats.numbered_ids("dry-", 0, 1), one,
                                      np.zeros(1, dtype=np.int64), codec=codec)
        formats.write_reports(io.BytesIO(), args.format, table)
    except (ArithmeticError, ValueError, TypeError) as exc:
        _unusable(parser, args, oracle.name, exc)


def _removing_on_failure(paths: list[str], write) -> Any:
    """``write()``; when it fails, the files it may have written go (then the error)."""
    try:
        return write()
    except BaseException:
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        raise


def _labelled_values(parser: argparse.ArgumentParser, args: argparse.Namespace
                     ) -> tuple[np.ndarray | None, Any]:
    """``--value_labels`` checked against the domain, and with ``--values_file`` its lines
    (one label each; empty lines skipped) as the values they label; a usage error if a
    line is no label of the file."""
    from ldpflow.wire.labels import LabelsError, load_value_labels

    try:
        labels = load_value_labels(args.value_labels, args.domain_size)
    except LabelsError as exc:
        parser.error(f"--value_labels {exc}")
    if not args.values_file:
        return None, labels
    with open(args.values_file, encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    index = {}
    for number, line in enumerate(lines, 1):
        if line.strip() and line not in index:
            try:
                index[line] = labels.value_of(line)
            except KeyError:
                parser.error(f"--values_file line {number}: {line[:40]!r} is not a label of "
                             f"--value_labels {args.value_labels}")
    return np.array([index[line] for line in lines if line.strip()], dtype=np.int64), labels


def _file_values(args: argparse.Namespace) -> np.ndarray:
    with open(args.values_file, encoding="utf-8") as f:
        raw = [line.strip() for line in f if line.strip()]
    try:
        values = np.array([int(v) for v in raw], dtype=np.int64)
    except ValueError as exc:
        raise SystemExit(f"--values_file must hold one integer per line: {exc}") from None
    return validation.check_values(values, args.domain_size, name="--values_file values")


#: Users simulated at a time within a shard: memory is that of one chunk, whatever the size.
CHUNK_USERS = 1 << 20
CHUNK_REPORT_BYTES = 128 << 20


def _chunk_users(oracle: FrequencyOracle) -> int:
    """Users perturbed at a time: ``CHUNK_USERS``, fewer for wide reports (about
    ``CHUNK_REPORT_BYTES`` of reports per chunk)."""
    return max(1, min(CHUNK_USERS, CHUNK_REPORT_BYTES // max(1, oracle.report_bits // 8)))


def _simulate_shard(job: tuple) -> tuple[str, int, np.ndarray]:
    """One shard's users, perturbed and written a chunk at a time; their true counts.

    Every shard draws from its own generator, seeded by ``(seed, shard)``, so the output
    depends on the seed and the number of shards only, not on the number of processes.
    """
    path, args, oracle, shard, lo, hi, values = job
    rng = np.random.default_rng([args.seed, shard])
    dist = None if values is not None else simulation.parse_distribution(args.distribution)
    counts = np.zeros(oracle.domain_size, dtype=np.int64)
    with open(path, "wb") as f, formats.ReportWriter(f, args.format,
                                                     sync=_sync_marker(args, shard)) as writer:
        step = _chunk_users(oracle)
        for start in range(lo, hi, step):
            stop = min(start + step, hi)
            n = stop - start
            chunk = values[start - lo:stop - lo] if values is not None else \
                dist.sample(oracle.domain_size, n, rng)  # type: ignore[union-attr]
            # One-bit: user j -> column j mod K over the whole population (the chunk's
            # indices, in random order), not restarting in every shard or chunk.
            kwargs = {"columns": (start + rng.permutation(n)) % oracle.order} \
                if oracle.name == "onebit" else {}
            reports = oracle.perturb(chunk, rng=rng, **kwargs)  # seeded: a simulation
            writer.write(formats.reports_table(
                oracle, reports, formats.numbered_ids(f"s{args.seed}-", start, stop),
                formats.numbered_ids("user-", start, stop), _event_times(args, rng, n)))
            counts += np.bincount(chunk, minlength=oracle.domain_size)
    return path, hi - lo, counts


def _write_shard(job: tuple) -> tuple[str, int]:
    path, fmt, oracle, reports, first, run_id, event_times, codec, sync = job
    count = len(reports)
    table = formats.reports_table(
        oracle, reports, formats.numbered_ids(f"{run_id}-", first, first + count),
        formats.numbered_ids("user-", first, first + count), event_times, codec=codec)
    with open(path, "wb") as f:
        formats.write_reports(f, fmt, table, sync=sync)
    return path, count


def _shard_path(args: argparse.Namespace, shard: int) -> str:
    return os.path.join(args.output,
                        f"reports-{shard:05d}-of-{args.shards:05d}{_SUFFIX[args.format]}")


def _in_processes(function, jobs: list) -> list:
    """``function`` of every job, spread over the cores (shards are independent)."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        return [function(job) for job in jobs]
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(function, jobs))


def _user_ids(start: int, stop: int) -> list[str]:
    """The simulated users' stable ids (PEM groups are drawn from them)."""
    return [f"user-{i}" for i in range(start, stop)]


#: The flags of heavy-hitter protocols only (``--hash_range`` is olh's too).
_HEAVY_HITTER_ONLY = ("bits", "k", *sorted(hh.SHAPE_FLAGS - {"hash_range"}))


def run(argv: list[str] | options.Parsed | None = None) -> dict:
    parsed = argv if isinstance(argv, options.Parsed) else options.parse("simulate", argv)
    parser, args = parsed.parser, parsed.args
    if is_heavy_hitter(args.oracle):
        if args.value_labels is not None:
            parser.error("--value_labels applies to the frequency oracles (heavy-hitter "
                         "values are strings or integers themselves)")
        return _run_heavy_hitters(parser, args)
    given = [f"--{name}" for name in _HEAVY_HITTER_ONLY if getattr(args, name) is not None]
    if given or args.codec != "int" or args.truncate:
        parser.error(f"{', '.join(given) or '--codec/--truncate'} apply to the heavy-hitter "
                     f"protocols only ({' '.join(sorted(hh.PROTOCOLS))})")
    if args.domain_size is None:
        parser.error(f"--domain_size is required for --oracle {args.oracle}")
    _check_domain(parser, args)
    try:
        oracle = _oracle(args)
        validation.check_positive_int(args.shards, name="--shards")
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    except ArithmeticError as exc:
        _unusable(parser, args, args.oracle, exc)
    _check_wire_limits(parser, oracle)
    started = time.perf_counter()
    labels = None
    if args.value_labels is not None:
        values, labels = _labelled_values(parser, args)
    else:
        values = _file_values(args) if args.values_file else None
    if values is None:
        if args.users is None:
            parser.error("--users is required unless --values_file is given")
        try:
            validation.check_positive_int(args.users, name="--users")
            simulation.parse_distribution(args.distribution)
        except (TypeError, ValueError) as exc:
            parser.error(str(exc))
    n = values.size if values is not None else args.users
    _dry_run(parser, args, oracle)
    check_output(args.output, parser.prog, dead_letters=False)  # the last check: it creates it
    bounds = np.linspace(0, n, args.shards + 1).astype(int)
    jobs = [(_shard_path(args, shard), args, oracle, shard, int(bounds[shard]),
             int(bounds[shard + 1]),
             None if values is None else values[bounds[shard]:bounds[shard + 1]])
            for shard in range(args.shards)]
    truth_path = os.path.join(args.output, "truth.json")

    def write() -> dict:
        counts = np.zeros(oracle.domain_size, dtype=np.int64)
        for path, written, shard_counts in _in_processes(_simulate_shard, jobs):
            _LOGGER.info("wrote %s (%d reports)", path, written)
            counts += shard_counts
        truth = {"counts": counts.tolist(), "users": int(n), "oracle": oracle.name,
                 "parameters": oracle.parameters,
                 "distribution": None if args.values_file else args.distribution,
                 "seed": args.seed}
        if labels is not None:
            truth["value_labels"] = labels.version
        with open(truth_path, "w", encoding="utf-8") as f:
            json.dump(truth, f)
        return truth

    truth = _removing_on_failure([job[0] for job in jobs] + [truth_path], write)
    elapsed = time.perf_counter() - started
    _LOGGER.info("simulated %d %s reports in %.1fs -> %s", n, oracle.name, elapsed, args.output)
    return truth


def _event_times(args: argparse.Namespace, rng: np.random.Generator, n: int) -> np.ndarray:
    return args.start_time_ms + (rng.random(n) * args.duration_s * 1000).astype(np.int64)


def _write_all(args: argparse.Namespace, oracle, reports, event_times: np.ndarray,
               codec: str | None) -> None:
    """Shard reports made in this process into ``--shards`` files, encoded on all cores."""
    n = len(reports)
    bounds = np.linspace(0, n, args.shards + 1).astype(int)
    jobs = [(_shard_path(args, shard), args.format, oracle,
             reports[int(bounds[shard]):int(bounds[shard + 1])], int(bounds[shard]),
             f"s{args.seed}", event_times[int(bounds[shard]):int(bounds[shard + 1])], codec,
             _sync_marker(args, shard))
            for shard in range(args.shards)]
    for path, count in _in_processes(_write_shard, jobs):
        _LOGGER.info("wrote %s (%d reports)", path, count)


def _heavy_hitter_config(parser: argparse.ArgumentParser, args: argparse.Namespace,
                         bits: int, users: int) -> hh.HeavyHitterProtocol:
    """The configuration: the flags', or (PEM without parameter flags) the automatic one."""
    name = args.oracle
    if args.k is None:
        parser.error(f"--oracle {name} needs --k")
    shape = hh.shape_parameters(name)
    foreign = [flag for flag in sorted(hh.SHAPE_FLAGS)
               if getattr(args, flag) is not None and flag not in shape]
    if foreign:
        parser.error(f"--{foreign[0]} is not a parameter of {name}; {name} takes "
                     f"{' '.join('--' + p for p in shape)}")
    try:
        validation.check_positive_int(args.shards, name="--shards")
        validation.check_positive_int(args.truth_top, name="--truth_top")
        given = {p: getattr(args, p) for p in shape if getattr(args, p) is not None}
        if name == hh.NAME and not given:
            return hh.configure(top_k=args.k, value_bits=bits, epsilon=args.epsilon,
                                users=users, max_candidates=args.max_candidates)
        return hh.make(name, top_k=args.k, value_bits=bits, epsilon=args.epsilon, **given)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    except ArithmeticError as exc:  # the configuration's probabilities overflow or vanish
        _unusable(parser, args, name, exc)


def _heavy_hitter_file_values(parser: argparse.ArgumentParser, args: argparse.Namespace
                     ) -> tuple[np.ndarray, Any, int]:
    """``--values_file`` as codes: ``(codes, codec, truncated)``; the codec is inferred from
    the lines unless given, and its width chosen from the data unless ``--bits`` is given."""
    with open(args.values_file, encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    name = args.codec
    if isinstance(name, options.Inferred):
        name = codecs.infer_codec(line for line in lines if line.strip())
        _LOGGER.info("--values_file holds %s values: codec %s", "integer" if name == "int"
                     else "non-integer", name)
    try:
        if name == "string":
            strings = [line for line in lines if line]
            if args.bits is None:
                codec = codecs.StringCodec.fit(strings, coverage=args.coverage)
                truncate = True
            else:
                codec, truncate = codecs.StringCodec(bits=args.bits), args.truncate
            truncated = codec.truncations(strings) if truncate else 0
            return codec.encode(strings, truncate=truncate), codec, truncated
        raw = np.array([int(v) for v in (line.strip() for line in lines) if v], dtype=object)
        bits = args.bits
        if bits is None:
            bits = max(1, max((int(v).bit_length() for v in raw), default=1))
        codec = codecs.IntegerCodec(bits=bits)
        return codec.encode(raw), codec, 0
    except (TypeError, ValueError) as exc:
        parser.error(f"--values_file: {exc}")


def _run_heavy_hitters(parser: argparse.ArgumentParser, args: argparse.Namespace
                       ) -> dict:
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    truncated = 0
    if args.values_file:
        values, codec, truncated = _heavy_hitter_file_values(parser, args)
        if values.size == 0:
            parser.error("--values_file holds no values")
        protocol = _heavy_hitter_config(parser, args, codec.bits, values.size)
    else:
        if args.codec == "string" and not isinstance(args.codec, options.Inferred):
            parser.error("--codec string needs --values_file (one string per line)")
        if args.bits is None:
            parser.error(f"--oracle {args.oracle} needs --bits (or --values_file)")
        if args.users is None or args.domain_size is None:
            parser.error(f"--oracle {args.oracle} needs --users and --domain_size (the number "
                         "of distinct values) unless --values_file is given")
        _check_domain(parser, args)
        try:
            users = validation.check_positive_int(args.users, name="--users")
            dist = simulation.parse_distribution(args.distribution)
        except (TypeError, ValueError) as exc:
            parser.error(str(exc))
        protocol = _heavy_hitter_config(parser, args, args.bits, users)
        codec = codecs.IntegerCodec(bits=protocol.value_bits)
        shape = ({"exponent": dist.parameter} if dist.kind == "zipf"
                 else {"ratio": dist.parameter} if dist.kind == "geometric" else {})
        try:
            values = hh.sample_values(users, num_distinct=args.domain_size,
                                      value_bits=protocol.value_bits, rng=rng,
                                      distribution=dist.kind, **shape)
        except (TypeError, ValueError) as exc:
            parser.error(str(exc))
    _check_wire_limits(parser, protocol)
    _dry_run(parser, args, protocol, codec.name)
    check_output(args.output, parser.prog, dead_letters=False)  # the last check: it creates it
    if truncated:
        _LOGGER.warning("%d of %d values hold more than %d UTF-8 bytes: truncated to their "
                        "leading whole characters (--bits %d)", truncated, values.size,
                        protocol.value_bits // 8, protocol.value_bits)
    n = values.size
    users = np.array(_user_ids(0, n))
    reports = protocol.perturb(values, users, rng)  # seeded: a simulation
    event_times = _event_times(args, rng, n)
    truth_path = os.path.join(args.output, "truth.json")
    written = [_shard_path(args, shard) for shard in range(args.shards)] + [truth_path]
    _removing_on_failure(written, lambda: _write_all(args, protocol, reports, event_times,
                                                     codec.name))
    top = hh.true_top(values, args.truth_top)
    decoded = codec.decode(np.array([t["value"] for t in top], dtype=np.uint64))
    truth = {
        "top": [{"value": v if isinstance(v, str) else int(v), "count": t["count"]}
                for v, t in zip(decoded, top, strict=True)],
        "users": int(n),
        "distinct": int(np.unique(values).size),
        "oracle": protocol.name,
        "codec": codec.name,
        "truncated": int(truncated),
        "parameters": protocol.parameters,
        "num_groups": protocol.num_groups,
        "group_sizes": np.bincount(reports.columns["group"],
                                   minlength=protocol.num_groups).tolist(),
        "distribution": None if args.values_file else args.distribution,
        "domain_size": None if args.values_file else args.domain_size,
        "seed": args.seed,
    }
    if hasattr(protocol, "prefix_bits"):
        truth["prefix_bits"] = list(protocol.prefix_bits)
    flags = " ".join(f"--{p} {getattr(protocol, p)}" for p in hh.shape_parameters(protocol.name)
                     if p != "hash_range")
    _LOGGER.info("heavy-hitters flags of this configuration: --protocol %s --k %d --bits %d %s "
                 "(or none: read from the reports)", protocol.name, protocol.top_k,
                 protocol.value_bits, flags)

    def write_truth() -> None:
        with open(truth_path, "w", encoding="utf-8") as f:
            json.dump(truth, f)

    _removing_on_failure(written, write_truth)
    _LOGGER.info("simulated %d %s reports (%d groups) in %.1fs -> %s", n, protocol.name,
                 protocol.num_groups,
                 time.perf_counter() - started, args.output)
    return truth
