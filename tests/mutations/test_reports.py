"""The four report formats; the JSON validates against Stryker's mutation-testing-report-schema."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mutations.model import Kind, Mutation, Result, Verdict
from mutations.reports import write_all

SCHEMA = Path(__file__).parents[2] / "mutations" / "vendor" / "mutation-testing-report-schema.json"
CHROMIUM = Path("/usr/bin/chromium")


def stryker_schema() -> dict:
    """Stryker's published schema (mutation-testing-report-schema 3.8.4), vendored: no test needs a network."""
    return json.loads(SCHEMA.read_text())


def _results(tmp: Path) -> list[Result]:
    """One result per verdict, over a small source file."""
    (tmp / "pkg").mkdir()
    (tmp / "pkg/mod.py").write_text("def f(x):\n    return x + 1\n")
    gates = ("tests/test_mod.py::test_f",)
    out = []
    for v, kind in zip(Verdict, [Kind.SOURCE, Kind.TEST_SETUP] * len(Verdict)):
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

    test_ids = {t["id"] for f in report["testFiles"].values() for t in f["tests"]}
    assert mutants[0]["killedBy"] == ["tests/test_mod.py::test_f"] and set(mutants[0]["killedBy"]) <= test_ids
    assert report["files"]["pkg/mod.py"]["source"].startswith("def f(x):"), "the viewer shows the source"

    md = (tmp_path / "out/mutations.md").read_text()
    assert md.startswith(f"# Mutation report: 1/{len(Verdict)} killed (score {100 / len(Verdict):.1f}%)"), md[:80]
    assert "| lane | killed |" in md and "| cpu | 1/" in md and "| area | killed |" in md
    not_killed = md.split("## Not killed")[1].split("## Every mutant")[0]
    assert "m-Survived: Survived" in not_killed and "m-Killed" not in not_killed
    assert "| id | description | gate | verdict | failing assertion | seconds |" in md
    assert "reason \\| Killed" in md, "pipes inside cells are escaped"

    page = (tmp_path / "out/mutation-report.html").read_text()
    assert "mutation-test-report-app" in page and "m-Killed" in page
    assert page.count("</script>") == 2, "the inline JSON closes no script early"
    assert "<script src" not in page and "<link" not in page, "self-contained"

    suite = ET.parse(tmp_path / "out/mutations-junit.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == len(Verdict)
    assert sum(c.find("failure") is not None for c in cases) == len(Verdict) - 1


def _browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI installs Debian's chromium: the viewer test must run there")
        pytest.skip("no browser: /usr/bin/chromium is not installed (CI installs it)")
    from playwright.sync_api import sync_playwright

    return sync_playwright()


def test_the_html_report_renders_in_a_real_browser(tmp_path: Path) -> None:
    """Headless Chromium opens the report offline: the viewer renders the mutation score Stryker's rules
    give for these statuses, and the mutated file's source with its mutants."""
    results = _results(tmp_path)
    write_all(results, tmp_path, tmp_path / "out")
    statuses = [m["status"] for m in json.loads((tmp_path / "out/mutation-report.json").read_text())["files"][
        "pkg/mod.py"]["mutants"]]
    detected = sum(s in ("Killed", "Timeout") for s in statuses)
    score = f"{100 * detected / (detected + statuses.count('Survived')):.2f}"
    with _browser() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
        page = browser.new_page()
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else
                   route.abort())  # offline: anything but the file itself is refused
        url = (tmp_path / "out" / "mutation-report.html").as_uri()
        page.goto(url)
        # asserted at once: a page that shows no score shows no source either, and each look waits up to 10 s
        assert _shows(page, score), f"the viewer shows the mutation score {score}"
        page.goto(url + "#mutant/mod.py")  # the viewer's route to one file: its source, mutants inline
        assert _shows(page, "def f(x):"), "the viewer shows the mutated file's source"
        browser.close()


def _shows(page, text: str) -> bool:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_text(text).first.wait_for(timeout=10_000)  # rendering is asynchronous: a bounded wait
    except PlaywrightTimeout:
        return False
    return True


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
        if "\n" in m.new.rstrip("\n"):  # lines it adds carry their own indentation: the anchor must start a line
            at = text.find(m.old)
            assert at == 0 or text[at - 1] == "\n" or not m.old[:1].isspace(), (
                f"{m.id}: anchor starts inside a line's indentation; its replacement's lines would be misindented")
        for f in m.gate_files:
            assert (root / f).is_file(), f"{m.id}: gate file {f} missing"
    assert os.path.exists(root / "mutations" / "registry" / "__init__.py")
