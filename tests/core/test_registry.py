"""The protocol registry: each class declares its facts, everything else derives from them."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import ldpflow
from ldpflow.core import audit, poisoning, randomness, registry
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import HEAVY_HITTERS, ProtocolKey
from ldpflow.core.oracles import ORACLES
from ldpflow.core.oracles import registry as oracle_registry
from ldpflow.core.oracles.base import FrequencyOracle, IndexReports, Reports
from ldpflow.wire.envelope import PARAMETER_FIELDS, nested_parameter_fields
from tests.core import reference
from tests.wire_support import parse_records, reports_to_records

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_protocol_is_registered_once_in_its_family():
    assert set(registry.names(registry.FREQUENCY_ORACLE)) == set(reference.ORACLE_KEYS)
    assert set(registry.names(registry.HEAVY_HITTER)) == set(reference.HEAVY_HITTER_KEYS)
    assert set(registry.names(registry.LONGITUDINAL)) == set(reference.LONGITUDINAL_KEYS)
    assert len(registry.names()) == len(set(registry.names())) == len(reference.ALL_KEYS)
    assert list(ORACLES) == list(registry.names(registry.FREQUENCY_ORACLE))
    assert list(HEAVY_HITTERS) == list(hh.PROTOCOLS) == list(registry.names(registry.HEAVY_HITTER))
    for name in registry.names():
        assert registry.lookup(name).name == name
    assert "pem" in HEAVY_HITTERS and "olh" not in HEAVY_HITTERS and 3 not in HEAVY_HITTERS


def test_lookup_names_the_known_protocols_of_the_family():
    with pytest.raises(ValueError, match="protocol must be one of pem spm mcm sfp treehist, "
                                         "got 'olh'"):
        registry.lookup("olh", registry.HEAVY_HITTER)
    with pytest.raises(TypeError, match="oracle name must be a string, got int"):
        registry.lookup(3, registry.FREQUENCY_ORACLE)
    assert registry.family_of("nope") is None and not registry.is_heavy_hitter(None)


def test_the_heavy_hitter_flags_are_the_protocols_shape_parameters():
    flags = registry.protocol_flags(registry.HEAVY_HITTER)
    assert [(f.name, f.protocols) for f in flags] == [
        ("query_limit", ("pem", "spm", "mcm", "sfp")), ("start_bits", ("pem",)),
        ("step_bits", ("pem", "treehist")), ("num_groups", ("pem",)),
        ("hash_range", ("pem", "treehist")), ("num_segments", ("spm",)),
        ("segment_top", ("spm",)), ("num_channels", ("mcm",)), ("channel_seed", ("mcm",)),
        ("fragment_bits", ("sfp",)), ("hash_bits", ("sfp",)), ("hash_seed", ("sfp",))]
    assert {f.name for f in flags} == hh.SHAPE_FLAGS
    assert all(f.type is int and f.default is None for f in flags)
    step = next(f for f in flags if f.name == "step_bits")  # two protocols, two meanings
    assert step.text == ("pem, treehist: pem: eta (default the largest with k * 2**eta <= Q); "
                         "treehist: bits per level (default 8).")
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.help = "x"  # type: ignore[misc]


def test_the_oracle_flags_group_the_protocols_that_say_the_same():
    hash_range, num_hashes = registry.protocol_flags(registry.FREQUENCY_ORACLE)
    assert hash_range.protocols == ("olh", "blh", "cms", "hcms")
    assert hash_range.help.endswith("; cms, hcms: the buckets of each hash (default 1024).")
    assert hash_range.help.startswith("olh: g, the buckets")
    assert num_hashes.text == "cms, hcms: the hash functions a client picks one of (default 256)."
    assert [f.name for f in registry.protocol_flags()] == [  # all families, first use first
        "hash_range", "num_hashes", "query_limit", "start_bits", "step_bits", "num_groups",
        "num_segments", "segment_top", "num_channels", "channel_seed", "fragment_bits",
        "hash_bits", "hash_seed"]


def test_the_wire_facts_come_from_the_fields():
    assert registry.wire_required("cms") == ("epsilon", "domain_size", "num_hashes")
    assert registry.wire_required("olh") == ("epsilon", "domain_size")
    assert registry.absent_value("pem", "group_hash") == hh.GROUP_HASH_BLAKE2B
    assert registry.absent_value("pem", "query_limit") is None
    assert [n for n in ORACLES if registry.takes(n, "hash_range")] == ["olh", "blh", "cms",
                                                                        "hcms"]
    assert [n for n in HEAVY_HITTERS if not registry.takes(n, "hash_range")] == [
        "spm", "mcm", "sfp"]  # these derive it from epsilon
    assert PARAMETER_FIELDS == ("oracle", "epsilon", "domain_size", "hash_range", "num_hashes")
    assert nested_parameter_fields("olh") == ()


def test_poisoning_and_audit_read_the_classes_declarations():
    assert set(poisoning.SUPPORTED) == {"grr", "oue", "sue", "ss", "olh", "blh"}
    assert poisoning.HEAVY_HITTER_SUPPORTED == ("pem",)
    assert set(audit.AUDITED_ORACLES) == set(ORACLES)
    for name in ORACLES:
        cls = ORACLES[name]
        assert (name in poisoning.SUPPORTED) == (cls.poisoning_family is not None)


# -- structure: no import cycle, no import inside a function -----------------------------------
_PROTOCOL_MODULES = ("ldpflow.core.keys", "ldpflow.core.registry", "ldpflow.core.oracles",
                     "ldpflow.core.heavy_hitters", "ldpflow.core.longitudinal")


def _function_local_imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.startswith(_PROTOCOL_MODULES) for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} in {function.name}")
    return found


def test_no_module_of_core_or_wire_imports_a_protocol_inside_a_function():
    files = [*sorted((ROOT / "ldpflow" / "core").rglob("*.py")),
             *sorted((ROOT / "ldpflow" / "wire").rglob("*.py")),
             ROOT / "ldpflow" / "pipelines" / "audit.py",
             ROOT / "ldpflow" / "pipelines" / "common.py"]
    assert [hit for path in files for hit in _function_local_imports(path)] == []


@pytest.mark.parametrize("module", ["ldpflow.core.keys", "ldpflow.core.registry",
                                    "ldpflow.core.oracles.registry", "ldpflow.core.heavy_hitters",
                                    "ldpflow.core.longitudinal", "ldpflow.core.poisoning",
                                    "ldpflow.wire.envelope"])
def test_each_module_imported_first_sees_the_whole_registry(module):
    code = (f"import {module}\n"
            "from ldpflow.core import registry\n"
            "from ldpflow.core.keys import ProtocolKey\n"
            f"assert len(registry.names()) == {len(reference.ALL_KEYS)}, registry.names()\n"
            "key = ProtocolKey('pem', {'top_k': 4, 'value_bits': 8, 'epsilon': 1.0,"
            " 'codec': 'int'})\n"
            "assert key.protocol.name == 'pem'\n"
            "assert ProtocolKey('olh', {'epsilon': 1.0, 'domain_size': 8}).protocol.p > 0\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


# -- the worked example of docs/architecture.md: a new oracle is its class ----------------------
@pytest.fixture
def fallback_rr():
    """A throw-away oracle, defined here: randomized response that keeps the value with
    probability ``(e - 1) / (e + d - 1)`` and otherwise reports a uniform value of all ``d``
    (so ``P[y = v] = e / (e + d - 1)``, ``P[y = w] = 1 / (e + d - 1)``: epsilon-LDP). Defining
    the class registers it; the fixture takes it out again."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FallbackRandomizedResponse(IndexReports, FrequencyOracle):
        name = "fallback-rr"
        epsilon: float
        domain_size: int

        @property
        def q(self) -> float:  # keep * 0 + (1 - keep) / d
            return 1.0 / (self.e + self.domain_size - 1)

        p = property(lambda self: self.e * self.q)  # keep + (1 - keep) / d
        report_bits = property(lambda self: max(1, (self.domain_size - 1).bit_length()))
        index_range = property(lambda self: self.domain_size)

        def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
            keep = source.bernoulli((self.e - 1) / (self.e + self.domain_size - 1), values.size)
            uniform = source.below(self.domain_size, values.size)
            return Reports(self.name, {"value": np.where(keep, values, uniform)})

    try:
        yield FallbackRandomizedResponse
    finally:
        registry._TABLE.pop("fallback-rr", None)


