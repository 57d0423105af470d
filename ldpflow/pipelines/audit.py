"""``ldpflow audit``: an empirical lower bound on a client's epsilon, from reports of known inputs.

ldpflow's own perturbation of an oracle (``--reports`` reports of each of ``--value`` and
``--other_value``, drawn from the OS CSPRNG as a client does, or seeded with ``--seed``)::

    ldpflow audit --oracle olh --expect_epsilon 1 --domain_size 1024 --reports 1000000 \\
        --value 0 --other_value 1

Report files from any client (Swift, Kotlin, JS, ...): the files of ``--input`` hold reports
the client made from the value ``--value``, those of ``--other_input`` from
``--other_value``; the oracle and its parameters come from the reports, which must all
share one parameter set::

    ldpflow audit --input 'client/v0/*.avro' --value 0 \\
        --other_input 'client/v1/*.avro' --other_value 1 --output audit.json

Prints a one-line verdict and writes a JSON document (``--output FILE``, else standard
output; the verdict then goes to standard error, so that standard output is one JSON
document) with every cell count, the selected event's counts and bounds, ``epsilon_lb``,
the claimed epsilon, alpha and n. The method is :mod:`ldpflow.core.audit`
(``docs/audit.md``). Exit status: 0 the bound does not exceed the claimed epsilon, 1 it does
(with ``--strict`` also when the reports contradict the claimed oracle's law), 2 a usage
error. Report files need the ``beam`` extra (fastavro, pyarrow, polars), not Beam itself.
"""

from __future__ import annotations

import argparse
import bz2
import collections
import contextlib
import glob
import gzip
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

from ldpflow.core import audit, randomness, registry, validation
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import FrequencyOracle
from ldpflow.pipelines import options

__all__ = ["run"]

_LOGGER = logging.getLogger(__name__)
PROG = "ldpflow audit"
_ORACLE_FLAGS = ("oracle", "expect_epsilon", "domain_size", "hash_range", "num_hashes", "reports",
                 "seed")
_PROGRESS_SECONDS = 10.0


class _NothingToAudit(Exception):
    """Every record of an input was refused: the client's reports are invalid."""

    def __init__(self, message: str, document: dict[str, Any]):
        super().__init__(message)
        self.document = document


def run(argv: Sequence[str] | options.Parsed | None = None) -> int:
    """Run an audit; returns the exit status (0 pass, 1 the bound exceeds the claim, 2 usage)."""
    try:
        parsed = argv if isinstance(argv, options.Parsed) else options.parse("audit", argv)
        return _run(parsed.parser, parsed.args)
    except SystemExit as exc:  # usage errors are one line; --help exits 0
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        return int(exc.code or 0)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        validation.check_probability(args.alpha, name="--alpha", open_interval=True)
        validation.check_probability(args.selection_fraction, name="--selection_fraction",
                                     open_interval=True)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    try:
        if args.input is not None or args.other_input is not None:
            result, source = _audit_files(parser, args)
        else:
            result, source = _audit_own(parser, args)
    except _NothingToAudit as exc:
        _emit(args, f"FAIL: {exc}", {**exc.document,
                                      "seconds": round(time.perf_counter() - started, 3)})
        return 1
    refused = source.get("dead_letters", {}).get("count", 0)
    document = {**result.to_json(), "source": source,
                "seconds": round(time.perf_counter() - started, 3)}
    verdict = result.verdict()
    if refused:
        verdict += f"; {refused} records refused as invalid (see source.dead_letters)"
    _emit(args, verdict, document)
    _LOGGER.info("audit done in %.1fs", time.perf_counter() - started)
    failed = result.exceeds_claim or (args.strict and (not result.conforms or refused > 0))
    return 1 if failed else 0


def _emit(args: argparse.Namespace, verdict: str, document: dict[str, Any]) -> None:
    """The verdict line and the JSON document (to --output, else standard output)."""
    text = json.dumps(document, indent=2, allow_nan=False)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        print(verdict)
    else:
        print(verdict, file=sys.stderr)
        print(text)


