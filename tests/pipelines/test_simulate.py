"""``ldpflow simulate``: every flag is checked before a file is opened; its help says each
default once."""

from __future__ import annotations

import errno
import io
import os

import pytest

from ldpflow.pipelines import cli, simulate

BASE = ["--users=50", "--shards=2"]

# One check of epsilon for every protocol (core validation), before anything is written.
_EPSILON = "epsilon must be in [2**-36, 700] (its probabilities must be representable as floats), "


@pytest.mark.parametrize("flags,message", [
    (["--oracle=oue", "--epsilon=1", "--domain_size=10000000000"],
     "--domain_size 10000000000 is more than --max_domain_size 16777216"),
    (["--oracle=grr", "--epsilon=1", "--domain_size=10000000000"],
     "--domain_size 10000000000 is more than --max_domain_size 16777216"),
    (["--oracle=grr", "--epsilon=1e6", "--domain_size=16"],
     _EPSILON + "got 1000000.0"),
    (["--oracle=olh", "--epsilon=800", "--domain_size=16"],
     _EPSILON + "got 800.0"),
    (["--oracle=grr", "--epsilon=5e-324", "--domain_size=16"],
     _EPSILON + "got 5e-324"),
    (["--oracle=oue", "--epsilon=1e-300", "--domain_size=16"],
     _EPSILON + "got 1e-300"),
    (["--oracle=hr", "--epsilon=1e5", "--domain_size=16"],
     _EPSILON + "got 100000.0"),
    (["--oracle=pem", "--bits=16", "--k=4", "--epsilon=1e6", "--domain_size=100"],
     _EPSILON + "got 1000000.0"),
    (["--oracle=spm", "--bits=16", "--k=4", "--epsilon=5e-324", "--domain_size=100"],
     _EPSILON + "got 5e-324"),
    (["--oracle=sfp", "--bits=16", "--k=4", "--epsilon=1e300", "--domain_size=100"],
     _EPSILON + "got 1e+300"),
    (["--oracle=mcm", "--bits=16", "--k=4", "--epsilon=1e-300", "--domain_size=100"],
     _EPSILON + "got 1e-300"),
    (["--oracle=pem", "--bits=16", "--k=4", "--epsilon=1", "--domain_size=100000000000"],
     "--domain_size 100000000000 is more than --max_domain_size"),
])
def test_an_unusable_configuration_is_one_line_exit_2_and_nothing_written(
        tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    status = cli.main(["simulate", *flags, *BASE, f"--output={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("ldpflow simulate: error: ") and message in err[0], err[0]
    assert not out.exists()


def test_a_bad_flag_is_one_line_not_argparse_usage(tmp_path, capsys):
    status = cli.main(["simulate", "--oracle=grr", "--epsilon=x", f"--output={tmp_path}/o"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err == ["ldpflow simulate: error: argument --epsilon: invalid "
                                   "float value: 'x' (see ldpflow simulate --help)"]


def test_max_domain_size_lets_a_larger_domain_through(tmp_path):
    truth = simulate.run(["--oracle=grr", "--epsilon=1", "--domain_size=40",
                          "--max_domain_size=40", *BASE, f"--output={tmp_path}/o"])
    assert len(truth["counts"]) == 40
    with pytest.raises(SystemExit, match="--domain_size 41 is more than --max_domain_size 40"):
        simulate.run(["--oracle=grr", "--epsilon=1", "--domain_size=41",
                      "--max_domain_size=40", *BASE, f"--output={tmp_path}/p"])


def test_a_failure_while_writing_removes_what_the_run_wrote(tmp_path, monkeypatch):
    from ldpflow.wire import formats

    real = formats.ReportWriter.write

    def full(self, table):
        if isinstance(self._stream, io.BytesIO):  # the dry run in memory
            return real(self, table)
        self._stream.write(b"Obj\x01" + b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(formats.ReportWriter, "write", full)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left"):
        simulate.run(["--oracle=grr", "--epsilon=1", "--domain_size=8", "--users=50",
                      "--shards=1", f"--output={out}"])
    assert list(out.iterdir()) == []


def test_help_tells_each_default_once_and_what_values_files_hold(capsys):
    with pytest.raises(SystemExit):
        simulate.run(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.rindex("--codec {int,string} ")  # its entry, after the usage line
    codec = text[start:text.index("--truncate ", start)]
    assert codec.count("(default") == 1 and "(default: int, or with --values_file" in codec
    start = text.rindex("--values_file VALUES_FILE ")
    values = text[start:text.index("--seed SEED", start)]
    assert "one integer per line" not in values
    assert "strings (see --codec)" in values and "[0, --domain_size)" in values
