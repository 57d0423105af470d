"""Every command's flags, declared once, parsed one way, without Apache Beam.

A flag is a :class:`Flag` (name = attribute, snake_case), a group of flags a :class:`Group`
(its title is a section of ``--help``), a command a :class:`Command`: its summary (the one
line of ``ldpflow --help``), its groups in help order and its required flags. Adding a flag
to a group is one line in that group's tuple; a group is shared by every command that lists
it, so one concept has one name and one help text.

:func:`parse` is every command's entry: ``-h``/``--help`` prints the groups (exit 0); a bad
value, a missing required flag, a stray argument or an unknown flag is a one-line usage
error (a ``SystemExit`` whose code is ``ldpflow COMMAND: error: ...``: the CLI prints it and
exits 2), naming the closest flag ("did you mean") or pointing at ``--help``. Parsing never
imports Beam, nor the job's module: a usage error costs Python (and numpy, for a flag whose
choices are the oracles); defaults that live elsewhere (the acceptance policy's, in the wire
layer) are :class:`Lazy`, computed for ``--help`` and for a command line that parses.

A Beam job (``Command.beam``: estimate, heavy-hitters and stream, when ``--engine`` is beam;
stream always) hands the flags that are not ldpflow's, unchanged and in order, to Beam's
``PipelineOptions`` (``Parsed.beam_argv``), so every runner's flags keep working
(``--runner``, ``--project``, ``--region``, ``--temp_location``, Flink's and Spark's, ...).
``--engine auto``, the default of estimate and heavy-hitters, is resolved here, once, to the
engine that runs (:func:`choose_engine`): beam when the command line names any of Beam's
flags (a runner, a pipeline option) or a path on another file system (``gs://``, ...: read
and written through Beam's file systems), the job plan's dask or spark when a flag of theirs
is given (``--dask_scheduler``, ``--workers``; ``--spark_master``), otherwise local (the job
plan in this process: the same outputs, byte for byte, at a third of Beam's fixed cost).
``Parsed.engine_reason`` says why, for the job's first log line.
A flag that is not ldpflow's is Beam's when a ``PipelineOptions`` class of Beam declares
it: the table :mod:`ldpflow.pipelines.beam_flags`, generated from Beam's live parser, says
so without importing Beam (about a second) when it was made for the installed Beam's
version (``apache_beam/version.py``, read as text). Otherwise it is a misspelling of the
closest of ldpflow's or Beam's flags, or refused pointing at ``--help``. Beam is imported
and asked only when the table is of another version (the flags its ``pipeline_options``
module names, read as text, are then tried first) or when ``--beam_plugin(s)`` names
plugin modules: those are imported, as Beam's workers import them, so that an options class
a plugin defines counts (the CLI sees no other code that could define one). A Beam flag on
a command that does not run on Beam (``--engine local``, simulate, ...) is refused, saying
so.

Renamed flags keep their old spelling as a deprecated alias (:attr:`Flag.deprecated`): the
old name is accepted with one warning naming the new one. One name per concept:
``--epsilon`` is the epsilon a job perturbs with (simulate, demo); ``--expect_epsilon`` (and
``--expect_*``) what a job checks the reports it reads against (estimate, stream,
heavy-hitters, audit).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ldpflow.pipelines.usage import HelpFormatter, Parser, usage_error

__all__ = [
    "Flag",
    "Group",
    "Command",
    "Parsed",
    "Inferred",
    "Lazy",
    "parse",
    "choose_engine",
    "help_parser",
    "beam_flag_table",
    "protocol_flag_specs",
    "COMMANDS",
    "JOBS",
    "ENGINES",
    "DEFAULT_METHODS",
    "INPUT",
    "OUTPUT",
    "METHODS",
    "ESTIMATE",
    "POISONING",
    "VERDICT",
    "CONTRIBUTION",
    "ACCEPTANCE",
    "ENGINE",
    "STREAM",
    "HEAVY_HITTERS",  # noqa: F822 (built when first asked for: __getattr__)
    "LABELS",
    "VALUE_LABELS",
]

_LOGGER = logging.getLogger(__name__)

DEFAULT_METHODS = "base,base-pos,base-cut,norm,norm-sub,mle-apx,power-ns"


# -- the declarations --------------------------------------------------------------------------
class Lazy:
    """A default computed when first needed (the help, or a parse that leaves it unset), so
    that declaring it imports nothing: ``Lazy(lambda: AcceptancePolicy().max_keys)``."""

    def __init__(self, compute: Callable[[], Any]):
        self._compute = compute

    @functools.cached_property
    def value(self) -> Any:
        return self._compute()

    def __str__(self) -> str:  # argparse's "%(default)s" in the help
        return str(self.value)


class Inferred(str):
    """A default that the job infers (``simulate --codec``): told apart from the same value
    given on the command line by ``isinstance(value, Inferred)``."""


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag: ``--NAME``, stored as the attribute ``NAME``.

    ``deprecated`` lists old spellings, still accepted with a warning naming this one.
    """

    name: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    help: str = ""
    choices: Sequence[Any] | None = None
    action: str | None = None  # "store_true"
    nargs: str | None = None
    const: Any = None
    metavar: str | None = None
    deprecated: tuple[str, ...] = ()

    def add_to(self, target, *, required: bool = False) -> None:
        kwargs: dict[str, Any] = {"help": self.help, "default": self.default}
        if required:
            kwargs["required"] = True
        if self.deprecated:
            old = ", ".join(f"--{name}" for name in self.deprecated)
            kwargs["help"] = f"{self.help} (formerly {old}, deprecated)".strip()
        if self.action is not None:
            kwargs["action"] = self.action
        else:
            for key in ("type", "choices", "nargs", "const", "metavar"):
                value = getattr(self, key)
                if value is not None:
                    kwargs[key] = value
        target.add_argument(f"--{self.name}", **kwargs)


@dataclasses.dataclass(frozen=True)
class Group:
    """Flags that belong together; ``title`` heads them in ``--help``."""

    title: str
    flags: tuple[Flag, ...]
    description: str | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(flag.name for flag in self.flags)

    def but(self, *names: str, title: str | None = None, **changes: Mapping[str, Any]) -> Group:
        """This group without the flags ``names``, with ``changes`` (``{flag: {field:
        value}}``) made to others: a command's variant of a shared group."""
        unknown = (set(names) | set(changes)) - set(self.names())
        if unknown:
            raise KeyError(f"group {self.title!r} has no flags {sorted(unknown)}")
        flags = tuple(dataclasses.replace(flag, **changes.get(flag.name, {}))
                      for flag in self.flags if flag.name not in names)
        return dataclasses.replace(self, flags=flags, title=title or self.title)


