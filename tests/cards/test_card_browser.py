"""Render the dataset card as the Hub would and check it in headless Chromium.

The card is README.md with its linked PNGs; the check: no broken image link, no empty figure.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from cards.builder import refresh_card
from llm_powertrace_ds import shards

CHECK_JS = """
<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src);
  const empty = [];
  for (const img of imgs) {
    if (!img.naturalWidth) continue;
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const ctx = c.getContext('2d'); ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    let distinct = new Set();
    for (let k = 0; k < d.length && distinct.size < 3; k += 4 * 97) distinct.add(d[k] + ',' + d[k+1] + ',' + d[k+2]);
    if (distinct.size < 3) empty.push(img.src);
  }
  const out = document.createElement('pre'); out.id = 'result';
  out.textContent = JSON.stringify({images: imgs.length, broken, empty});
  document.body.appendChild(out);
});
</script>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (make test installs it when CI=true)")


def _render(root):
    from markdown_it import MarkdownIt

    text = (root / "README.md").read_text(encoding="utf-8")
    body = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # the Hub hides the YAML
    html = MarkdownIt("commonmark").enable("table").render(body)
    page = root / "card.html"
    page.write_text(f"<html><head><meta charset='utf-8'></head><body>{html}{CHECK_JS}"
                    "</body></html>", encoding="utf-8")
    return page


@pytest.mark.slow
def test_card_renders_with_images_in_chromium(tmp_path, make_run, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "1")
    chromium = _chromium()
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("ft-a"))
    shards.publish_run(root, make_run("inf-a", workload="inference", with_requests=True))
    refresh_card(root)  # the full card (with figures) is the command layer's job, once
    page = _render(root)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}",
             "--virtual-time-budget=5000"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    match = re.search(r'<pre id="result">(.*?)</pre>', dom, flags=re.S)
    assert match, "the check script did not run"
    import html
    import json

    result = json.loads(html.unescape(match.group(1)))
    assert result["images"] >= 1, "the card links no figure"
    assert result["broken"] == [], result
    assert result["empty"] == [], result
    shot = tmp_path / "card.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,2400",
                    page.as_uri()], capture_output=True, timeout=120, check=False)
    assert shot.exists() and shot.stat().st_size > 10_000
