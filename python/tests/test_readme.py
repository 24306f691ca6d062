"""The README's Python example runs as written (with its store directory moved to tmp)."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs(tmp_path, capsys):
    if not README.is_file():
        pytest.skip("README.md is not beside this test tree")
    text = README.read_text()
    section = text[text.index("## Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "/tmp/rangekv-example" in code
    code = code.replace("/tmp/rangekv-example", str(tmp_path / "store"))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert "RestoreOutcome(ok=True" in capsys.readouterr().out