@dataclasses.dataclass(frozen=True)
class Command:
    """A command of ``ldpflow``: its one-line summary, option groups (help order) and
    required flags. ``beam``: a Beam job, whose other flags go to Beam's
    ``PipelineOptions`` (unless its ``--engine`` names another engine). ``commands``:
    subcommands (``ldpflow pubsub create``), which take the groups too."""

    name: str
    summary: str
    #: The groups, or a function returning them (groups that read the protocol registry:
    #: built when first used, so ``ldpflow --help`` imports no protocol, nor numpy).
    declared_groups: tuple[Group, ...] | Callable[[], tuple[Group, ...]] = ()
    required: tuple[str, ...] = ()
    beam: bool = False
    description: str | None = None
    epilog: str | None = None
    commands: Mapping[str, Command] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def groups(self) -> tuple[Group, ...]:
        declared = self.declared_groups
        return tuple(declared() if callable(declared) else declared)

    @property
    def prog(self) -> str:
        return f"ldpflow {self.name}"

    def flags(self) -> dict[str, Flag]:
        return {flag.name: flag for group in self.groups for flag in group.flags}

    def on_beam(self, args: argparse.Namespace) -> bool:
        """Whether this run is a Beam pipeline (so Beam's flags are accepted): ``--engine``
        beam once :func:`parse` has resolved auto (stream has no ``--engine``: always)."""
        return self.beam and getattr(args, "engine", "beam") == "beam"


@dataclasses.dataclass
class Parsed:
    """A parsed command line: ``args`` (ldpflow's flags, by name), ``beam_argv`` (the
    others, for Beam's ``PipelineOptions``), the ``command`` and its ``parser``, whose
    ``error`` raises a one-line usage error. ``engine_reason``: why ``args.engine`` is the
    engine that runs (:func:`choose_engine`; None for a command without ``--engine``)."""

    command: Command
    args: argparse.Namespace
    beam_argv: list[str]
    parser: argparse.ArgumentParser
    engine_reason: str | None = None


# -- the protocol flags ------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ProtocolFlagSpecs:
    """What the command line knows of the protocols: the heavy-hitter protocol names and
    their parameter flags (``Flag`` each, ``help`` starting with the protocols that take
    it)."""

    heavy_hitters: tuple[str, ...]
    flags: tuple[Flag, ...]


@functools.cache
def protocol_flag_specs() -> ProtocolFlagSpecs:
    """The per-protocol flags of every command, from the protocol registry
    (:func:`ldpflow.core.registry.protocol_flags`: each protocol class declares its
    parameters' flags and help)."""
    from ldpflow.core.registry import HEAVY_HITTER, names, protocol_flags

    return ProtocolFlagSpecs(
        heavy_hitters=tuple(sorted(names(HEAVY_HITTER))),
        flags=tuple(Flag(flag.name, flag.type, flag.default, help=flag.text)
                    for flag in protocol_flags(HEAVY_HITTER)))


@functools.cache
def _oracle_keys() -> tuple[str, ...]:
    from ldpflow.core.oracles import registry

    return tuple(sorted(registry.ORACLES))


class _Choices(Sequence):
    """Choices computed when first used (the oracle keys import the oracles)."""

    def __init__(self, compute: Callable[[], Sequence[str]]):
        self._compute = compute

    @functools.cached_property
    def _items(self) -> tuple[str, ...]:
        return tuple(self._compute())

    def __getitem__(self, index):
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item) -> bool:
        return item in self._items

    def __iter__(self):
        return iter(self._items)


def _policy_default(name: str) -> Lazy:
    def compute():
        from ldpflow.wire.parse import AcceptancePolicy

        return getattr(AcceptancePolicy(), name)

    return Lazy(compute)


# -- the shared groups -------------------------------------------------------------------------
INPUT = Group("Where a batch job's reports come from", (
    Flag("input", help="Report files (a glob): .avro, .jsonl or .parquet, optionally .gz."),
    Flag("input_format", choices=("avro", "json", "parquet"),
         help="The format of every input file (default: from each file's name)."),
))

OUTPUT = Group("Where a job writes (a directory, replaced as a whole when the run ends)", (
    Flag("output", help="Output directory: estimates.json and estimates.avro (heavy-hitters: "
                        "heavy_hitters.json) and dead_letters/; stream: one JSON and one Avro "
                        "file per pane."),
))

METHODS = Group("The post-processing methods to apply", (
    Flag("methods", default=DEFAULT_METHODS,
         help="Comma-separated post-processing methods (base: the raw unbiased estimate)."),
))

def _default_max_job_bytes() -> int:
    from ldpflow.plan.steps import DEFAULT_MAX_JOB_BYTES

    return DEFAULT_MAX_JOB_BYTES


ESTIMATE = Group("What ldpflow estimate counts", (
    Flag("dedup", choices=("report_id", "none"), default="report_id",
         help="report_id: count each report id once, the other copies as duplicates; none: "
              "count every copy."),
    Flag("max_job_bytes", int, Lazy(_default_max_job_bytes),
         help="The most memory (bytes) all parameter sets of the job may need together "
              "(default 8 GiB): the sets with the most reports are admitted while they fit, "
              "the reports of the others are dead letters."),
    Flag("quiet", nargs="?", const="true", choices=("true", "false"),
         help="No progress lines on stderr (by default every 10 s: records read, reports/s "
              "and an ETA)."),
))

VERDICT = Group("When a batch job fails (ldpflow.pipelines.verdict)", (
    Flag("max_dead_letter_fraction", float, 0.1,
         help="Exit with status 1 when more than this fraction of the records were refused "
              "(parts of files lost whole count by their bytes), or when no report was "
              "counted (the outputs are written either way)."),
))

POISONING = Group("The data-poisoning defence", (
    Flag("poisoning", choices=("none", "detect"), default="none",
         help="detect: test for data poisoning (fake users' crafted reports) and add a "
              "poisoning section to each result. estimate: each parameter set's reports, "
              "with recovered estimates; heavy-hitters: each configuration's pass counts "
              "(pem: a dispersion test per pass; the other protocols have no defence, which "
              "their results say). docs/poisoning.md."),
))

CONTRIBUTION = Group("What one user may contribute", (
    Flag("max_reports_per_user", int,
         help="Count at most N reports per user id: in a batch run its earliest by event "
              "time, then report-id hash; in a stream per window, its first to arrive. The "
              "others are counted as capped, so one user's privacy loss is at most N "
              "epsilon. Default: no cap."),
))

#: What the reports read are checked against (``--expect_*``); heavy-hitters and audit take
#: ``--expect_epsilon`` alone (their protocol and parameters have flags of their own).
EXPECT_EPSILON = Flag("expect_epsilon", float, deprecated=("epsilon",),
                      help="Refuse (dead-letter) reports made with any other epsilon.")

