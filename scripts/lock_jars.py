#!/usr/bin/env python3
"""Write kiq's jar manifest (src/kiq/runtime/jvm/jars.lock.json) from jvm/*/pom.xml.

The poms stay the source of the versions; this pins what they resolve to. For each pom,
Maven resolves the jars `make jars` used to copy (`mvn dependency:list`, with the pom's own
scope and artifact filters), and this records each as group:artifact:version with its size
and SHA-256, computed from the file in the local Maven repository after checking that file
against the SHA-1 Maven Central publishes beside it. Run it after changing a pom, then
`kiq setup` (or `make jars`) fetches the new set:

    .venv/bin/python scripts/lock_jars.py           # rewrite the manifest
    .venv/bin/python scripts/lock_jars.py --check   # exit 1 if the manifest is not current

Needs Maven (mvn) and Java; nothing else in kiq does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "src" / "kiq" / "runtime" / "jvm" / "jars.lock.json"
CENTRAL = "https://repo1.maven.org/maven2/"
# set name -> (pom, how to describe it, the artifact whose version the description names)
SETS = {
    "kafka": (
        "jvm/kafka-broker/pom.xml",
        "the Kafka broker {version} and its runtime dependencies",
        "kafka_2.13",
    ),
    "spark": (
        "jvm/spark-connector/pom.xml",
        "Spark's Kafka connector {version} and the jars pyspark lacks",
        "spark-sql-kafka-0-10_2.13",
    ),
}
# group:artifact:type[:classifier]:version:scope:/absolute/path [-- module ...]
_LINE = re.compile(r"^\s*([^:\s]+):([^:\s]+):jar:(?:([^:\s]+):)?([^:\s]+):(\w+):(/\S+\.jar)")


def resolve(pom: str) -> list[tuple[str, str, str, Path]]:
    """(group, artifact, version, local file) of every jar Maven resolves for ``pom``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "deps.txt"
        argv = ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(ROOT / pom)]
        argv += ["dependency:list", f"-DoutputFile={out}", "-DoutputAbsoluteArtifactFilename=true"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
        found = []
        for line in out.read_text().splitlines():
            match = _LINE.match(line)
            if match:
                group, artifact, classifier, version, _scope, path = match.groups()
                if classifier:
                    sys.exit(f"{pom}: {group}:{artifact} has a classifier; the manifest has none")
                found.append((group, artifact, version, Path(path)))
    if not found:
        sys.exit(f"{pom}: Maven listed no jars")
    return sorted(found)


def central_sha1(group: str, artifact: str, version: str) -> str:
    url = f"{CENTRAL}{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar.sha1"
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode().split()[0]).lower()


def build_manifest(check_central: bool) -> str:
    sets = {}
    for name, (pom, description, named) in SETS.items():
        jars = []
        for group, artifact, version, path in resolve(pom):
            data = path.read_bytes()
            if check_central and hashlib.sha1(data).hexdigest() != central_sha1(
                group, artifact, version
            ):
                sys.exit(f"{path} is not the file Maven Central has: delete it and run again")
            coordinates = f"{group}:{artifact}:{version}"
            jars.append(
                {
                    "coordinates": coordinates,
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
        (version,) = {
            j["coordinates"].split(":")[2] for j in jars if f":{named}:" in j["coordinates"]
        }
        sets[name] = {"pom": pom, "description": description.format(version=version), "jars": jars}
    return _format(sets)


def _format(sets: dict[str, dict[str, object]]) -> str:
    """JSON with one jar a line, so that a pom change reads as a short diff."""
    lines = [
        "{",
        f'  "generated_by": "scripts/lock_jars.py from {", ".join(p for p, *_ in SETS.values())}'
        ': edit the poms, not this file",',
        '  "sets": {',
    ]
    for i, (name, body) in enumerate(sets.items()):
        lines.append(f"    {json.dumps(name)}: {{")
        lines.append(f'      "pom": {json.dumps(body["pom"])},')
        lines.append(f'      "description": {json.dumps(body["description"])},')
        lines.append('      "jars": [')
        jars = body["jars"]
        assert isinstance(jars, list)
        lines += [
            f"        {json.dumps(j)}{',' if k < len(jars) - 1 else ''}" for k, j in enumerate(jars)
        ]
        lines.append("      ]")
        lines.append("    }" + ("," if i < len(sets) - 1 else ""))
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the manifest is stale")
    parser.add_argument(
        "--no-central", action="store_true", help="skip checking the local files' SHA-1 on Central"
    )
    args = parser.parse_args()
    text = build_manifest(check_central=not args.no_central)
    json.loads(text)  # well-formed
    if args.check:
        current = MANIFEST.read_text() if MANIFEST.exists() else ""
        if current != text:
            print(
                f"{MANIFEST.relative_to(ROOT)} is stale: run scripts/lock_jars.py", file=sys.stderr
            )
            return 1
        print(f"{MANIFEST.relative_to(ROOT)} is current")
        return 0
    MANIFEST.write_text(text)
    counts = ", ".join(f"{n}: {len(json.loads(text)['sets'][n]['jars'])} jars" for n in SETS)
    print(f"wrote {MANIFEST.relative_to(ROOT)} ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
