"""kiq.testing's public API is exactly what it exports, each name in docs/api.md; `import
kiq` does not import it, and importing it starts no Spark."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import kiq.testing

PUBLIC = {
    "DeadLetter",
    "Message",
    "Record",
    "Response",
    "Run",
    "TestClient",
    "Written",
    "caller",
    "run_pipeline",
}
API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def test_the_exported_names_are_the_public_api():
    assert kiq.testing.__all__ == sorted(kiq.testing.__all__)
    assert set(kiq.testing.__all__) == PUBLIC
    for name in kiq.testing.__all__:
        assert getattr(kiq.testing, name) is not None


def test_import_kiq_leaves_it_out_and_importing_it_loads_no_pyspark():
    code = (
        "import sys, kiq\n"
        "a = 'kiq.testing' in sys.modules\n"
        "import kiq.testing\n"
        "print(a, 'pyspark' in {m.split('.')[0] for m in sys.modules})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_every_public_name_has_its_section_in_the_testing_part_of_the_api_doc():
    text = API_DOC.read_text()
    testing = text[text.index("## Testing: `kiq.testing`") :]
    headings = re.findall(r"^### (.+)$", testing, re.MULTILINE)
    named = {n.strip() for h in headings for n in h.split(",")}
    assert named >= PUBLIC
