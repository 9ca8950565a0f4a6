"""The HTML report in a real browser: headless Chromium loads ``index.html`` from file://, every
chart image loads (naturalWidth > 0), and a screenshot is taken (kept as ``screenshot.png`` in
the report directory, for a human to look at).

Chromium is not a dependency of kgate: this test uses Debian's ``chromium`` when it is installed
(``apt-get install -y chromium``) and is skipped, with that reason, where it is not.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import CliRun

CHECK = """
<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const r = {images: imgs.length, broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
             title: document.title, summary: document.querySelectorAll('ul.summary li').length};
  const pre = document.createElement('pre'); pre.id = 'kgate-check';
  pre.textContent = 'KGATE-CHECK ' + JSON.stringify(r) + ' END';
  document.body.appendChild(pre);
});
</script>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "Chromium is not installed (Debian: apt-get install -y chromium); the HTML report was not checked in a browser"
    )


def _run(browser: str, *args: str) -> str:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--allow-file-access-from-files",
        "--hide-scrollbars",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


def test_report_page_loads_with_every_image(fleet_cli_run: CliRun, tmp_path: Path) -> None:
    """The page of the session's ``kgate report`` run over the fleet (conftest), copied here: the probe
    and the screenshot are written beside it, and the run's own directory stays as it wrote it."""
    browser = _chromium()
    assert fleet_cli_run.status == 0, fleet_cli_run.err
    out = tmp_path / "report"
    shutil.copytree(fleet_cli_run.out, out)
    page = out / "index.html"

    probe = out / "_check.html"  # the page plus a script that reports what loaded: same directory, same images
    probe.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    dom = _run(browser, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    m = re.search(r"KGATE-CHECK (\{.*?\}) END", dom)  # the script's own source holds the marker too
    assert m, dom[-2000:]
    check = json.loads(html.unescape(m.group(1)))
    assert check["images"] == 6, check
    assert check["broken"] == [], check
    assert check["title"] == "kgate fleet report", check
    assert check["summary"] >= 5, check

    shot = out / "screenshot.png"
    _run(browser, "--window-size=1280,2600", f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000
    keep = Path("/tmp/kgate-report-screenshot.png")
    shutil.copy(shot, keep)  # for a human to look at after the run
