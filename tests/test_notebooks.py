"""The notebooks (jupytext percent-format scripts) run at small sizes; each asserts its own
key numbers and writes its figure."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.py"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook_runs(notebook, tmp_path):
    env = dict(os.environ, UKJAX_FAST="1", UKJAX_FIGURES=str(tmp_path), MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, str(notebook)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figure = tmp_path / f"{notebook.stem}.png"
    assert figure.stat().st_size > 10_000