ACCEPTANCE = Group("What the server accepts (ldpflow.wire.parse.AcceptancePolicy)", (
    Flag("expect_oracle", choices=_Choices(_oracle_keys),
         help="Refuse (dead-letter) reports of any other oracle."),
    dataclasses.replace(EXPECT_EPSILON, deprecated=()),
    Flag("expect_domain_size", int, help="Refuse reports of any other domain size."),
    Flag("max_domain_size", int, _policy_default("max_domain_size"),
         help="Refuse reports claiming a larger domain (pem: more groups); a key's counts "
              "hold about this many counters."),
    Flag("max_hash_range", int, _policy_default("max_hash_range"),
         help="Refuse local-hashing reports of a larger hash range (given, or OLH's optimum "
              "for their epsilon)."),
    Flag("max_epsilon", float, _policy_default("max_epsilon"),
         help="Refuse reports of a larger epsilon."),
    Flag("max_keys", int, _policy_default("max_keys"),
         help="The most parameter sets one chunk of a file may hold (the largest are kept)."),
    Flag("max_counters", int, _policy_default("max_counters"),
         help="The most counters (8 bytes each) the parameter sets of one chunk may need "
              "together (the largest sets first)."),
    Flag("max_key_bytes", int, _policy_default("max_key_bytes"),
         help="The most memory (bytes) one parameter set may need: its accumulator and its "
              "estimates, about 4 KiB a domain value; a report claiming more is refused "
              "before anything is allocated."),
))

#: The limits of ACCEPTANCE that bound a heavy-hitter job's reports (one configuration: the
#: ``--expect_*`` checks are the protocol's flags; hash ranges and key memory are a frequency
#: oracle's).
HEAVY_HITTER_LIMITS = ACCEPTANCE.but("expect_oracle", "expect_epsilon", "expect_domain_size",
                                     "max_hash_range", "max_key_bytes",
                                     title="What the server accepts")

#: The engines of ``--engine``: auto (the default: one of the others, :func:`choose_engine`),
#: beam (the Beam job, any Beam runner) and the job plan's (``ldpflow.plan``;
#: ``docs/engines.md``).
ENGINES = ("auto", "beam", "dask", "spark", "local")

ENGINE = Group("The engine that runs the job (docs/engines.md)", (
    Flag("engine", choices=ENGINES, default="auto",
         help="auto: beam when the command line names any Apache Beam flag (--runner, "
              "--project, --temp_location, --direct_num_workers, ...) or a path on another "
              "file system (gs://, s3://, ...), dask or spark when a flag of theirs is "
              "given, else local; the first log line says which and why. beam: Apache Beam "
              "(--runner and the Beam flags; default runner: Beam's in-process "
              "FnApiRunner); dask: Dask distributed; spark: PySpark; local: the job plan in "
              "this process (the fastest start). Every engine writes the same outputs."),
    Flag("dask_scheduler",
         help="dask: the scheduler's address (tcp://HOST:8786); default: a LocalCluster of "
              "--workers worker processes."),
    Flag("workers", int,
         help="dask without --dask_scheduler: worker processes of the LocalCluster (default: "
              "one per core)."),
    Flag("dedup_store", choices=("disk", "memory"),
         help="The job plan's dedup: disk writes the 8-byte id hashes to a temporary folder "
              "(beside the output's staging) and resolves them in passes of bounded memory; "
              "memory shuffles them as arrays. Default: disk on --engine local, memory on "
              "dask and spark."),
    Flag("spark_master",
         help="spark: the master URL (local[N], local-cluster[N,C,MB], spark://HOST:7077, "
              "yarn, ...; default: spark-submit's --master, else local[*])."),
))

STREAM = Group("Sources, sinks and windows of ldpflow stream", (
    Flag("subscription", help="Pub/Sub subscription: projects/P/subscriptions/S."),
    Flag("output_topic", help="Pub/Sub topic for estimates (JSON, one message per window, key "
                              "and pane)."),
    Flag("dead_letter_topic", help="Pub/Sub topic for refused messages and reports, with "
                                   "reasons."),
    Flag("dead_letter_output", help="Directory for dead letters as JSON lines."),
    Flag("window_size", float, 60.0, help="Window length in seconds."),
    Flag("window_period", float, help="Sliding windows: a new window every PERIOD seconds "
                                      "(default: fixed windows)."),
    Flag("allowed_lateness", float, 0.0,
         help="Seconds after a window's end during which late reports still update it (a "
              "late pane each)."),
    Flag("early_firing", float, 0.0,
         help="Emit an early pane every N seconds of processing time while a window is open "
              "(0: none)."),
    Flag("timestamp_attribute",
         help="Take event time from this message attribute (milliseconds since the epoch or "
              "RFC 3339) instead of the reports."),
    Flag("allow_production", nargs="?", const="true", choices=("true", "false"),
         help="Work on real Pub/Sub: needed on a remote runner (Dataflow) and, on a local "
              "one, without PUBSUB_EMULATOR_HOST; refused without it (true or no value: "
              "allowed)."),
))


@functools.cache
def _heavy_hitters_engine() -> Group:
    """ENGINE with the heavy-hitter plan's pass store."""
    from ldpflow.plan.heavy_hitters import PASS_STORES

    return dataclasses.replace(ENGINE, flags=(*ENGINE.flags, Flag(
        "pass_store", choices=PASS_STORES,
        help="dask, spark, local: where the passes after the first read their reports: disk "
             "(what pass 0 wrote of them, compact, beside the output's staging: the input is "
             "decoded once; on a cluster a filesystem every worker sees) or reread (the input, "
             "decoded again each pass). Default: disk.")))


@functools.cache
def _heavy_hitters_group() -> Group:
    specs = protocol_flag_specs()
    return Group(
        "The protocol, its configuration and the server options of ldpflow heavy-hitters", (
            Flag("protocol", choices=specs.heavy_hitters, default="pem",
                 help="The heavy-hitter protocol of the reports."),
            Flag("k", int, help="Top-k size of the configuration (default: from the input)."),
            Flag("bits", int, help="m: the width of the values, in [1, 64] (default: from the "
                                   "input)."),
            *specs.flags,
            Flag("survivors", int,
                 help="pem, treehist, sfp: candidates each pass keeps (pem: default 2k, or as "
                      "many as Q allows; treehist, sfp: 4k)."),
            Flag("threshold_sigma", float,
                 help="pem, treehist, sfp: keep only candidates estimated at THRESHOLD_SIGMA "
                      "standard deviations or more (treehist, sfp: default 3)."),
            Flag("threshold", float,
                 help="pem, treehist, sfp: keep only candidates of estimated frequency >= "
                      "THRESHOLD."),
            Flag("significance",
                 help="pem: return only values significantly above zero among the last "
                      "pass's candidates, family-wise at this level (weighted Bonferroni; "
                      "default 0.05); off: no such test (the paper)."),
            Flag("refine_sigma",
                 help="pem: z of the combined ranking of a pass's candidates with the "
                      "earlier passes' estimates (default 3); off: each pass's own estimates "
                      "(the paper's ranking)."),
            Flag("codec", choices=("int", "string"),
                 help="Refuse reports of the other codec (default: each report's own); the "
                      "output decodes the values."),
            dataclasses.replace(
                EXPECT_EPSILON,
                help="Refuse (dead-letter) reports made with any other epsilon (default: each "
                     "epsilon in the input is its own result)."),
            Flag("truth",
                 help="A truth file (ldpflow simulate's truth.json, or one value per line, "
                      "most frequent first): the output adds precision, recall, F1 and NCR of "
                      "every result."),
        ),
        description="The configuration (--k, --bits and the protocol's own parameter flags) "
                    "fixes the groups and passes when the pipeline is built; without --k and "
                    "--bits it is read from the first report of the input. Reports of any "
                    "other protocol or configuration are dead letters. --survivors, "
                    "--threshold_sigma and --threshold are server options (of pem, treehist "
                    "and sfp): clients do not depend on them.")


