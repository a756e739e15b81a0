"""Open every page of the built book (_build/html) in headless Chromium and check it.

    python tests/browser_check.py [--html _build/html] [--screenshots DIR]

For each page of _toc.yml: it loads, has a visible h1, shows no error output or TeX error,
every <img> loaded, a chapter renders at least as many output images as its notebook has PNGs,
and nothing is fetched from the network. One line per page; exit 1 on any problem.
`gradcore check` runs the same check (gradcore.browser.browser_check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gradcore.book.browser import browser_check

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html", default=None, help="the built book (default: _build/html)")
    ap.add_argument("--screenshots", default=None, help="save a full-page PNG of each page here")
    args = ap.parse_args(argv)
    problems = browser_check(ROOT, html_dir=args.html, screenshots=args.screenshots)
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
