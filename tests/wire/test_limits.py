"""One report must never crash the read: a parameter set whose memory the policy does not
allow, or an epsilon whose probabilities are not representable, is a dead letter with its
reason, decided before anything is allocated; every oracle kind of the registry."""

from __future__ import annotations

import io
import math
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ldpflow
from ldpflow.core import validation
from ldpflow.wire import formats
from ldpflow.wire.parse import AcceptancePolicy, key_bytes

N = 50


def _table(name: str, n: int = N, seed: int = 3, domain_size: int = 16) -> pa.Table:
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=domain_size)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, domain_size, n), rng=rng)
    return formats.reports_table(oracle, reports, formats.numbered_ids("r-", 0, n),
                                 formats.numbered_ids("u-", 0, n), np.arange(n))


def _with_last(table: pa.Table, **fields) -> pa.Table:
    """``table`` whose last row claims other parameters (the others unchanged)."""
    for name, value in fields.items():
        column = table.column(name).to_pylist()
        column[-1] = value
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.array(column, type=table.schema.field(name).type))
    return table


def _read(data: bytes, fmt: str, policy: AcceptancePolicy | None = None):
    chunks = list(formats.read_reports(io.BytesIO(data), fmt, policy=policy))
    return (sum(p.records for p in chunks), sum(p.reports for p in chunks),
            [(d.reason, d.count) for p in chunks for d in p.dead_letters])


def _encode(table: pa.Table, fmt: str) -> bytes:
    if fmt == "json":
        return formats.json_lines(table)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
@pytest.mark.parametrize("size", [2**24, 10**7])
def test_one_report_claiming_a_huge_domain_is_a_dead_letter_not_an_allocation(name, size):
    data = _encode(_with_last(_table(name), domain_size=size), "json")
    tracemalloc.start()
    try:
        records, reports, dead = _read(data, "json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (records, reports) == (N, N - 1)
    ((reason, count),) = dead
    assert count == 1
    assert reason.startswith(f"policy: oracle {name} with domain_size {size} needs about ")
    assert reason.endswith("(--max_key_bytes)")
    assert peak < 32 << 20  # nothing of the size the report claims was allocated


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
def test_every_parameter_set_the_policy_accepts_fits_its_byte_budget(name):
    policy = AcceptancePolicy(max_key_bytes=64 << 20)
    data = formats.json_lines(_table(name, domain_size=1024))
    records, reports, dead = _read(data, "json", policy)
    assert (records, reports, dead) == (N, N, [])  # 1024 values: well within 64 MiB
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=1024)
    need = key_bytes(oracle)
    assert need >= 8 * oracle.create_accumulator().counts.size  # the accumulator at least
    assert key_bytes(ldpflow.oracle(name, epsilon=1.0, domain_size=2048)) > need
    records, reports, dead = _read(data, "json", AcceptancePolicy(max_key_bytes=need))
    assert (records, reports, dead) == (N, N, [])  # the bound is inclusive
    records, reports, dead = _read(data, "json", AcceptancePolicy(max_key_bytes=need - 1))
    assert (records, reports, sum(count for _, count in dead)) == (N, 0, N)
    assert {reason for reason, _ in dead} == {
        f"policy: oracle {name} with domain_size 1024 needs about {need / 2**20:,.1f} MiB "
        f"(accumulator and estimates), more than the {(need - 1) / 2**20:,.1f} MiB one "
        "parameter set may take (--max_key_bytes)"}


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
@pytest.mark.parametrize("fmt", ["json", "parquet"])
@pytest.mark.parametrize("epsilon", [1e-300, 5e-324, 1e-17])
def test_an_epsilon_whose_probabilities_are_not_representable_is_a_dead_letter(
        name, fmt, epsilon):
    records, reports, dead = _read(_encode(_with_last(_table(name), epsilon=epsilon), fmt), fmt)
    assert (records, reports) == (N, N - 1)
    ((reason, count),) = dead
    assert count == 1 and reason.startswith("invalid parameters: epsilon must be in [2**-36")


@pytest.mark.parametrize("epsilon", [1e-300, 5e-324, 1e-17, 2.0**-37, 701.0, 1e308])
def test_check_epsilon_refuses_epsilons_of_unrepresentable_probabilities(epsilon):
    with pytest.raises(ValueError, match=r"epsilon must be in \[2\*\*-36, 700\]"):
        validation.check_epsilon(epsilon)


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
@pytest.mark.parametrize("epsilon", [validation.MIN_EPSILON, 1.0, 20.0])
def test_every_epsilon_that_passes_gives_finite_valid_probabilities(name, epsilon):
    oracle = ldpflow.oracle(name, epsilon=epsilon, domain_size=1024)
    p, q = oracle.p, oracle.q
    if p is not None:
        assert 0 < q < p <= 1 and math.isfinite(p - q) and (p - q) > 0
        assert abs(p) >= np.finfo(float).tiny and abs(q) >= np.finfo(float).tiny
    variance = oracle.variance(max(1000, getattr(oracle, "users_needed", 1)))
    assert np.all(np.isfinite(variance)) and np.all(np.asarray(variance) > 0)
