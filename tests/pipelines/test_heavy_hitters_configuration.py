"""``ldpflow heavy-hitters`` takes the configuration its reports carry: the flags that
``ldpflow simulate`` was given check it and never re-derive it (the automatic PEM
configuration depends on the number of clients, which the server cannot know)."""

from __future__ import annotations

import json

import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines import cli, heavy_hitters, simulate
from ldpflow.pipelines.common import job_options
from ldpflow.pipelines.usage import JobFailed

K, BITS = 16, 32


def _simulate(out, name, users=20_000, extra=()):
    return simulate.run(["--oracle", name, "--k", str(K), "--bits", str(BITS), "--epsilon",
                         "4", "--domain_size", "300", "--users", str(users), "--seed", "3",
                         "--output", str(out), "--shards", "2", *extra])


def _resolve(tmp_path, name, flags):
    _, opts = job_options("heavy-hitters", [f"--input={tmp_path}/r/*.avro",
                                            f"--output={tmp_path}/hh", "--protocol", name,
                                            *flags])
    found = heavy_hitters.configuration_of_input(opts.input, None, name)
    return heavy_hitters.configure(opts, found)


@pytest.mark.parametrize("name", sorted(hh.PROTOCOLS))
def test_the_same_flags_on_both_sides_give_the_reports_configuration(tmp_path, name):
    truth = _simulate(tmp_path / "r", name)
    protocol, expect = _resolve(tmp_path, name, ["--k", str(K), "--bits", str(BITS)])
    assert protocol.parameters == truth["parameters"]
    assert all(expect[p] == v for p, v in truth["parameters"].items()
               if p not in ("epsilon", "hash_range"))


def test_pem_flags_alone_would_have_derived_another_configuration(tmp_path):
    """Why the flags must not configure the server: the clients' automatic configuration
    for their number differs from the protocol's defaults for the same --k and --bits."""
    truth = _simulate(tmp_path / "r", "pem", users=100_000)
    defaults = hh.make("pem", top_k=K, value_bits=BITS, epsilon=4.0).parameters
    assert defaults["start_bits"] != truth["parameters"]["start_bits"]
    protocol, _ = _resolve(tmp_path, "pem", ["--k", str(K), "--bits", str(BITS)])
    assert protocol.parameters == truth["parameters"]


@pytest.mark.parametrize("flags,names", [
    (["--k", str(K), "--bits", "64"], ("--bits 64", "value_bits 32")),
    (["--k", "8", "--bits", str(BITS)], ("--k 8", "top_k 16")),
    (["--k", str(K), "--bits", str(BITS), "--start_bits", "1"], ("--start_bits 1",)),
])
def test_a_stated_parameter_that_differs_is_one_line_exit_1(tmp_path, capsys, flags, names):
    truth = _simulate(tmp_path / "r", "pem")
    with pytest.raises(JobFailed) as failed:
        _resolve(tmp_path, "pem", flags)
    assert all(name in str(failed.value) for name in names)
    assert f"--start_bits {truth['parameters']['start_bits']}" in str(failed.value)
    status = cli.main(["heavy-hitters", "--engine=beam", f"--input={tmp_path}/r/*.avro",
                       f"--output={tmp_path}/hh", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert err[-1].startswith("ldpflow heavy-hitters: ") and all(n in err[-1] for n in names)
    assert not (tmp_path / "hh").exists()  # refused before any pipeline ran


@pytest.mark.pipeline
def test_simulate_then_heavy_hitters_with_the_same_flags_finds_the_heavy_hitters(tmp_path):
    _simulate(tmp_path / "r", "pem", users=100_000)
    docs = []
    for name, flags in (("flags", ["--k", str(K), "--bits", str(BITS)]), ("input", [])):
        summary = heavy_hitters.run(["--engine=beam", f"--input={tmp_path}/r/*.avro",
                                     f"--output={tmp_path}/{name}", *flags])
        assert summary["dead_letters"] == 0 and summary["reports"] == 100_000
        with open(tmp_path / name / "heavy_hitters.json") as f:
            docs.append(json.load(f))
    assert len(docs[0]["top_k"]) == K
    assert docs[0]["top_k"] == docs[1]["top_k"] and docs[0]["passes"] == docs[1]["passes"]


@pytest.mark.pipeline
def test_fewer_heavy_hitters_than_asked_are_a_warning_that_says_why(tmp_path, caplog):
    simulate.run(["--oracle", "mcm", "--k", "32", "--bits", "16", "--epsilon", "2",
                  "--domain_size", "5000", "--distribution", "uniform", "--users", "4000",
                  "--seed", "5", "--output", str(tmp_path / "r"), "--shards", "1"])
    heavy_hitters.run(["--engine=beam", f"--input={tmp_path}/r/*.avro", f"--output={tmp_path}/hh",
                       "--protocol", "mcm"])
    with open(tmp_path / "hh" / "heavy_hitters.json") as f:
        doc = json.load(f)
    found = len(doc["top_k"])
    assert found < 32
    line = doc["results"][0]["shortfall"]
    assert line.startswith(f"found {found} of the 32 heavy hitters asked for: pass ")
    assert doc["warnings"] == [line] and line in caplog.text