def __getattr__(name: str) -> Any:
    """``HEAVY_HITTERS``, the heavy-hitters group, built from the protocol registry when first
    asked for (PEP 562)."""
    if name == "HEAVY_HITTERS":
        return _heavy_hitters_group()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- simulate, audit, report, demo, pubsub -----------------------------------------------------
_SIMULATE_FORMATS = ("avro", "json", "parquet")
DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _simulate_groups() -> tuple[Group, ...]:
    specs = protocol_flag_specs()
    shape = {flag.name: flag for flag in specs.flags}
    protocol = Group("The protocol and its privacy", (
        Flag("oracle", choices=_Choices(lambda: (*_oracle_keys(), *specs.heavy_hitters)),
             help="The oracle (or heavy-hitter protocol) that perturbs."),
        Flag("epsilon", float, help="The epsilon to perturb with."),
        Flag("domain_size", int,
             help="The domain size; heavy hitters: the number N of distinct values (not "
                  "needed with --values_file)."),
        dataclasses.replace(shape["hash_range"], help="olh, pem, treehist: g, the hash range "
                                                      "(a power of two)."),
        Flag("max_domain_size", int, _policy_default("max_domain_size"),
             help="Refuse a larger --domain_size (memory grows with it); the default is "
                  "ldpflow estimate's --max_domain_size."),
    ))
    from_hh = _heavy_hitters_group().flags
    heavy = Group("heavy hitters (pem spm mcm treehist sfp)", (
        Flag("bits", int, help="m: the width of the values (default with --values_file: from "
                               "the data, see --coverage)."),
        Flag("k", int, help="The top-k size."),
        *(flag for flag in from_hh if flag.name in shape and flag.name != "hash_range"),
        Flag("max_candidates", int, Lazy(_default_max_candidates),
             help="The automatic configuration's compute budget: the most candidates one "
                  "pass may estimate."),
        Flag("codec", choices=("int", "string"), default=Inferred("int"),
             help="int: values are integers; string: --values_file holds strings (default: "
                  "int, or with --values_file string unless every line of it is an "
                  "integer)."),
        Flag("truncate", action="store_true",
             help="string codec: keep the leading bytes of longer strings (whole UTF-8 "
                  "characters) instead of refusing them (implied when --bits is chosen from "
                  "the data)."),
        Flag("coverage", float, 0.99,
             help="string codec without --bits: the share of the values that must fit whole "
                  "in m/8 bytes."),
        Flag("truth_top", int, 1000, help="How many of the most frequent values truth.json "
                                          "lists."),
    ), description="pem: without --query_limit, --start_bits, --step_bits, --num_groups and "
                   "--hash_range the configuration is chosen automatically from --users, "
                   "--epsilon, --k and --bits (ldpflow.core.heavy_hitters.configure); the "
                   "other protocols take their defaults. The log names the heavy-hitters "
                   "flags of the configuration.")
    users = Group("The users and their values", (
        Flag("users", int, help="Number of users (required unless --values_file is given)."),
        Flag("distribution", default="zipf:1.1",
             help="zipf:S | uniform | geometric:P over the domain (rank r = value r)."),
        Flag("values_file",
             help="Raw values instead of a distribution, one per line: integers in [0, "
                  "--domain_size) for a frequency oracle; for heavy hitters integers, or "
                  "strings (see --codec)."),
        dataclasses.replace(VALUE_LABELS, help="A label file (CSV value,label or JSON; "
                                               "frequency oracles): --values_file then holds "
                                               "one label per line, each sent as its value "
                                               "(docs/pipeline.md)."),
        Flag("seed", int, 0, help="The seed of the simulation."),
        Flag("start_time_ms", int, DEFAULT_START_MS,
             help="Event times are uniform over [start, start + duration)."),
        Flag("duration_s", float, 3600.0, help="The event times' span, in seconds."),
    ))
    files = Group("The report files", (
        Flag("output", help="Output directory: the report files and truth.json."),
        Flag("shards", int, 4, help="The number of report files."),
        Flag("format", choices=_SIMULATE_FORMATS, default="avro",
             help="The report files' format."),
    ))
    return protocol, heavy, users, files


def _default_max_candidates() -> int:
    from ldpflow.core import heavy_hitters as hh

    return hh.config.DEFAULT_MAX_CANDIDATES


def _audit_groups() -> tuple[Group, ...]:
    own = Group("ldpflow's own perturbation", (
        Flag("oracle", choices=_Choices(_audited_oracles), help="The oracle to perturb with."),
        dataclasses.replace(
            EXPECT_EPSILON,
            help="The claimed epsilon, which the bound is checked against (the oracle "
                 "perturbs with it)."),
        Flag("domain_size", int, help="d."),
        Flag("hash_range", int,
             help="olh, blh: g, a power of two (default: the optimum for epsilon); cms, hcms: "
                  "the sketch width m, a power of two (default 1024)."),
        Flag("num_hashes", int, help="cms, hcms: k, the number of hash functions (default "
                                     "256)."),
        Flag("reports", int, help="Reports per value (10^6 resolves epsilon to about 0.02, "
                                  "see docs/audit.md)."),
        Flag("seed", int, help="Seed a reproducible audit (default: the OS CSPRNG, as a "
                               "client)."),
    ))
    files = Group("report files of any client", (
        Flag("input", nargs="+", metavar="FILES",
             help="Report files (globs) the client made from --value."),
        Flag("other_input", nargs="+", metavar="FILES",
             help="Report files (globs) the client made from --other_value."),
        *INPUT.but("input", input_format={"deprecated": ("format",)}).flags,
    ))
    test = Group("The test", (
        Flag("value", int, help="v: the input of the first reports (default 0 for --oracle)."),
        Flag("other_value", int, help="v': the input of the other reports (default 1 for "
                                      "--oracle)."),
        Flag("alpha", float, Lazy(lambda: _audit_module().DEFAULT_ALPHA),
             help="The bound holds with probability >= 1 - alpha."),
        Flag("selection_fraction", float,
             Lazy(lambda: _audit_module().DEFAULT_SELECTION_FRACTION),
             help="The share of each input's reports that chooses the event; the rest bounds "
                  "it."),
        Flag("strict", action="store_true",
             help="Exit 1 also when the reports contradict the claimed oracle's law, or when "
                  "some records are refused as invalid."),
        Flag("output", help="Write the JSON document here (default: standard output)."),
    ))
    return own, files, test