def test_a_new_oracle_is_built_keyed_parsed_and_estimated_with_no_other_change(fallback_rr):
    assert "fallback-rr" in ORACLES and "fallback-rr" in registry.names(registry.FREQUENCY_ORACLE)
    oracle = ldpflow.oracle("fallback-rr", epsilon=1.0, domain_size=8)
    assert isinstance(oracle, fallback_rr)
    assert ProtocolKey.from_json(oracle.key.to_json()).protocol == oracle
    rng = np.random.default_rng(7)
    n = 4000
    values = np.repeat(np.arange(8), n // 8)
    reports = oracle.perturb(values, rng=rng)
    records = reports_to_records(oracle, reports, [f"r{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)], np.arange(n))
    batches, dead = parse_records(records)
    assert dead == [] and list(batches) == [oracle.key]
    acc = oracle.aggregate(batches[oracle.key].reports)
    assert acc == oracle.aggregate(reports)
    estimate = oracle.estimate(acc).frequencies
    sigma = np.sqrt(oracle.variance(n, 1 / 8))  # each value's true frequency is 1/8
    assert np.all(np.abs(estimate - 1 / 8) < 4 * sigma)
    # Facts it does not declare: no poisoning defence, no audit cell map.
    assert not poisoning.supports(oracle)
    with pytest.raises(ValueError, match="oracle must be one of"):
        audit.cell_map(oracle, 0, 1)


def test_a_name_is_taken_once(fallback_rr):
    with pytest.raises(TypeError, match="protocol name 'grr' is taken"):
        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Impostor(fallback_rr):
            name = "grr"
    assert ORACLES["grr"].__name__ == "DirectEncoding"


def test_a_key_builds_its_protocol_once_and_every_way_to_it_is_that_object():
    olh = ldpflow.oracle("olh", epsilon=1.5, domain_size=64)
    key = ProtocolKey(olh.name, olh.parameters)
    built = key.protocol
    assert built == olh and built is key.protocol  # cached per key
    assert ProtocolKey.coerce(tuple(key)).protocol is built  # a plain key tuple too
    assert key.build() is built
    assert ORACLES["olh"] is type(built)
    assert oracle_registry.from_key(tuple(key)) is built
    pem = hh.make("pem", top_k=4, value_bits=16, epsilon=2.0)
    hh_key = ProtocolKey.heavy_hitters(pem, "utf8")
    assert hh_key.protocol == pem and "codec" not in hh_key.protocol.parameters
    assert type(pem).from_key(hh_key) is hh_key.protocol
    with pytest.raises(ValueError, match="frequency|oracle"):
        oracle_registry.from_key(hh_key)
