"""The built book, opened in headless Chromium: errors, missing figures, dark-mode tables, wide
code."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from .layout import toc_pages

# ------------------------------------------------------------------------------------ the browser


CHROMIUM = "/usr/bin/chromium"
#: The browser check's laptop screen is 1440x900; a page taller than MOST_SCREENS of them is split
#: or folded.
SCREEN_WIDTH, SCREEN_HEIGHT = 1440, 900
#: Screen widths at which a shown code line of 100 characters, a printed line and a progress bar
#: must fit the column (at 1280 px the code's and the bars' font shrinks to fit, printed lines
#: wrap: book/_static/gradcore.css); narrower screens scroll code cells and bars.
CODE_WIDTHS = (SCREEN_WIDTH, 1280)
MOST_SCREENS = 25
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_ERROR_SELECTORS = (
    ".output.traceback, .output.error, .system-message, .problematic, div.admonition.error"
)
_ERROR_TEXT = re.compile(r"Traceback \(most recent call last\)|\b[A-Z]\w*(Error|Exception): ")


def _png_outputs(path: Path) -> int:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return sum(
        "image/png" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )


@contextlib.contextmanager
def _serve(directory: Path):
    """A static http server on 127.0.0.1 (loopback only), on a free port."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _too_wide(page) -> list[str]:
    """Shown code and printed outputs wider than the text column at each of :data:`CODE_WIDTHS`
    (the page is left at :data:`SCREEN_WIDTH`)."""
    bad = []
    for width in CODE_WIDTHS:
        page.set_viewport_size({"width": width, "height": SCREEN_HEIGHT})
        for script, what, fix in (
            (_WIDE_CODE_JS, "shown code cell(s)", "wrap the line, or hide the cell's input"),
            (
                _WIDE_OUTPUT_JS,
                "printed output(s)",
                "book/_static/gradcore.css wraps printed lines and fits 80-column progress bars",
            ),
        ):
            wide = page.evaluate(script)
            if wide:
                bad.append(
                    f"{len(wide)} {what} wider than the column at {width} px, e.g. "
                    f"`{wide[0][:60]}` ({fix})"
                )
    page.set_viewport_size({"width": SCREEN_WIDTH, "height": SCREEN_HEIGHT})
    return bad


