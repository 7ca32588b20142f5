"""The four reports: Markdown (score first), Stryker-schema JSON, the HTML report in the viewer the
ecosystem uses (mutation-testing-elements, vendored at a pinned version so the page is one file that opens
offline), JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from mutations.model import Mutation, Result, Verdict
from mutations.sandbox import anchor_location

# vt's verdicts in Stryker's status enum; vt's own word is kept in the extra field "vtVerdict".
STRYKER_STATUS = {
    Verdict.KILLED: "Killed",
    Verdict.SURVIVED: "Survived",
    Verdict.OVERREACH: "Killed",
    Verdict.NOT_APPLIED: "Ignored",
    Verdict.TIMEOUT: "Timeout",
    Verdict.ERROR: "RuntimeError",
    Verdict.CRASHED: "RuntimeError",
}


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


AREAS = (  # (path prefix, area) in order: the first match names a mutant's area
    ("vt/pool.py", "pool"), ("vt/capture.py", "capture"), ("vt/conformance.py", "capture"),
    ("backends/cuda.py", "cuda"), ("backends/cublas.py", "cuda"), ("backends/kernels/", "kernels"),
    ("backends/", "cpu backend"),
    ("vt/engine/worker/graph_driver.py", "graphs"), ("vt/engine/spec_decode/proposers.py", "speculation"),
    ("vt/engine/sample/rejection.py", "speculation"), ("vt/engine/", "engine"), ("models/", "models"),
    ("vt/backend.py", "layers"), ("seams/", "seams"), ("mutations/", "mutation runner"), ("tests/", "test setup"),
    ("vt/server", "server"), ("vt/env.py", "flags"), ("vt/cli.py", "cli"),
)


def area(m: Mutation) -> str:
    return next((name for prefix, name in AREAS if m.file.startswith(prefix)), "other")


def _score(results: list[Result], key) -> list[str]:
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(key(r.mutation), []).append(r)
    return [f"| {k} | {sum(r.verdict is Verdict.KILLED for r in g)}/{len(g)} |" for k, g in sorted(groups.items())]


def summary(results: list[Result]) -> str:
    """The score first (overall, by lane, by area), then every mutant that is not Killed."""
    killed = sum(r.verdict is Verdict.KILLED for r in results)
    pct = 100.0 * killed / len(results) if results else 0.0
    lines = [f"# Mutation report: {killed}/{len(results)} killed (score {pct:.1f}%)", "",
             "| lane | killed |", "|---|---|", *_score(results, lambda m: "gpu" if m.needs_gpu else "cpu"), "",
             "| area | killed |", "|---|---|", *_score(results, area), ""]
    missed = [r for r in results if r.verdict is not Verdict.KILLED]
    lines += ["## Not killed", ""] + ([f"- {r.mutation.id}: {r.verdict.value}: {r.reason[:300]}" for r in missed]
                                      or ["(none)"])
    rerun = [r for r in results if r.rerun_because]
    if rerun:  # judged on a second run: said beside the score, never folded into it
        lines += ["", "## Judged on a rerun (the first gate run ended in a pytest internal error)", "",
                  *(f"- {r.mutation.id}: {r.verdict.value}; first run: {r.rerun_because}" for r in rerun)]
    return "\n".join([*lines, ""])


def markdown(results: list[Result]) -> str:
    rows = ["| id | description | gate | verdict | failing assertion | seconds |", "|---|---|---|---|---|---|"]
    for r in results:
        m = r.mutation
        rows.append(f"| {m.id} | {_cell(m.description)} | {_cell(', '.join(m.gates))} | {r.verdict.value} | "
                    f"{_cell(r.reason)} | {r.seconds:.1f}{' (cached)' if r.is_cached else ''} |")
    return "\n".join([summary(results), "## Every mutant", "", *rows, ""])


def stryker(results: list[Result], root: Path) -> dict:
    files: dict[str, dict] = {}
    for r in results:
        m = r.mutation
        src_path = root / m.file
        source = src_path.read_text() if src_path.is_file() else ""
        entry = files.setdefault(m.file, {"language": "python", "source": source, "mutants": []})
        sl, sc, el, ec = anchor_location(source, m.old)
        entry["mutants"].append({
            "id": m.id,
            "mutatorName": m.kind.value,
            "description": m.description,
            "replacement": m.new,
            "location": {"start": {"line": sl, "column": sc}, "end": {"line": el, "column": ec}},
            "status": STRYKER_STATUS[r.verdict],
            "statusReason": r.reason,
            "killedBy": [g for g in m.gates if any(t == g or t.startswith(g + "[") for t in r.failed_gates)],
            "coveredBy": list(m.gates),
            "duration": round(r.seconds * 1000),
            "expectedGate": list(m.gates),  # extra field: which gate must go red
            "vtVerdict": r.verdict.value,
        })
    return {"schemaVersion": "2", "thresholds": {"high": 100, "low": 100}, "files": files,
            "testFiles": _test_files(results, root), "framework": {"name": "vt-mutations"},
            "projectRoot": str(root)}


def _test_files(results: list[Result], root: Path) -> dict:
    """Each gate file with its source and the gates in it: the viewer shows which test killed what."""
    out: dict[str, dict] = {}
    for r in results:
        for gate in r.mutation.gates:
            path = gate.split("::")[0]
            entry = out.setdefault(path, {"source": _read(root / path), "tests": []})
            if all(t["id"] != gate for t in entry["tests"]):
                entry["tests"].append({"id": gate, "name": gate.split("::", 1)[-1]})
    return out


def _read(p: Path) -> str:
    return p.read_text() if p.is_file() else ""


VIEWER = Path(__file__).parent / "vendor" / "mutation-test-elements.js"  # mutation-testing-elements 3.9.0


def html_page(report: dict) -> str:
    """The report in the viewer Stryker, PIT and Infection users know, with the JSON inline: one file."""
    data = json.dumps(report).replace("</", "<\\/")  # nothing in the JSON may close the script
    script = VIEWER.read_text().replace("</script", "<\\/script")
    return "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'><title>vt mutation report</title></head><body>",
        "<mutation-test-report-app title-postfix='vt'></mutation-test-report-app>",
        f"<script>{script}</script>",
        f"<script>document.querySelector('mutation-test-report-app').report = {data};</script>",
        "</body></html>"])


def junit(results: list[Result]) -> str:
    suite = ET.Element("testsuite", name="vt-mutations", tests=str(len(results)),
                       failures=str(sum(r.verdict is not Verdict.KILLED for r in results)))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="mutations", name=r.mutation.id, time=f"{r.seconds:.3f}")
        if r.verdict is not Verdict.KILLED:
            f = ET.SubElement(case, "failure", message=f"{r.verdict.value}: {r.reason}"[:500])
            f.text = r.diff
        else:
            ET.SubElement(case, "system-out").text = r.reason
    return ET.tostring(suite, encoding="unicode")


def write_all(results: list[Result], root: Path, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = stryker(results, root)
    paths = {
        "mutations.md": markdown(results),
        "mutation-report.json": json.dumps(report, indent=1),
        "mutation-report.html": html_page(report),
        "mutations-junit.xml": junit(results),
    }
    for name, text in paths.items():
        (out_dir / name).write_text(text)
    return [out_dir / n for n in paths]
