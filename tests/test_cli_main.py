"""The ``spec-o3`` command frame: help, version, typed errors, and output piped into a closed reader."""

from __future__ import annotations

import subprocess
import sys

from speco3.cli import main


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_unreadable_file_is_named_without_traceback(tmp_path, capsys):
    bad = tmp_path / "not-a-spectrum.fits"
    bad.write_bytes(b"SIMPLE  =  garbage" + b"\0" * 100)
    assert main(["info", str(bad)]) != 0
    cap = capsys.readouterr()
    text = cap.out + cap.err
    assert "not-a-spectrum.fits" in text and "corrupt FITS" in text and "Traceback" not in text


def test_closed_pipe_is_quiet(spectra_dir):
    f = spectra_dir / "desi" / "coadd-5-169-thru20210419.fits"
    code = (
        "import sys; from speco3.cli import main; sys.exit(main(['info', '--json', sys.argv[1]]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.read(10)
    proc.stdout.close()  # the reader goes away, like `| head -c 10`
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err
