"""The verdict of a batch job (``estimate``, ``heavy-hitters``): one rule, one line.

A finished run fails (exit status 1, the outputs written anyway) when no valid report was
counted, or when more than ``--max_dead_letter_fraction`` of its input was refused. The
refused share is

    ``(dead + lost) / (records + lost)``

where ``records`` are the records read, ``dead`` the refused ones among them, and
``lost`` the records-equivalent of the parts of files lost whole, whose record counts are
unknown (a file whose Parquet footer or Avro header cannot be read, an Avro block of no
plausible count, the tail of a truncated compressed file): their bytes at the average size
of a record of the rest of the input, ``lost_bytes * records / (input_bytes -
lost_bytes)``, and 1 for each part of unknown size. A run that read no record but lost
parts refused all of its input. The counts come from the run's Beam counters
(``records``, ``dead_letters``, ``lost_parts``, ``lost_bytes``, ``lost_unsized`` and one
``reason: ...`` counter per kind of reason, :class:`~ldpflow.transforms.estimate.
CountDeadLettersFn`); the line names the most frequent reasons.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["dead_letter_counts", "input_bytes", "verdict", "TOP_REASONS"]

#: How many dead-letter reasons the verdict line names.
TOP_REASONS = 3
_REASON = "reason: "


def dead_letter_counts(counters: Mapping[str, int]) -> dict[str, Any]:
    """What a job's summary needs of its run's counters to be judged: ``dead_letters``,
    ``lost_parts``, ``lost_bytes``, ``lost_unsized`` and ``reasons`` (``{reason class:
    records}``, largest first). Counters that were never incremented are 0."""
    reasons = {name[len(_REASON):]: int(value) for name, value in counters.items()
               if name.startswith(_REASON) and value}
    return {"dead_letters": int(counters.get("dead_letters", 0)),
            "lost_parts": int(counters.get("lost_parts", 0)),
            "lost_bytes": int(counters.get("lost_bytes", 0)),
            "lost_unsized": int(counters.get("lost_unsized", 0)),
            "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))}


def input_bytes(pattern: str) -> int | None:
    """The bytes of the files ``pattern`` matches (None if they cannot be listed): a local
    pattern without Beam (the plan's engines never import it), a remote one by Beam's file
    systems."""
    if "://" not in pattern or pattern.startswith("file://"):
        from ldpflow.plan.files import match

        try:
            return sum(size for _, size in match(pattern))
        except (OSError, ValueError):
            return None
    from apache_beam.io.filesystems import FileSystems

    try:
        return sum(m.size_in_bytes for m in FileSystems.match([pattern])[0].metadata_list)
    except (OSError, ValueError):
        return None


def _lost_records(summary: Mapping[str, Any]) -> float:
    """The records-equivalent of the parts lost whole (see the module's rule)."""
    records, lost_bytes = summary["records"], summary.get("lost_bytes", 0)
    total = summary.get("input_bytes")
    sized = 0.0
    if lost_bytes:
        if total is not None and total > lost_bytes and records:
            sized = lost_bytes * records / (total - lost_bytes)
        else:  # nothing else to compare with: at least one record a part
            sized = summary.get("lost_parts", 0) - summary.get("lost_unsized", 0)
    return sized + summary.get("lost_unsized", 0)


def verdict(summary: Mapping[str, Any], max_dead_letter_fraction: float) -> str | None:
    """Why a finished run failed (None: it did not, or its counts are unknown), in one line
    with its counts and top dead-letter reasons.

    ``summary``: ``records``, ``estimated`` (the reports counted; ``reports_estimated`` is
    read too), ``dead_letters`` and optionally ``duplicates``, ``capped``, ``lost_parts``,
    ``lost_bytes``, ``lost_unsized``, ``input_bytes`` and ``reasons``
    (:func:`dead_letter_counts`).
    """
    if summary.get("submitted") or "records" not in summary:
        return None
    records = summary["records"]
    estimated = summary.get("estimated", summary.get("reports_estimated", 0))
    dead = summary.get("dead_letters", 0)
    parts = summary.get("lost_parts", 0)
    capped = f"{summary['capped']} capped, " if summary.get("capped") else ""
    lost = ""
    if parts:
        size = summary.get("lost_bytes", 0)
        lost = (f", {parts} part{'s' if parts != 1 else ''} of files lost whole "
                f"({size} bytes, records unknown)")
    line = (f"{records} records: {estimated} estimated, {summary.get('duplicates', 0)} "
            f"duplicates, {capped}{dead} dead letters{lost}")
    reasons = summary.get("reasons") or {}
    if reasons:
        top = list(reasons.items())[:TOP_REASONS]
        more = len(reasons) - len(top)
        line += "; top reasons: " + "; ".join(f"{reason} ({count})" for reason, count in top)
        if more > 0:
            line += f"; {more} more (see dead_letters/)"
    if estimated == 0:
        return f"no valid report was estimated ({line})"
    equivalent = _lost_records(summary) if parts else 0.0
    total = records + equivalent
    share = (dead + equivalent) / total if total else 0.0
    if share > max_dead_letter_fraction:
        return (f"{share:.1%} of the records were refused, more than "
                f"--max_dead_letter_fraction {max_dead_letter_fraction} ({line})")
    return None