def _audit_module():
    from ldpflow.core import audit

    return audit


def _audited_oracles() -> tuple[str, ...]:
    return tuple(_audit_module().AUDITED_ORACLES)


#: ``--value_labels``: a label file naming the values (``ldpflow.wire.labels``).
VALUE_LABELS = Flag("value_labels", metavar="FILE",
                    help="A label file (CSV value,label or JSON {\"value\": \"label\"}) "
                         "naming the values: labels in the outputs, and its version (a "
                         "content hash) in the run block.")

LABELS = Group("Value labels and output formats (docs/pipeline.md)", (
    VALUE_LABELS,
    Flag("expect_value_labels",
         help="The dictionary version the clients encoded with (blake2b-128:...; the JS "
              "client's ValueLabels.version): a --value_labels of another version is "
              "refused."),
    Flag("format", choices=("json", "csv"), default="json",
         help="json: estimates.json and estimates.avro; csv: also estimates.csv (one row per "
              "value and method)."),
))


REPORT = Group("The document and the page", (
    Flag("input", help="An ldpflow estimate output directory or its estimates.json; or an "
                       "ldpflow heavy-hitters output or its heavy_hitters.json, for a "
                       "heavy-hitter page alone."),
    Flag("output", help="The HTML file to write."),
    Flag("heavy_hitters", help="An ldpflow heavy-hitters output directory or its "
                               "heavy_hitters.json, shown on the same page as the estimates."),
    Flag("truth", help="truth.json of ldpflow simulate: true frequencies beside the "
                       "estimates, and each method's error."),
    Flag("top", int, 20, help="How many top values to show."),
    dataclasses.replace(VALUE_LABELS, help="A label file (CSV value,label or JSON "
                                           "{\"value\": \"label\"}) naming the values "
                                           "(default: the labels the estimates record); "
                                           "refused if the estimates record another "
                                           "dictionary."),
    Flag("title", help="The page's title (default: ldpflow estimates, or ldpflow heavy hitters "
                       "for a heavy-hitter page)."),
))

DEMO = Group("The demo", (
    Flag("oracle", choices=_Choices(_oracle_keys), default="olh",
         help="The oracle that perturbs."),
    Flag("users", int, 1_000_000, help="Number of users."),
    Flag("domain_size", int, 1024, help="The domain size."),
    Flag("epsilon", float, 1.0, help="The epsilon to perturb with."),
    Flag("seed", int, 2024, help="The seed of the simulation."),
    Flag("top", int, 10, help="How many top values to print."),
    Flag("output", default="demo-output", help="Output directory (reports, estimates, plot)."),
    dataclasses.replace(VALUE_LABELS, help="A label file (CSV value,label or JSON {\"value\": "
                                           "\"label\"}) naming the values in the table, the "
                                           "plot and the report."),
))

PUBSUB_WHERE = Group("where", (
    Flag("emulator_host", help="HOST:PORT of the Pub/Sub emulator (default: "
                               "$PUBSUB_EMULATOR_HOST)."),
    Flag("allow_production", action="store_true",
         help="Work on real Pub/Sub (Google Cloud credentials) when no emulator is given; "
              "refused without this flag."),
))

#: The default of `ldpflow pubsub publish --event_times`.
DEFAULT_EVENT_TIMES = "window:60"
#: The Avro block codecs a message may be written with (``ldpflow.wire.avro.CODECS``).
MESSAGE_CODECS = ("null", "deflate", "snappy")

_PUBSUB = {
    "create": Command(
        "pubsub create", "Create the topic and subscriptions (kept if they exist).",
        (PUBSUB_WHERE, Group("create", (
            Flag("topic", help="The reports topic: projects/PROJECT/topics/NAME."),
            Flag("subscription", help="A subscription to --topic (the one ldpflow stream "
                                      "reads): projects/PROJECT/subscriptions/NAME."),
            Flag("output_topic", help="The topic ldpflow stream publishes estimates to."),
            Flag("output_subscription", help="A subscription to --output_topic, to pull the "
                                             "estimates from."),
            Flag("dead_letter_topic", help="The topic ldpflow stream publishes dead letters "
                                           "to."),
            Flag("ack_deadline_seconds", int, 60,
                 help="Acknowledgement deadline of the subscriptions created."),
        ))),
        required=("topic",),
        description="Create a topic and a subscription to it (and the job's output topic and "
                    "a subscription to that); resources that exist already are kept."),
    "publish": Command(
        "pubsub publish",
        "Publish report files as messages, their event times spread over this window.",
        (PUBSUB_WHERE, Group("publish", (
            Flag("topic", help="The topic to publish to: projects/PROJECT/topics/NAME."),
            *INPUT.but(input={"help": "Report files (a glob): .avro, .jsonl/.json, .parquet "
                                      "(.gz ok)."},
                       input_format={"help": "The files' format (default: from their names)."}
                       ).flags,
            Flag("batch_size", int, 1000, help="Reports per message (a batch over 10 MB is "
                                               "split)."),
            Flag("event_times", default=DEFAULT_EVENT_TIMES, metavar="MODE",
                 help="window:SECONDS: the files' times, in their order, spread over the "
                      "current window of SECONDS (aligned to the epoch); spread:SECONDS: over "
                      "the last SECONDS up to now (a stream of windows; the earlier ones "
                      "late); now: every report at now; from_file: as they are (a backlog: "
                      "the job needs --allowed_lateness to count it)."),
            Flag("message_format", choices=("avro", "json"), default="avro",
                 help="Message body: an Avro container or JSON lines."),
            Flag("message_codec", choices=MESSAGE_CODECS, default="deflate",
                 help="The Avro messages' block codec: deflate (a third of the bytes of "
                      "null), null (uncompressed) or snappy."),
            Flag("timestamp_attribute",
                 help="Also set this attribute of each message to its earliest event time "
                      "(ms since the epoch), for ldpflow stream --timestamp_attribute."),
        ))),
        required=("topic", "input"),
        description="Publish report files (read into memory) as messages of --batch_size "
                    "reports (an Avro container each, as collectors send them). Event times "
                    "are rewritten (--event_times) so that the job's windows fire: by "
                    "default the files' times, in their order, spread over the current "
                    "60-second window (aligned to the epoch, as the job's windows are), so a "
                    "job with --window_size 60 holds every report in one window, whose final "
                    "pane equals a batch estimate of the files. Reports that reach the job "
                    "after their window's end are late: give the job an --allowed_lateness "
                    "longer than publishing takes."),
    "pull": Command(
        "pubsub pull", "Print the messages of a subscription (e.g. the estimates).",
        (PUBSUB_WHERE, Group("pull", (
            Flag("subscription", help="projects/PROJECT/subscriptions/NAME."),
            Flag("max_messages", int, help="Stop after this many messages (default: 10, or no "
                                           "limit with --until_reports)."),
            Flag("until_reports", int, metavar="N",
                 help="Pull estimates until their windows' latest panes hold N reports in all "
                      "(e.g. the number published: one window's final pane then holds every "
                      "report); exit 1 if --timeout passes first."),
            Flag("final_only", action="store_true",
                 help="With --until_reports: print only each window's final pane (the one "
                      "holding the most reports), when done."),
            Flag("timeout", float, 60.0, help="Stop after this many seconds (with "
                                              "--until_reports: fail)."),
            Flag("wake_topic",
                 help="The job's input topic: while pulling, send it an empty message "
                      "(ldpflow ignores it) every --wake_seconds. Beam's direct runner reads "
                      "an idle subscription for up to 30 s before its watermark moves on, so "
                      "without this a window's panes can come that late."),
            Flag("wake_seconds", float, 2.0, help="How often to wake the job (with "
                                                  "--wake_topic)."),
        ))),
        required=("subscription",),
        description="Pull, print (one line each: the text, or the size of a binary body) and "
                    "acknowledge messages until --max_messages arrived, or with "
                    "--until_reports until the estimates' panes hold that many reports; "
                    "--timeout is an error then (exit 1)."),
}