def _page_problems(page, root: Path, doc: str) -> tuple[list[str], str, dict, dict]:
    """The browser check of one loaded page: its problems, a one-line summary, its claims rows, its
    results counts."""
    bad: list[str] = []
    if not page.locator("h1:visible").count():
        bad.append("no visible h1")
    n_err = page.locator(_ERROR_SELECTORS).count()
    if n_err:
        bad.append(f"{n_err} error element(s) ({_ERROR_SELECTORS})")
    outputs_text = " ".join(page.locator(".cell_output").all_inner_texts())
    match = _ERROR_TEXT.search(outputs_text)
    if match:
        bad.append(f"error text in an output: {match.group(0)!r}")
    images = page.evaluate(
        """async () => {
            const imgs = [...document.images];
            imgs.forEach(i => { i.loading = 'eager'; });
            await Promise.all(imgs.map(i => i.decode().catch(() => null)));
            const captioned = i => !!(i.closest('figure')
                                      && i.closest('figure').querySelector('figcaption'));
            return imgs.map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
                                   output: !!i.closest('.cell_output'), captioned: captioned(i)}));
        }"""
    )
    broken = [i["src"] for i in images if not i["ok"]]
    if broken:
        bad.append(f"{len(broken)} image(s) did not load: {', '.join(broken[:3])}")
    figures = sum(i["output"] for i in images)
    uncaptioned = sum(i["output"] and not i["captioned"] for i in images)
    if uncaptioned:
        bad.append(
            f"{uncaptioned} output figure(s) without a caption (add `:mystnb: figure: caption:` to "
            "the cell)"
        )
    nb_path = root / f"{doc}.ipynb"
    if nb_path.exists():
        expected = _png_outputs(nb_path)
        if figures < expected:
            bad.append(f"{figures} output images rendered, the notebook has {expected}")
    math = page.evaluate(
        """async () => {
            const n = document.querySelectorAll('.math').length;
            if (!n) return {n: 0, rendered: 0, errors: 0};
            if (window.MathJax && MathJax.startup && MathJax.startup.promise)
                await MathJax.startup.promise;
            return {n, rendered: document.querySelectorAll('mjx-container').length,
                    errors: document.querySelectorAll('mjx-merror').length};
        }"""
    )
    if math["n"] and not math["rendered"]:
        bad.append(f"{math['n']} math element(s) but MathJax rendered none")
    if math["errors"]:
        bad.append(f"{math['errors']} TeX error(s) in the math")
    boxed = page.evaluate(_DARK_TABLES_JS)
    if boxed:
        bad.append(
            f"{boxed} output table(s) on a light box in dark mode (book/_static/gradcore.css)"
        )
    claims = page.evaluate(_CLAIMS_ROWS_JS)
    if claims["unmarked"]:
        bad.append(
            f"{claims['unmarked']} claims row(s) without a verdict class (re-execute the chapter)"
        )
    bad += _too_wide(page)
    findings = page.evaluate(_FINDINGS_JS)
    if claims["rows"] and not (findings["found"] and findings["before"] and findings["items"]):
        bad.append(
            f"no key-findings box with its findings above the first code cell ({findings}; "
            "claims.glue_findings at the end, the box before the parameters cell)"
        )
    summary = page.evaluate(_RESULTS_SUMMARY_JS)
    screens = page.evaluate("document.documentElement.scrollHeight") / SCREEN_HEIGHT
    if screens > MOST_SCREENS:
        bad.append(
            f"{screens:.1f} screens tall at {SCREEN_WIDTH}x{SCREEN_HEIGHT}, more than "
            f"{MOST_SCREENS} (continue the chapter on a sub-page, `sections` in _toc.yml, or fold "
            "long outputs)"
        )
    label = (
        f"{figures} figure{'s' if figures != 1 else ''}, {math['rendered']} equations, "
        f"{screens:.1f} screens"
    )
    return bad, label, claims, summary


def browser_check(root, html_dir=None, screenshots=None) -> list[str]:
    """Open every page of the toc in headless Chromium; return the problems (empty if all good).

    Prints one line per page. Requests that leave the loopback server are blocked and reported
    (the book must not need the network); ``screenshots``: a folder to save full-page PNGs in.
    """
    from urllib.parse import urlparse

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return ["playwright is not installed: pip install -e '.[test]' -c constraints.txt"]
    if not Path(CHROMIUM).exists():
        return [f"{CHROMIUM} is missing: apt-get install chromium (`make test` does)"]
    root = Path(root)
    html = Path(html_dir) if html_dir else root / "_build" / "html"
    if not (html / "index.html").exists():
        return [f"{html}/index.html is missing: build the book first (jupyter-book build .)"]
    problems: list[str] = []
    with _serve(html) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": SCREEN_WIDTH, "height": SCREEN_HEIGHT})
        external: list[str] = []

        def route(r):
            if urlparse(r.request.url).hostname in ("127.0.0.1", "localhost"):
                r.continue_()
            else:
                external.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        shown_claims: dict = {}
        front_page: dict = {}
        for doc in toc_pages(root):
            rel = f"{doc}.html"
            bad = []
            external.clear()
            response = page.goto(f"{base}/{rel}", wait_until="load")
            if response is None or response.status != 200:
                problems.append(f"{rel}: HTTP {response.status if response else 'no response'}")
                print(f"FAIL {rel}  not found")
                continue
            page_bad, label, claims, summary = _page_problems(page, root, doc)
            bad.extend(page_bad)
            if external:
                bad.append(f"{len(external)} request(s) to the network blocked, e.g. {external[0]}")
            shown_claims[doc] = claims
            if summary:
                front_page = summary
            if screenshots:
                Path(screenshots).mkdir(parents=True, exist_ok=True)
                page.screenshot(
                    path=str(Path(screenshots) / f"{doc.replace('/', '_')}.png"), full_page=True
                )
            if bad:
                problems.extend(f"{rel}: {b}" for b in bad)
                print(f"FAIL {rel}  {label}: " + "; ".join(bad))
            else:
                print(f"ok   {rel}  {label}")
        browser.close()
    # The front page's "What reproduces" counts must be what the chapter pages show.
    for link, counts in front_page.items():
        doc = re.sub(r"^(\.\./)+", "", link).removesuffix(".html")
        shown = shown_claims.get(doc)
        if shown is None:
            problems.append(
                f"front page: its results table links {link}, which is not a page of the toc"
            )
        elif (shown["rows"], shown["not reproduced"]) != (
            counts["claims"],
            counts["not reproduced"],
        ):
            problems.append(
                f"front page: {doc} counted {counts['claims']} claims, {counts['not reproduced']} "
                f"not reproduced; its page shows {shown['rows']} and {shown['not reproduced']}: "
                "run `gradcore results`"
            )
    return problems


