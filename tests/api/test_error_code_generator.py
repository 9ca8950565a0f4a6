"""codec/error_codes.py must equal a fresh run of tools/gen_error_codes.py against Kafka's jars."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TGZ = REPO.parent / "shared" / "kafka" / "kafka_2.13-4.0.2.tgz"


@pytest.mark.skipif(not TGZ.is_file(), reason=f"the Apache Kafka distribution is not at {TGZ}")
@pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH to run the error-table dump")
def test_regeneration_matches_committed(tmp_path: Path) -> None:
    out = tmp_path / "error_codes.py"
    res = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_error_codes.py"), str(TGZ), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert out.read_text() == (REPO / "codec" / "error_codes.py").read_text(), "run tools/gen_error_codes.py"