_BEAM_EPILOG = ("Every Apache Beam pipeline option is accepted as well (--runner, --project, "
                "--region, --temp_location, --setup_file, --direct_num_workers, ...; with "
                "--engine beam, and any of them makes --engine auto choose beam); see "
                "deploy/README.md.")


# -- the commands ------------------------------------------------------------------------------
COMMANDS: dict[str, Command] = {
    "demo": Command("demo", "The main job on built-in data: simulate, estimate, print and "
                            "plot the top values.", (DEMO,)),
    "simulate": Command("simulate", "Synthetic users -> perturbed report files (sharded) and "
                                    "truth.json; seeded, for evaluation.",
                        _simulate_groups, ("oracle", "epsilon", "output")),
    "estimate": Command("estimate", "Report files -> consistent frequency estimates (in "
                                    "process, or on Apache Beam, Dask or Spark: --engine).",
                        (INPUT, OUTPUT, METHODS, ESTIMATE, POISONING, VERDICT, CONTRIBUTION,
                         ACCEPTANCE, ENGINE, LABELS),
                        ("input", "output"), beam=True, epilog=_BEAM_EPILOG),
    "stream": Command("stream", "Reports from Pub/Sub -> windowed consistent estimates, or "
                                "with --protocol windowed heavy hitters (Apache Beam, "
                                "streaming).",
                      lambda: (STREAM, OUTPUT, METHODS, CONTRIBUTION, ACCEPTANCE,
                               _heavy_hitters_group().but(
                                   "expect_epsilon",
                                   title="Windowed heavy hitters (--protocol)",
                                   protocol={"default": None, "help": (
                                       "The heavy hitters of each window instead of "
                                       "estimates: the heavy-hitter protocol of the reports "
                                       "(the flags below, and --expect_epsilon, then only "
                                       "check the reports).")})),
                      ("subscription",), beam=True, epilog=_BEAM_EPILOG),
    "heavy-hitters": Command("heavy-hitters", "Heavy-hitter reports (pem spm mcm treehist "
                                              "sfp) -> the most frequent values of a huge "
                                              "domain (in process, or on Apache Beam, Dask "
                                              "or Spark: --engine).",
                             lambda: (INPUT, OUTPUT, _heavy_hitters_group(), POISONING,
                                      VERDICT, ESTIMATE.but("dedup", "max_job_bytes",
                                                            title="Progress"),
                                      HEAVY_HITTER_LIMITS, _heavy_hitters_engine()),
                             ("input", "output"), beam=True, epilog=_BEAM_EPILOG),
    "pubsub": Command("pubsub", "Pub/Sub emulator helpers: create a topic and subscription, "
                                "publish reports, pull messages.",
                      commands=_PUBSUB,
                      epilog="Run 'ldpflow pubsub COMMAND --help' for a command's flags; the "
                             "local recipe is in docs/streaming.md."),
    "audit": Command("audit", "An empirical lower bound on a client's epsilon, from reports "
                              "of known inputs.", _audit_groups,
                     description="An empirical lower bound on a client's epsilon "
                                 "(Clopper-Pearson), from reports of two known inputs: "
                                 "ldpflow's own perturbation (--oracle ...) or report files "
                                 "of any client (--input ... --other_input ...)."),
    "report": Command("report", "An estimates document -> one self-contained HTML page.",
                      (REPORT,), ("input", "output")),
}

#: The Beam jobs (their flag files and templates in ``deploy/``).
JOBS = {name: command for name, command in COMMANDS.items() if command.beam}


# -- parsing -----------------------------------------------------------------------------------
def _command(name: str | Command) -> Command:
    if isinstance(name, Command):
        return name
    head, _, sub = name.partition(" ")
    command = COMMANDS[head]
    return command.commands[sub] if sub else command


def help_parser(name: str | Command, *, mark_required: bool = True
                ) -> argparse.ArgumentParser:
    """The parser of ``ldpflow NAME`` (``"pubsub create"`` for a subcommand): its groups,
    defaults shown, required flags marked (``mark_required``: :func:`parse` checks them
    itself, after the unknown flags); its errors are one-line usage errors."""
    command = _command(name)
    parser = Parser(prog=command.prog, description=command.description or command.summary,
                    epilog=command.epilog, formatter_class=HelpFormatter, allow_abbrev=False)
    required = set(command.required) if mark_required else set()
    for group in command.groups:
        target = parser.add_argument_group(group.title, group.description)
        for flag in group.flags:
            flag.add_to(target, required=flag.name in required)
    return parser


def _command_help(command: Command) -> str:
    width = max(map(len, command.commands))
    lines = "\n".join(f"  {name:<{width}}  {sub.summary}" for name, sub in
                      command.commands.items())
    return (f"usage: {command.prog} COMMAND [FLAGS]\n\n{command.description or command.summary}"
            f"\n\ncommands:\n{lines}\n\n{command.epilog or ''}\n")


def _closest(flag: str, names: Sequence[str], cutoff: float) -> str | None:
    close = difflib.get_close_matches(flag, names, n=1, cutoff=cutoff)
    return close[0] if close else None


