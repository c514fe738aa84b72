"""Input files: a regular file of bounded size in UTF-8, or one line saying why not, never a hang."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.inputfile import InputFileError, read_text
from tests.faults.support import exit_of


def test_a_fifo_a_device_and_a_directory_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a device"), (tmp_path, "a directory")):
        with pytest.raises(InputFileError, match=f"not a regular file \\({kind}\\)"):
            read_text(path)


def test_size_encoding_and_byte_order_mark(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"a" * 2049)
    with pytest.raises(InputFileError, match=r"too large \(2049 bytes; at most 2048\)"):
        read_text(big, 2048)
    binary = tmp_path / "binary"
    binary.write_bytes(b"ok\n\xff\xfe")
    with pytest.raises(InputFileError, match=r"not UTF-8 text \(byte 3"):
        read_text(binary)
    bom = tmp_path / "bom"
    bom.write_bytes(b"\xef\xbb\xbfkey: value\n")
    assert read_text(bom) == "key: value\n"
    with pytest.raises(InputFileError, match="cannot read: No such file"):
        read_text(tmp_path / "missing")


@pytest.mark.parametrize("flag", ["--config-file", "-f", "--web-config-file", "--simulate"])
def test_every_file_flag_refuses_a_fifo_and_dev_zero_with_one_line_and_exit_2(tmp_path: Path, flag: str) -> None:
    fifo = tmp_path / "input.yaml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        args = [flag, path] if flag == "--simulate" else ["--simulate", flag, path]
        code, output = exit_of(args)
        assert code == 2, output
        assert output.count("\n") == 1 and "not a regular file" in output and "Traceback" not in output


def test_dev_zero_as_a_certificate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: /dev/zero\n  key_file: /dev/zero\n")
    code, output = exit_of(["--simulate", "--web-config-file", str(tmp_path / "web.yml")])
    assert code == 2 and "cert_file: cannot read /dev/zero: not a regular file (a device)" in output
