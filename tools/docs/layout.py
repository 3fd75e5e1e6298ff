"""The built documentation site, laid out by a headless Chromium: on no page does a table or a code
block reach past what a reader can see or scroll to.

    python -m tools.docs layout [--site site] [--window WIDTHxHEIGHT ...] [--browser PATH] [--whole]

Every page of the site (`make docs` builds it into site/) is loaded at each window size, its
<details> blocks opened, and every table and code block of its text measured: content past the
edge of a box that clips it, or past the window, is cut off; content in a box that scrolls
sideways is reachable only if that box is no taller than the window, or its scrollbar sits screens
below the rows a reader is looking at (a long results table then reads as a table of its first
columns). docs/stylesheets/tables.css is what makes them scroll. With --whole, a table or a code
block that does not show whole (it scrolls sideways in its box) is a problem too: what a reader sees
only part of at that size of window (docs/stylesheets/tables.css wraps code and, with
tools/docs/site_hooks.py, narrows tables; the results pages' generator splits a table too wide for
a 1280 px window: tools/docs/tables.py). One line per problem, exit 1 if any; the site is served from 127.0.0.1
for the browser and nothing is written into it."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pazo import REPO_ROOT
from pazo.commands.start import ArgumentParser, command, summary_of

#: the window sizes a reader's screen may have: a laptop and a phone
WINDOWS = ((1280, 900), (390, 844))
#: the browsers tried, in order, when --browser is not given
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
#: where the harness page is served (beside the site's own pages, never written into the site)
HARNESS_PATH = "/__pazo_docs_layout__.html"
#: nothing but the local server is reached (the theme's web fonts would hold each page's load until
#: their fetch failed; the pages are laid out in the fallback fonts, as offline)
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
#: where the harness posts what it found
RESULT_PATH = "/__pazo_docs_layout_result__"

#: measures one loaded page (its window `win`): each table and code block of the text that is cut
#: off, with why; a scrolling box that holds it must fit the window's height (its scrollbar in view);
#: with `whole`, each table of the text (a code listing's apart) and code block that scrolls sideways too
PROBE = r"""
function probe(win, whole) {
  const doc = win.document, out = [];
  const limit = doc.documentElement.clientWidth, tall = win.innerHeight;
  if (doc.documentElement.scrollWidth > limit + 1)
    out.push({what: 'the page', why: 'the page itself is ' + doc.documentElement.scrollWidth +
              ' px wide in a ' + limit + ' px window'});
  doc.querySelectorAll('article table, article pre > code').forEach((el, index) => {
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) return;
    const scrolls = e => ['auto', 'scroll'].includes(win.getComputedStyle(e).overflowX);
    let right = box.left + el.scrollWidth, scroller = null, why = null;
    if (scrolls(el) && el.scrollWidth > el.clientWidth + 1) { right = box.right; scroller = el; }
    for (let a = el.parentElement; a && a !== doc.documentElement && !why; a = a.parentElement) {
      if (win.getComputedStyle(a).overflowX === 'visible') continue;
      const edge = a.getBoundingClientRect().right;
      if (right <= edge + 1) continue;
      if (scrolls(a)) { right = edge; scroller = scroller || a; }
      else why = 'clipped at the right edge of ' + a.tagName.toLowerCase() + '.' + a.className;
    }
    if (!why && right > limit + 1) why = 'reaches ' + Math.round(right) + ' px in a ' + limit + ' px window';
    if (!why && scroller && scroller.getBoundingClientRect().height > tall + 1)
      why = 'its horizontal scrollbar is out of view: it scrolls in a box ' +
            Math.round(scroller.getBoundingClientRect().height) + ' px tall in a ' + tall + ' px window';
    if (!why && whole && el.matches('table:not([class])') && el.scrollWidth > el.clientWidth + 1)
      why = 'it does not show whole: its columns take ' + el.scrollWidth + ' px in a box ' +
            el.clientWidth + ' px wide (it scrolls sideways)';
    if (!why && whole && el.matches('code') && scroller)
      why = 'it does not show whole: its lines take ' + el.scrollWidth + ' px in a box ' +
            el.clientWidth + ' px wide (it scrolls sideways)';
    if (why) out.push({what: el.tagName.toLowerCase() + ' ' + (index + 1) + ' ("' +
                       el.textContent.replace(/\s+/g, ' ').trim().slice(0, 50) + '")', why: why});
  });
  return out;
}
"""

#: loads every page in an iframe of each window size in turn, probes it, and posts the findings
#: (JSON) back to the server at RESULT_PATH
HARNESS = """<!doctype html><html><body><iframe id="page"></iframe><script>%(probe)s
const pages = %(pages)s, windows = %(windows)s, whole = %(whole)s;
const frames = () => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
async function run() {
  const frame = document.getElementById('page'), found = [];
  for (const [width, height] of windows) {
    frame.style.width = width + 'px'; frame.style.height = height + 'px';
    for (const page of pages) {
      await new Promise(done => { frame.onload = done; frame.src = page; });
      frame.contentDocument.querySelectorAll('details').forEach(d => { d.open = true; });
      await frames();
      for (const problem of probe(frame.contentWindow, whole))
        found.push({page: page, window: width + 'x' + height, what: problem.what, why: problem.why});
    }
  }
  return found;
}
run().then(found => JSON.stringify({found: found}), err => JSON.stringify({error: String(err)}))
     .then(body => fetch('%(result)s', {method: 'POST', body: body}));