# -- ldpflow's own perturbation -----------------------------------------------------------------
def _audit_own(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> tuple[audit.AuditResult, dict[str, Any]]:
    missing = [f"--{name}" for name in ("oracle", "expect_epsilon", "domain_size", "reports")
               if getattr(args, name) is None]
    if missing:
        parser.error(f"give {', '.join(missing)} (an audit of ldpflow's own perturbation), or "
                     "--input and --other_input (report files of a client)")
    if args.input_format is not None:
        parser.error("--input_format applies to --input and --other_input only")
    params: dict[str, Any] = {"epsilon": args.expect_epsilon, "domain_size": args.domain_size}
    for flag in ("hash_range", "num_hashes"):  # the oracles whose class has the parameter
        value = getattr(args, flag)
        if value is None:
            continue
        takers = [name for name in audit.AUDITED_ORACLES if registry.takes(name, flag)]
        if args.oracle not in takers:
            parser.error(f"--{flag} applies to {', '.join(takers)} only, not {args.oracle}")
        params[flag] = value
    value = 0 if args.value is None else args.value
    other = 1 if args.other_value is None else args.other_value
    try:
        oracle = registry.make(args.oracle, registry.FREQUENCY_ORACLE, **params)
        validation.check_positive_int(args.reports, name="--reports", minimum=20)
        audit.cell_map(oracle, value, other)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    rng = randomness.make_rng(args.seed)
    _LOGGER.info("auditing %s %s: %d reports of each of %d and %d (%s)", oracle.name,
                 oracle.parameters, args.reports, value, other,
                 "seeded" if args.seed is not None else "OS CSPRNG")
    result = audit.audit_oracle(oracle, args.reports, value, other, rng, alpha=args.alpha,
                                selection_fraction=args.selection_fraction,
                                progress=_progress_logger())
    source = {"mode": "oracle", "perturbation": "ldpflow", "seed": args.seed,
              "randomness": "seeded numpy generator" if args.seed is not None
              else "OS CSPRNG (os.urandom)"}
    return result, source


def _progress_logger():
    state = {"last": time.perf_counter()}

    def report(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - state["last"] >= _PROGRESS_SECONDS or done == total:
            state["last"] = now
            _LOGGER.info("perturbed %d of %d reports (%.0f%%)", done, total, 100 * done / total)

    return report


# -- report files ---------------------------------------------------------------------------------
def _expand(parser: argparse.ArgumentParser, flag: str, patterns: list[str] | None,
            fmt: str | None) -> list[tuple[str, str]]:
    from ldpflow.wire import formats

    if not patterns:
        parser.error(f"{flag} is required with --input and --other_input")
    paths: list[str] = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        matched = [path for path in matched if not os.path.isdir(path)]
        if not matched or not all(os.path.isfile(path) for path in matched):
            parser.error(f"{flag} {pattern!r} matched no files")
        paths.extend(matched)
    out = []
    for path in dict.fromkeys(paths):  # each file once, in order
        try:
            out.append((path, fmt or formats.detect_format(path)))
        except ValueError as exc:
            parser.error(f"{exc} (--input_format)")
    return out


@contextlib.contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    name = path.lower()
    if name.endswith(".gz"):
        opener: Any = gzip.open
    elif name.endswith(".bz2"):
        opener = bz2.open
    else:
        opener = open
    with opener(path, "rb") as stream:
        yield stream


def _audit_files(parser: argparse.ArgumentParser,
                 args: argparse.Namespace) -> tuple[audit.AuditResult, dict[str, Any]]:
    from ldpflow.wire import formats
    from ldpflow.wire.parse import AcceptancePolicy

    given = [f"--{name}" for name in _ORACLE_FLAGS if getattr(args, name) is not None]
    if given:
        parser.error(f"{', '.join(given)} do not apply to report files: the oracle and its "
                     "parameters come from the reports")
    if args.value is None or args.other_value is None:
        parser.error("--value and --other_value are required with --input and --other_input "
                     "(the inputs the client's reports were made from)")
    inputs = [_expand(parser, "--input", args.input, args.input_format),
              _expand(parser, "--other_input", args.other_input, args.input_format)]
    policy = AcceptancePolicy()
    keys: collections.Counter[tuple[ProtocolKey, int]] = collections.Counter()
    dead: list[collections.Counter[str]] = [collections.Counter(), collections.Counter()]
    auditor: audit.Auditor | None = None
    chosen: ProtocolKey | None = None
    started = time.perf_counter()
    for which, files in enumerate(inputs):
        for path, fmt in files:
            count = 0
            with _open(path) as stream:
                for parsed in formats.read_reports(stream, fmt, source=path, policy=policy):
                    for letter in parsed.dead_letters:
                        dead[which][letter.reason] += letter.count
                    for key, batch in parsed.batches.items():
                        keys[(key, which)] += len(batch)
                        count += len(batch)
                        if chosen is None:
                            chosen = key
                            auditor = _auditor(parser, key, args)
                        if key == chosen and auditor is not None:
                            auditor.add(which, batch.reports)
            _LOGGER.info("read %s: %d reports (%.1fs)", path, count,
                         time.perf_counter() - started)
    _check_keys(parser, keys, dead, inputs)
    for flag, refused in zip(("--input", "--other_input"), dead, strict=True):
        if refused:
            _LOGGER.warning("%s: %d records refused: %s", flag, sum(refused.values()),
                            dict(refused))
    if auditor is None:  # pragma: no cover - _check_keys refuses files without reports
        parser.error("the files hold no reports of an audited oracle")
    try:
        result = auditor.result()
    except ValueError as exc:
        parser.error(str(exc))
    source = {"mode": "files", "input": [p for p, _ in inputs[0]],
              "other_input": [p for p, _ in inputs[1]],
              "dead_letters": _dead_letters(dead)}
    return result, source


def _auditor(parser: argparse.ArgumentParser, key: ProtocolKey,
             args: argparse.Namespace) -> audit.Auditor | None:
    if key.name not in audit.AUDITED_ORACLES:
        return None  # refused by _check_keys once every file is read
    oracle = key.protocol
    if not isinstance(oracle, FrequencyOracle):  # pragma: no cover - registry keys only
        return None
    try:
        return audit.Auditor(oracle, args.value, args.other_value, alpha=args.alpha,
                             selection_fraction=args.selection_fraction)
    except (TypeError, ValueError) as exc:
        parser.error(f"{exc} (for the reports' {key.to_json()})")


def _dead_letters(dead: list[collections.Counter[str]]) -> dict[str, Any]:
    return {"count": sum(sum(c.values()) for c in dead),
            "input": {"count": sum(dead[0].values()), "by_reason": dict(dead[0])},
            "other_input": {"count": sum(dead[1].values()), "by_reason": dict(dead[1])}}


def _check_keys(parser: argparse.ArgumentParser,
                keys: collections.Counter[tuple[ProtocolKey, int]],
                dead: list[collections.Counter[str]],
                inputs: list[list[tuple[str, str]]]) -> None:
    for which, flag in enumerate(("--input", "--other_input")):
        if any(w == which for _, w in keys):
            continue
        if not dead[which]:
            parser.error(f"{flag} holds no reports")
        refused = sum(dead[which].values())
        raise _NothingToAudit(
            f"{flag} holds no valid reports: {refused} records refused as reports no "
            f"conforming client could produce ({'; '.join(sorted(dead[which]))})",
            {"verdict": "fail", "conforms": False, "epsilon_lower_bound": None,
             "reason": f"{flag} holds no valid reports",
             "source": {"mode": "files", "input": [p for p, _ in inputs[0]],
                        "other_input": [p for p, _ in inputs[1]],
                        "dead_letters": _dead_letters(dead)}})
    distinct = sorted({key for key, _ in keys}, key=lambda k: k.to_json())
    if len(distinct) > 1:
        found = "; ".join(
            f"{key.to_json()} ({keys[(key, 0)]} in --input, {keys[(key, 1)]} in --other_input)"
            for key in distinct)
        parser.error(f"all reports must share one parameter set, found {len(distinct)}: "
                     f"{found}")
    (key,) = distinct
    if key.name not in audit.AUDITED_ORACLES:
        parser.error(f"reports of {key.name!r} cannot be audited: the audit knows the oracles "
                     f"{' '.join(audit.AUDITED_ORACLES)}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(run())
