"""Check the built HTML documentation in a real headless browser.

Serves the build directory on a loopback port, opens every page in Chromium through
Playwright and fails (exit status 1, one line per defect) when

* an image did not load or rendered with zero width (a broken ``<img>``, a figure a
  tutorial failed to save),
* a request to the local server answered with an error status (a missing stylesheet,
  script, image or download),
* a link to another page of the documentation points to a file that is not there, or
  to an anchor (``page.html#name``) that the target page does not define.

Links that leave the documentation (other hosts, ``mailto:``) are listed but not
followed: the build machine has no network. ``--screenshots DIR`` also saves a
full-page PNG of each tutorial, scaled to ``--width`` pixels.

Run: ``python docs/check_rendered.py docs/_build/html`` (needs ``pip install playwright``
and a Chromium: Debian's ``chromium`` package, found on ``PATH``, or
``playwright install chromium``).
"""

import argparse
import functools
import http.server
import re
import shutil
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional, Set
from urllib.parse import unquote, urldefrag, urljoin, urlparse

#: Chromium flags for a machine without a display, sandbox or network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: Evaluated in each page: the images that did not load, and every link target.
PAGE_SCRIPT = """() => ({
  broken: Array.from(document.images)
    .filter(img => !img.complete || img.naturalWidth === 0)
    .map(img => img.getAttribute('src')),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
})"""


class _Anchors(HTMLParser):
    """Collects the ``id`` and ``name`` attributes of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: Set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.anchors.add(value)


@functools.cache
def anchors(path: Path) -> frozenset:
    """The anchors a page defines."""
    parser = _Anchors()
    parser.feed(path.read_text(errors="replace"))
    return frozenset(parser.anchors)


def link_defect(link: str, root: Path, base: str) -> Optional[str]:
    """Why the local ``link`` is broken, or ``None`` when its file (and anchor) exist.

    :param str link: an absolute URL found on a page.
    :param Path root: the build directory.
    :param str base: the URL the build directory is served at.
    """
    url, fragment = urldefrag(link)
    if not url.startswith(base):
        return None
    target = root / unquote(urlparse(url).path[len(urlparse(base).path) :])
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return "missing file"
    if fragment and target.suffix == ".html" and unquote(fragment) not in anchors(target):
        return "missing anchor #" + fragment
    return None


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # the browser drops connections it no longer needs (aborted external requests,
        # a page closed while a resource loads): not a defect of the pages
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _serve(root: Path) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _chromium() -> Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def check(root: Path, screenshots: Optional[Path] = None, width: int = 900) -> List[str]:
    """Open every page under ``root`` and return the defects found (empty: all fine).

    :param Path root: the HTML build directory.
    :param Path screenshots: where to save a full-page PNG of each tutorial, or ``None``.
    :param int width: the width, in pixels, of the saved screenshots.
    """
    from playwright.sync_api import sync_playwright

    server = _serve(root)
    base = "http://127.0.0.1:{}/".format(server.server_address[1])
    pages = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.html"))
    defects: List[str] = []
    external: Dict[str, int] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1100, "height": 900})
            # nothing outside the loopback server is reachable: fail those requests at once
            context.route(re.compile(r"^(?!" + re.escape(base) + ")"), lambda route: route.abort())
            for name in pages:
                page = context.new_page()
                failed: List[str] = []
                page.on(
                    "response",
                    lambda r, failed=failed: (
                        failed.append("{} {}".format(r.status, r.url)) if r.status >= 400 else None
                    ),
                )
                page.goto(base + name, wait_until="load")
                found = page.evaluate(PAGE_SCRIPT)
                defects += ["{}: HTTP {}".format(name, f) for f in failed]
                defects += ["{}: broken image {}".format(name, src) for src in found["broken"]]
                for link in found["links"]:
                    if not link.startswith(base):
                        if urlparse(link).scheme in ("http", "https"):
                            external[link] = external.get(link, 0) + 1
                        continue
                    why = link_defect(urljoin(base + name, link), root, base)
                    if why:
                        defects.append("{}: {} in link {}".format(name, why, link))
                if screenshots is not None and _is_tutorial(name):
                    _screenshot(page, screenshots / (Path(name).stem + ".png"), width)
                page.close()
            browser.close()
    finally:
        server.shutdown()
    print("checked {} pages; {} external links not followed".format(len(pages), len(external)))
    return defects


def _is_tutorial(name: str) -> bool:
    return re.fullmatch(r"tutorials/\d\d_\w+\.html", name) is not None


def _screenshot(page, path: Path, width: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    with Image.open(path) as image:
        height = round(image.height * width / image.width)
        small = image.convert("RGB").resize((width, height), Image.LANCZOS)
        # a 128-colour palette keeps a page of text and plots legible at a tenth the size
        small.quantize(colors=128).save(path, optimize=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", type=Path, help="the HTML build directory")
    parser.add_argument("--screenshots", type=Path, help="save tutorial screenshots here")
    parser.add_argument("--width", type=int, default=900, help="screenshot width in pixels")
    args = parser.parse_args(argv)
    if not (args.html / "index.html").is_file():
        parser.error("{} has no index.html: build the docs first".format(args.html))
    defects = check(args.html, args.screenshots, args.width)
    for line in defects:
        print(line)
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
