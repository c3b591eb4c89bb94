"""The floors hold: import-linter's contract (pyproject's [tool.importlinter]) and the guards
beside it (.ci/guards.py: file sizes, imports inside functions, import circles). CI runs
both in .ci/run too; here they run under pytest, so a change that breaks them fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_module_imports_a_floor_above_its_own() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in proc.stdout


def test_the_floors_count_imports_for_type_checkers_too() -> None:
    # A name a module needs only in an annotation is an import all the same: a lower floor
    # names a small protocol of its own instead (docs/architecture.md).
    import tomllib

    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert linter["exclude_type_checking_imports"] is False
    assert "exclude_type_checking_imports=False" in (ROOT / ".ci" / "guards.py").read_text()


def test_no_file_is_too_long_no_lazy_import_keeps_nothing_out_and_no_import_circles() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / ".ci" / "guards.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("guards: ok")


def test_the_guards_find_what_they_guard_against(tmp_path: Path) -> None:
    # A copy of the package with one of each: a long file, an import inside a function of
    # a cheap module, a circle of imports (and one closed by a type-only import).
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "src", copy / "src")
    shutil.copytree(ROOT / ".ci", copy / ".ci")
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    pkg = copy / "src" / "tether"
    (pkg / "long.py").write_text("\"\"\"Long.\"\"\"\n" + "x = 1\n" * 801)
    (pkg / "lazy.py").write_text("def f():\n    import json\n\n    return json\n")
    (pkg / "ring_a.py").write_text("from tether import ring_b\n")
    (pkg / "ring_b.py").write_text("def f():\n    from tether import ring_a\n\n    return ring_a\n")
    # A circle closed by an import for type checkers alone counts too.
    (pkg / "ring_c.py").write_text("from tether import ring_d\n")
    (pkg / "ring_d.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                   "    from tether.ring_c import X\n")
    proc = subprocess.run([sys.executable, str(copy / ".ci" / "guards.py")], cwd=copy,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(copy / "src"), "PATH": ""})
    assert proc.returncode == 1
    out = proc.stdout
    assert "src/tether/long.py: 802 lines" in out
    assert "src/tether/lazy.py:2: `json` imported inside a function" in out
    assert "src/tether/ring_b.py:2: `tether.ring_a`" in out
    assert "import circle: tether.ring_a <-> tether.ring_b" in out
    assert "import circle: tether.ring_c <-> tether.ring_d" in out