#: In dark mode, the output tables whose box is not transparent (the theme's light box for HTML
#: outputs).
_DARK_TABLES_JS = """() => {
    const root = document.documentElement, before = root.dataset.theme;
    root.dataset.theme = 'dark';
    const boxed = [...document.querySelectorAll('.cell_output table')].filter(t => {
        const box = t.closest('.output');
        return box && getComputedStyle(box).backgroundColor !== 'rgba(0, 0, 0, 0)';
    }).length;
    root.dataset.theme = before;
    return boxed;
}"""

#: Counts the claims rows of a page, those marked not reproduced, and rows that carry no verdict
#: class.
_CLAIMS_ROWS_JS = """() => {
    const rows = [...document.querySelectorAll('table.gradcore-claims tbody tr')];
    const verdicts = ['claim-holds', 'claim-not-reproduced', 'claim-fails'];
    const marked = r => verdicts.some(c => r.classList.contains(c));
    return {rows: rows.length,
            'not reproduced': rows.filter(r => r.classList.contains('claim-not-reproduced')).length,
            unmarked: rows.filter(r => !marked(r)).length};
}"""

#: Shown code cells whose longest line does not fit the text column: that line, per cell.
_WIDE_CODE_JS = """() => [...document.querySelectorAll('div.cell_input pre')]
    .filter(p => p.offsetParent !== null && p.innerText.trim() && p.scrollWidth > p.clientWidth + 1)
    .map(p => p.innerText.split('\\n').reduce((a, l) => l.length > a.length ? l : a, ''))"""
#: The same for printed outputs (stdout and stderr streams: results and progress bars).
_WIDE_OUTPUT_JS = _WIDE_CODE_JS.replace(
    "'div.cell_input pre'",
    "'div.cell_output .output.stream pre, div.cell_output .output.stderr pre'",
)

#: A chapter's key-findings admonition: present, above the first code cell, with its glued findings
#: (list items).
_FINDINGS_JS = """() => {
    const box = [...document.querySelectorAll('.admonition')].find(
        a => ((a.querySelector('.admonition-title') || {}).innerText || '').trim()
             === 'Key findings');
    if (!box) return {found: false, before: false, items: 0};
    const cell = document.querySelector('.cell');
    const before = !cell
                   || !!(box.compareDocumentPosition(cell) & Node.DOCUMENT_POSITION_FOLLOWING);
    return {found: true, before, items: box.querySelectorAll('li').length};
}"""

#: The front page's results table (header Chapter | Claims | Held | Not reproduced | Failed |
#: Fragile): link -> counts.
_RESULTS_SUMMARY_JS = """() => {
    const found = {};
    for (const table of document.querySelectorAll('table')) {
        const head = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim());
        if (head.join('|') !== 'Chapter|Claims|Held|Not reproduced|Failed|Fragile') continue;
        for (const row of table.querySelectorAll('tbody tr')) {
            const cells = [...row.querySelectorAll('td')].map(td => td.innerText.trim());
            const link = row.querySelector('a');
            if (link) {
                found[link.getAttribute('href')] = {claims: +cells[1], 'not reproduced': +cells[3]};
            }
        }
    }
    return found;
}"""