def _beam_file(*parts: str) -> str | None:
    """The text of a file of the installed ``apache_beam`` package (the one Python would
    import), read without importing it; None without Beam."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("apache_beam")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, *parts), encoding="utf-8") as f:
                return f.read()
        except OSError:
            continue
    return None


@functools.cache
def _beam_flags_from_source() -> frozenset[str]:
    """The flags the installed Beam's ``pipeline_options`` module defines, read as text
    (importing Beam takes about a second); empty without Beam. Used when the stored table
    (:mod:`ldpflow.pipelines.beam_flags`) is of another Beam version."""
    text = _beam_file("options", "pipeline_options.py")
    return frozenset(re.findall(r"""['"](--[A-Za-z][\w-]*)['"]""", text or ""))


def _installed_beam_version() -> str | None:
    """The installed Beam's version (``apache_beam.version.__version__``, what its package
    metadata says too), read as text from the package Python would import: importing
    ``importlib.metadata`` alone takes a quarter of a usage error's time (it imports the
    email parser). None without Beam, or if the file does not say."""
    found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""",
                      _beam_file("version.py") or "", re.MULTILINE)
    return found.group(1) if found else None


@functools.cache
def _beam_flags_stored() -> frozenset[str] | None:
    """Every flag of Beam's ``PipelineOptions`` classes from the stored table
    (:mod:`ldpflow.pipelines.beam_flags`) when it was made for the installed Beam, else
    None (another version, or no Beam: ask Beam itself)."""
    from ldpflow.pipelines import beam_flags

    if _installed_beam_version() != beam_flags.BEAM_VERSION:
        return None
    return beam_flags.FLAGS


#: Beam's flag naming modules to import before anything else (``SetupOptions``).
_BEAM_PLUGIN_FLAGS = ("--beam_plugin", "--beam_plugins")


def _beam_plugins(rest: Sequence[str]) -> list[str]:
    """The modules (or classes) named by ``--beam_plugin(s)`` among Beam's flags."""
    collect = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    collect.add_argument(*_BEAM_PLUGIN_FLAGS, dest="plugins", action="append", default=[])
    try:
        given, _ = collect.parse_known_args(list(rest))
    except SystemExit:  # --beam_plugins without a value: Beam's own parse says so
        return []
    return [name.strip() for value in given.plugins for name in value.split(",")
            if name.strip()]


def _import_beam_plugins(plugins: Sequence[str]) -> None:
    """Import Beam plugins as Beam's workers do (``sdk_worker_main``): a module, or the
    module of a class path; one that cannot be imported here is left to the workers."""
    import importlib

    for plugin in plugins:
        for module in (plugin, plugin.rpartition(".")[0]):
            if not module:
                continue
            try:
                importlib.import_module(module)
                break
            except ImportError:
                continue
        else:
            _LOGGER.info("Beam plugin %s cannot be imported here; its flags are unknown", plugin)


