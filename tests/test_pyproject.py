"""The project's pytest configuration in pyproject.toml: skip reasons are shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_skip_reasons_are_shown(tmp_path):
    t = tmp_path / "test_x.py"
    t.write_text("import pytest\n\n@pytest.mark.skip(reason='needs the moon')\ndef test_a():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"),
                          "--rootdir", str(tmp_path),
                          str(t), "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=tmp_path).stdout
    assert "SKIPPED [1]" in out and "needs the moon" in out

