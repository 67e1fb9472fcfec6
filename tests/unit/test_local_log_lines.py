"""The execution environments of one function append to one log file: each line must arrive
whole, even when processes ``print`` (text and newline are two writes) at the same time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from local_aws.bootstrap import WholeLines

WRITER = """
import json, os, sys
sys.path.insert(0, {root!r})
from local_aws.bootstrap import WholeLines
out = WholeLines(os.open({path!r}, os.O_WRONLY | os.O_APPEND))
for i in range(400):
    print(json.dumps({{"writer": {n}, "i": i, "pad": "x" * 300}}), file=out)  # two writes each
out.flush()
"""


def test_lines_of_concurrent_processes_never_interleave(tmp_path: Path) -> None:
    log = tmp_path / "mailstep-api.log"
    log.touch()
    root = str(Path(__file__).resolve().parents[2])
    writers = [
        subprocess.Popen([sys.executable, "-u", "-c", WRITER.format(root=root, path=str(log), n=n)])
        for n in range(4)
    ]
    assert [w.wait(timeout=60) for w in writers] == [0] * 4
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # a merged line would not parse
    assert sorted((r["writer"], r["i"]) for r in records) == [(n, i) for n in range(4) for i in range(400)]


def test_text_without_a_newline_waits_for_it_or_for_flush(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    out = WholeLines(fd)
    out.write("part one, ")
    assert path.read_text() == ""
    out.write("part two\nnext")
    assert path.read_text() == "part one, part two\n"
    out.flush()
    assert path.read_text() == "part one, part two\nnext"
    os.close(fd)