def _beam_flags_imported(plugins: Sequence[str] = ()) -> frozenset[str]:
    """Every flag of Beam's ``PipelineOptions`` classes, Beam imported (and ``plugins``:
    an options class defined in a plugin module counts once that module is imported)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    _import_beam_plugins(plugins)
    flags: set[str] = set()
    stack = list(PipelineOptions.__subclasses__())
    seen = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        collect = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        try:
            cls._add_argparse_args(collect)
        except (argparse.ArgumentError, TypeError, ValueError):
            continue
        flags.update(name for action in collect._actions for name in action.option_strings)
    return frozenset(flags)


def beam_flag_table() -> str:
    """The text of :mod:`ldpflow.pipelines.beam_flags` for the installed Beam, from its live
    parser: run ``python -m ldpflow.pipelines.beam_flags`` in a fresh process (so that only
    Beam's own options classes are loaded) after upgrading Beam."""
    import apache_beam

    version = apache_beam.__version__
    lines = "\n".join(f'    "{flag}",' for flag in sorted(_beam_flags_imported()))
    return (f'''"""The flags of Apache Beam's ``PipelineOptions`` classes, for Beam {version}.

Generated by ``python -m ldpflow.pipelines.beam_flags`` from Beam's live parser (every
``PipelineOptions`` subclass that importing ``apache_beam.options.pipeline_options``
defines); do not edit. :mod:`ldpflow.pipelines.options` uses it, when the installed Beam is
this version, to tell Beam's flags from misspellings without importing Beam, and
``tests/pipelines/test_options.py`` fails when it differs from the installed Beam's parser.
"""

__all__ = ["BEAM_VERSION", "FLAGS"]

BEAM_VERSION = "{version}"

FLAGS = frozenset({{
{lines}
}})

if __name__ == "__main__":
    import pathlib

    from ldpflow.pipelines.options import beam_flag_table

    pathlib.Path(__file__).write_text(beam_flag_table(), encoding="utf-8")
''')


def _undeprecate(command: Command, argv: list[str]) -> list[str]:
    """Old spellings -> their new names, one warning each."""
    renames = {f"--{old}": f"--{flag.name}" for flag in command.flags().values()
               for old in flag.deprecated}
    if not renames:
        return argv
    out = []
    for token in argv:
        name, eq, value = token.partition("=")
        if name in renames:
            _LOGGER.warning("%s: %s is deprecated: use %s", command.prog, name, renames[name])
            token = f"{renames[name]}{eq}{value}"
        out.append(token)
    return out


def _resolve_lazy(args: argparse.Namespace) -> None:
    for dest, value in vars(args).items():
        if isinstance(value, Lazy):
            setattr(args, dest, value.value)


def parse(name: str | Command, argv: Sequence[str] | None = None) -> Parsed:
    """Parse ``ldpflow NAME``'s command line (see the module docstring).

    Raises
    ------
    SystemExit
        Code 0 after printing the help; a one-line message for a usage error.
    """
    command = _command(name)
    argv = list(sys.argv[1:] if argv is None else argv)
    if command.commands:  # ldpflow pubsub COMMAND ...
        if not argv or argv[0] in ("-h", "--help"):
            if argv:
                print(_command_help(command), end="")
                raise SystemExit(0)
            raise usage_error(command.prog, f"give a command: {', '.join(command.commands)} "
                                            f"(see {command.prog} --help)")
        sub = command.commands.get(argv[0])
        if sub is None:
            close = _closest(argv[0], list(command.commands), 0.6)
            hint = f"; did you mean {close}?" if close else f" (see {command.prog} --help)"
            raise usage_error(command.prog, f"unknown command {argv[0]!r}{hint}")
        parsed = parse(sub, argv[1:])
        parsed.args.command = argv[0]
        return parsed
    if {"-h", "--help"} & set(argv):
        help_parser(command).print_help()
        raise SystemExit(0)
    parser = help_parser(command, mark_required=False)
    argv = _undeprecate(command, argv)
    args, rest = parser.parse_known_args(argv)  # a bad value: a usage error
    reason = imported = None
    if command.beam and hasattr(args, "engine"):
        found: list[str] = []
        if args.engine == "auto":
            found, imported = _beam_tokens(command, rest)
        args.engine, reason = choose_engine(args, found, parser)
    beam_argv = _check_rest(command, args, rest, parser, imported)
    missing = [f"--{flag}" for flag in command.required if getattr(args, flag) in (None, "")]
    if missing:
        parser.error(f"the following flags are required: {', '.join(missing)}")
    _resolve_lazy(args)
    return Parsed(command, args, beam_argv, parser, reason)


#: The flags that belong to one engine of the job plan: under ``--engine auto`` they choose it.
_PLAN_ENGINE_FLAGS = {"dask_scheduler": "dask", "workers": "dask", "spark_master": "spark"}
#: The flags naming a path a batch job reads or writes.
_PATH_FLAGS = ("input", "output", "truth", "value_labels")


def _beam_tokens(command: Command, rest: Sequence[str]
                 ) -> tuple[list[str], frozenset[str] | None]:
    """The flags among ``rest`` (the tokens that are not ldpflow's) that are Beam's, for
    ``--engine auto``: the stored table's or the installed Beam's source's (whatever its
    version; without Beam installed too, so that a Beam flag makes the job say what to
    install rather than call it unknown). When the table is not of the installed Beam, a
    flag that is neither Beam's by those nor close to a known flag is asked of Beam
    itself, imported, as :func:`_check_rest` does on Beam; the flags Beam then gave are
    returned too (else None), so that it is asked once."""
    flags = list(dict.fromkeys(token.split("=", 1)[0] for token in rest
                               if token.startswith("--")))
    if not flags:  # ldpflow's flags alone (the common case): nothing to read
        return [], None
    from ldpflow.pipelines import beam_flags

    known = beam_flags.FLAGS | _beam_flags_from_source()
    found = [flag for flag in flags if flag in known]
    imported = None
    if _beam_flags_stored() is None and _installed_beam_version() is not None:
        ours = [f"--{flag}" for flag in command.flags()]
        ask = [flag for flag in flags if flag not in known and not (
            _closest(flag, ours, 0.75) or _closest(flag, sorted(known), 0.75))]
        if ask:
            imported = _beam_flags_imported(_beam_plugins(rest))
            found += [flag for flag in ask if flag in imported]
    return found, imported


def _elsewhere(path: Any) -> bool:
    """Whether ``path`` is on another file system than this machine's (``gs://``, ...)."""
    if not isinstance(path, str) or "://" not in path:
        return False
    from ldpflow.wire.outputs import is_local  # the one definition (it imports the wire)

    return not is_local(path)


def choose_engine(args: argparse.Namespace, beam_flags: Sequence[str],
                  parser: argparse.ArgumentParser | None = None) -> tuple[str, str]:
    """The engine a batch job runs on, and why (one clause, for the log line).

    An ``--engine`` other than auto is the engine. Under auto (the default), in this order:
    any of Beam's flags in ``beam_flags`` (a runner, a pipeline option: only Beam reads
    them) chooses beam; a flag of one job-plan engine (``--dask_scheduler``, ``--workers``:
    dask; ``--spark_master``: spark) chooses that engine; a path (``--input``, ``--output``,
    ``--truth``, ``--value_labels``) on another file system chooses beam (the job plan
    writes local paths only, and a Beam job reads and writes them through Beam's file
    systems, as before auto); otherwise local, the job plan in this process (no Beam
    imported; the same outputs as Beam's, byte for byte, but the run block's ``runner``).

    Raises
    ------
    SystemExit
        A usage error (through ``parser``) when the flags name two engines.
    """
    engine = args.engine
    if engine != "auto":
        return engine, f"--engine {engine}"
    plan = {}
    for name, owner in _PLAN_ENGINE_FLAGS.items():
        if getattr(args, name, None) is not None:
            plan.setdefault(owner, f"--{name}")
    named = ([f"beam ({beam_flags[0]})"] if beam_flags else []) + [
        f"{owner} ({flag})" for owner, flag in plan.items()]
    if len(named) > 1:
        message = (f"the flags name two engines, {' and '.join(named)}: choose one with "
                   "--engine")
        if parser is None:
            raise ValueError(message)
        parser.error(message)
    if beam_flags:
        if len(beam_flags) == 1:
            return "beam", f"--engine auto: {beam_flags[0]} is an Apache Beam flag"
        shown = ", ".join(beam_flags[:3]) + (", ..." if len(beam_flags) > 3 else "")
        return "beam", f"--engine auto: {shown} are Apache Beam flags"
    if plan:
        owner, flag = next(iter(plan.items()))
        return owner, f"--engine auto: {flag} is {owner}'s flag"
    for name in _PATH_FLAGS:
        path = getattr(args, name, None)
        if _elsewhere(path):
            return "beam", (f"--engine auto: --{name} {path} is on another file system "
                            "(Beam's file systems)")
    return "local", ("--engine auto: no Beam flag, runner or remote path given; the job "
                     "plan in this process")


def _check_rest(command: Command, args: argparse.Namespace, rest: list[str],
                parser: argparse.ArgumentParser,
                imported: frozenset[str] | None = None) -> list[str]:
    """The tokens that are not ldpflow's: Beam's flags (and their values) on a Beam run;
    anything else is a usage error.

    Beam's flags are the stored table's (:func:`_beam_flags_stored`) when it is of the
    installed Beam and no Beam plugin is named; otherwise those of Beam's source, and for a
    flag that is neither close to one of ldpflow's nor Beam's, Beam (and the plugins) are
    imported and asked (``imported``: what ``--engine auto`` got from asking already)."""
    ours = [f"--{flag}" for flag in command.flags()]
    on_beam = command.on_beam(args)
    plugins = _beam_plugins(rest) if on_beam else []
    stored = None if plugins else _beam_flags_stored()
    beams = stored if stored is not None else _beam_flags_from_source()
    after_flag = False
    for token in rest:
        if not token.startswith("-") or token == "-":
            if on_beam and after_flag:  # the value of the Beam flag before it
                after_flag = False
                continue
            parser.error(f"unexpected argument {token!r} (flags are --name=value)")
        flag = token.split("=", 1)[0]
        after_flag = "=" not in token
        if flag in beams:
            if on_beam:
                continue
            if command.beam:
                parser.error(f"{flag} is an Apache Beam flag: it applies with --engine beam "
                             f"(or auto) only, not --engine {args.engine}")
        close = _closest(flag, ours, 0.75) or (
            _closest(flag, sorted(beams), 0.75) if command.beam else None)
        # Ask Beam (and its plugins), unless --engine auto asked already.
        if close is None and stored is None and (on_beam or imported is not None):
            if imported is None:
                imported = _beam_flags_imported(plugins)
            if flag in imported:
                continue
            close = _closest(flag, sorted(imported), 0.75)
        close = close or _closest(flag, ours, 0.6)
        parser.error(f"unrecognized flag {flag}" + (f"; did you mean {close}?" if close else ""))
    return list(rest) if on_beam else []
