"""The four report formats; the JSON validates against Stryker's mutation-testing-report-schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mutations.model import Kind, Mutation, Result, Verdict
from mutations.reports import write_all

SCHEMA_PKG = "mutation-testing-report-schema@3.8.4"
SCHEMA_MEMBER = "package/dist/src/mutation-testing-report-schema.json"
CACHE = Path(__file__).parents[2] / ".vt-cache" / "stryker"


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):  # CI must validate, never skip
        pytest.fail(why)
    pytest.skip(why)


def stryker_schema() -> dict:
    """The published schema, fetched from the npm registry once into .vt-cache/."""
    target = CACHE / "mutation-testing-report-schema.json"
    if not target.exists():
        if shutil.which("npm") is None:
            _unavailable("no npm on this machine to fetch Stryker's schema")
        CACHE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["npm", "pack", SCHEMA_PKG, "--silent"], cwd=CACHE, capture_output=True, text=True)
        if proc.returncode != 0:
            _unavailable(f"npm pack {SCHEMA_PKG} failed: {proc.stderr[-300:]}")
        with tarfile.open(CACHE / proc.stdout.strip().splitlines()[-1]) as tar:
            member = tar.extractfile(SCHEMA_MEMBER)
            assert member is not None
            target.write_bytes(member.read())
    return json.loads(target.read_text())


def _results(tmp: Path) -> list[Result]:
    """One result per verdict, over a small source file."""
    (tmp / "pkg").mkdir()
    (tmp / "pkg/mod.py").write_text("def f(x):\n    return x + 1\n")
    gates = ("tests/test_mod.py::test_f",)
    out = []
    for v, kind in zip(Verdict, [Kind.SOURCE, Kind.TEST_SETUP] * 3):
        m = Mutation(id=f"m-{v.value}", description=f"<m-{v.value}> & co", file="pkg/mod.py",
                     old="x + 1", new="x - 1", gates=gates, kind=kind)
        killed_by = list(gates) if v is Verdict.KILLED else []
        out.append(Result(m, v, 1.5, f"reason | {v.value}", killed_by, [], "--- a\n+++ b\n-x + 1\n+x - 1\n"))
    return out


def test_all_four_reports_are_written_and_the_json_validates(tmp_path: Path) -> None:
    import jsonschema

    results = _results(tmp_path)
    paths = write_all(results, tmp_path, tmp_path / "out")
    names = {p.name for p in paths}
    assert names == {"mutations.md", "mutation-report.json", "mutation-report.html", "mutations-junit.xml"}

    report = json.loads((tmp_path / "out/mutation-report.json").read_text())
    jsonschema.Draft7Validator(stryker_schema()).validate(report)
    mutants = report["files"]["pkg/mod.py"]["mutants"]
    assert len(mutants) == len(Verdict) and all(m["expectedGate"] == ["tests/test_mod.py::test_f"] for m in mutants)
    assert mutants[0]["location"]["start"] == {"line": 2, "column": 12}

    md = (tmp_path / "out/mutations.md").read_text()
    assert "| id | description | gate | verdict | failing assertion | seconds |" in md
    assert "reason \\| Killed" in md, "pipes inside cells are escaped"

    page = (tmp_path / "out/mutation-report.html").read_text()
    assert "&lt;m-Killed&gt; &amp; co" in page and "<m-Killed>" not in page and "+x - 1" in page
    assert "<script src" not in page and "<link" not in page, "self-contained"

    suite = ET.parse(tmp_path / "out/mutations-junit.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == len(Verdict)
    assert sum(c.find("failure") is not None for c in cases) == len(Verdict) - 1


def test_schema_rejects_a_bad_status(tmp_path: Path) -> None:
    """Non-vacuity: the validator really checks (a status outside Stryker's enum is refused)."""
    import jsonschema

    paths = write_all(_results(tmp_path), tmp_path, tmp_path / "out")
    report = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    report["files"]["pkg/mod.py"]["mutants"][0]["status"] = "Overreach"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(stryker_schema()).validate(report)


def test_registry_entries_are_well_formed() -> None:
    from mutations.registry import ENTRIES

    ids = [m.id for m in ENTRIES]
    assert len(ids) == len(set(ids)), "mutation ids are unique"
    root = Path(__file__).parents[2]
    for m in ENTRIES:
        text = (root / m.file).read_text()
        assert text.count(m.old) == m.count, f"{m.id}: anchor matches {text.count(m.old)} places"
        for f in m.gate_files:
            assert (root / f).is_file(), f"{m.id}: gate file {f} missing"
    assert os.path.exists(root / "mutations" / "registry.py")
