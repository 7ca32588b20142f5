"""The four reports: Markdown table, Stryker-schema JSON, a self-contained HTML page, JUnit XML."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from mutations.model import Result, Verdict
from mutations.sandbox import anchor_location

# vt's verdicts in Stryker's status enum; vt's own word is kept in the extra field "vtVerdict".
STRYKER_STATUS = {
    Verdict.KILLED: "Killed",
    Verdict.SURVIVED: "Survived",
    Verdict.OVERREACH: "Killed",
    Verdict.NOT_APPLIED: "Ignored",
    Verdict.TIMEOUT: "Timeout",
    Verdict.ERROR: "RuntimeError",
}


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def markdown(results: list[Result]) -> str:
    rows = ["| id | description | gate | verdict | failing assertion | seconds |", "|---|---|---|---|---|---|"]
    for r in results:
        m = r.mutation
        rows.append(f"| {m.id} | {_cell(m.description)} | {_cell(', '.join(m.gates))} | {r.verdict.value} | "
                    f"{_cell(r.reason)} | {r.seconds:.1f}{' (cached)' if r.is_cached else ''} |")
    killed = sum(r.verdict is Verdict.KILLED for r in results)
    return "\n".join([f"# Mutation report: {killed}/{len(results)} killed", "", *rows, ""])


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
            "killedBy": r.failed_gates,
            "coveredBy": list(m.gates),
            "duration": round(r.seconds * 1000),
            "expectedGate": list(m.gates),  # extra field: which gate must go red
            "vtVerdict": r.verdict.value,
        })
    return {"schemaVersion": "2", "thresholds": {"high": 100, "low": 100}, "files": files,
            "framework": {"name": "vt-mutations"}, "projectRoot": str(root)}


def html_page(results: list[Result]) -> str:
    colors = {"Killed": "#1a7f37", "Survived": "#cf222e", "Overreach": "#9a6700"}
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>vt mutation report</title><style>",
             "body{font-family:sans-serif;margin:2em}pre{background:#f6f8fa;padding:.6em;overflow:auto}",
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em}",
             "</style></head><body>", f"<h1>vt mutation report: {len(results)} mutants</h1><table>",
             "<tr><th>id</th><th>verdict</th><th>gate</th><th>seconds</th></tr>"]
    for r in results:
        c = colors.get(r.verdict.value, "#57606a")
        parts.append(f"<tr><td><a href='#{html.escape(r.mutation.id)}'>{html.escape(r.mutation.id)}</a></td>"
                     f"<td style='color:{c}'><b>{r.verdict.value}</b></td>"
                     f"<td>{html.escape(', '.join(r.mutation.gates))}</td><td>{r.seconds:.1f}</td></tr>")
    parts.append("</table>")
    for r in results:
        m = r.mutation
        parts += [f"<h2 id='{html.escape(m.id)}'>{html.escape(m.id)}: {r.verdict.value}</h2>",
                  f"<p>{html.escape(m.description)} ({m.kind.value}, {html.escape(m.file)})</p>",
                  f"<p>gates: {html.escape(', '.join(m.gates))}</p>",
                  f"<pre>{html.escape(r.diff or m.old + chr(10) + '->' + chr(10) + m.new)}</pre>",
                  f"<p>failing assertion: <code>{html.escape(r.reason)}</code></p>"]
    parts.append("</body></html>")
    return "\n".join(parts)


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
    paths = {
        "mutations.md": markdown(results),
        "mutation-report.json": json.dumps(stryker(results, root), indent=1),
        "mutation-report.html": html_page(results),
        "mutations-junit.xml": junit(results),
    }
    for name, text in paths.items():
        (out_dir / name).write_text(text)
    return [out_dir / n for n in paths]