</script></body></html>"""


def site_pages(site: Path) -> list[str]:
    """The site's pages as URL paths (each page is a folder's index.html), the theme's own left out."""
    skip = {"assets", "search"}
    pages = [p.relative_to(site) for p in site.rglob("index.html") if not skip & set(p.relative_to(site).parts)]
    return sorted("/" + (p.parent.as_posix() + "/" if p.parent.as_posix() != "." else "") for p in pages)


def harness(pages: list[str], windows: tuple[tuple[int, int], ...], whole: bool = False) -> str:
    return HARNESS % {"probe": PROBE, "pages": json.dumps(pages), "result": RESULT_PATH,
                      "windows": json.dumps([list(w) for w in windows]), "whole": json.dumps(whole)}


@contextlib.contextmanager
def serve(site: Path, page: str):
    """The site on 127.0.0.1 (a free port) with the harness `page` at HARNESS_PATH; yields its base
    URL and a one-item list that the harness's POST to RESULT_PATH fills, with an event set then."""
    posted: list[bytes] = []
    arrived = threading.Event()

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):
            if self.path != HARNESS_PATH:
                return super().do_GET()
            self._answer(page.encode(), "text/html; charset=utf-8")

        def do_POST(self):
            if self.path != RESULT_PATH:
                return self.send_error(404)
            posted.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self._answer(b"", "text/plain")
            arrived.set()

        def _answer(self, body: bytes, kind: str):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posted, arrived
    finally:
        server.shutdown()
        server.server_close()


def find_browser(name: str | None) -> str | None:
    """The Chromium to run: --browser's (a path or a name on PATH), else the first of BROWSERS found."""
    return shutil.which(name) if name else next(filter(None, map(shutil.which, BROWSERS)), None)


def measure(site: Path, browser: str, windows: tuple[tuple[int, int], ...], timeout: float,
            whole: bool = False) -> list[dict]:
    """Every problem on every page of `site` at each of `windows` (page, window, what, why), with
    `whole` each table that scrolls sideways too; a RuntimeError when the browser does not report
    within `timeout` seconds."""
    pages = site_pages(site)
    page = harness(pages, windows, whole)
    with serve(site, page) as (url, posted, arrived), tempfile.TemporaryDirectory() as profile:
        # a session of its own: the browser is stopped with every process it started
        with subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={profile}", OFFLINE, url + HARNESS_PATH], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
            try:
                arrived.wait(timeout)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                stderr = proc.communicate()[1]
    if not posted:
        last = (stderr.strip().splitlines() or ["nothing on stderr"])[-1]
        raise RuntimeError(f"{browser} did not lay out the {len(pages)} pages within {timeout:g} s "
                           f"(exit {proc.returncode}; {last})")
    report = json.loads(posted[0])
    if "error" in report:
        raise RuntimeError(f"the layout check failed in the browser: {report['error']}")
    return report["found"]


def window_size(text: str) -> tuple[int, int]:
    """`1280x900` as (1280, 900): argparse's type for --window."""
    match = re.fullmatch(r"(\d+)x(\d+)", text)
    if not match or min(map(int, match.groups())) < 100:
        raise ValueError(text)
    return int(match[1]), int(match[2])


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m tools.docs layout", description=summary_of(__doc__))
    parser.add_argument("--site", type=Path, default=REPO_ROOT / "site",
                        help="the built site (default: site/ of the repository, as `make docs` builds it)")
    parser.add_argument("--window", type=window_size, action="append", metavar="WIDTHxHEIGHT",
                        help="a window size in pixels, each at least 100; repeatable "
                             f"(default: {', '.join(f'{w}x{h}' for w, h in WINDOWS)})")
    parser.add_argument("--browser", help=f"the Chromium to run (default: the first found of {', '.join(BROWSERS)})")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the browser may take (default 600)")
    parser.add_argument("--whole", action="store_true",
                        help="also report each table and code block that does not show whole "
                             "(it scrolls sideways in its box)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"pazo: error: no built site at {args.site} (no index.html): `make docs` builds it", file=sys.stderr)
        return 2
    browser = find_browser(args.browser)
    if browser is None:
        wanted = args.browser or " or ".join(BROWSERS)
        print(f"pazo: error: no browser {wanted} found: install Chromium or give --browser PATH", file=sys.stderr)
        return 2
    windows = tuple(args.window or WINDOWS)
    try:
        problems = measure(args.site.resolve(), browser, windows, args.timeout, args.whole)
    except RuntimeError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 1
    for p in problems:
        print(f"{p['page']} ({p['window']}): {p['what']}: {p['why']}")
    pages = len(site_pages(args.site))
    print(f"docs-layout: {len(problems)} problem(s) on {pages} pages at {', '.join(f'{w}x{h}' for w, h in windows)}")
    return 1 if problems else 0


#: `python -m tools.docs layout`, `python -m tools.docs.layout`.
cli = command(main)


if __name__ == "__main__":
    cli()
