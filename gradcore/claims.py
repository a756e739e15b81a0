"""Paper-vs-reproduced tables that a chapter renders and asserts on.

Each row states a claim from a paper, the paper's value, the reproduced value, the
test that decides whether the claim holds, and its verdict. ``Claims.check()``
raises with every failing row, so a chapter whose results drift fails its run.
"""

from __future__ import annotations

import html
import math
import numbers
import os
import re
from dataclasses import dataclass
from typing import Sequence

from .errors import GradcoreValueError
from .papers import smoke_run

#: The MIME type of gradcore's tables in a notebook: their cells as JSON, which the output check
#: (:mod:`gradcore.book.reproducibility`) compares cell by cell.
TABLE_MIME = "application/vnd.gradcore.table+json"

#: Set (to 1) by ``gradcore seeds``: every claim is computed and shown with its verdict ("NO" where
#: it fails), and ``Claims.check()`` reports the failures instead of raising, so one failing claim
#: does not hide how the chapter's other claims fared at that seed.
REPORT_VARIABLE = "GRADCORE_CLAIMS_REPORT"


def report_only() -> bool:
    """True when claims are reported, not asserted (see :data:`REPORT_VARIABLE`)."""
    return os.environ.get(REPORT_VARIABLE, "").strip() not in ("", "0")


def format_value(value) -> str:
    """How a table prints a value: yes/no, 4 significant digits (3 in scientific notation), integers
    whole, with thousands separators from five digits on (2,797,096 parameters; 4800 iterations)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, float):
        if value == 0 or math.isnan(value) or math.isinf(value):
            return f"{value:g}"
        text = f"{value:.3g}" if (abs(value) < 1e-3 or abs(value) >= 1e4) else f"{value:.4g}"
        # A measured float always shows its decimal point: the output check compares bare integers
        # (counts) exactly and decimals within a tolerance, so 1171.3 must not print as "1171".
        return text if ("." in text or "e" in text) else text + ".0"
    return str(value)


def format_bound(bound) -> str:
    """A test's bound as :func:`format_value` prints it, unless that rounds it onto a whole number
    it is not: ``1 - 1e-12`` prints as "1 - 1e-12", not as "1.0" (a reader would read ">= 1.0" as a
    cosine that must not fall short of 1 by even a rounding error)."""
    if isinstance(bound, float) and math.isfinite(bound):
        whole = round(bound)
        gap = bound - whole
        if gap and format_value(bound) == format_value(float(whole)):
            return f"{whole} {'+' if gap > 0 else '-'} {abs(gap):.0e}".replace("e-0", "e-")
    return format_value(bound)


def bounded(value: float, diverged_above: float = 1e3):
    """``value`` as a table should show it: beyond ``diverged_above`` (or not finite), "diverged".

    How far a diverging optimiser has run off (1.9e5 here, 4e7 on another CPU) is set by the
    machine's last bits and says nothing beyond "diverged"; printing it would make the book
    irreproducible without telling the reader anything.
    """
    if not math.isfinite(value) or abs(value) > diverged_above:
        return f"diverged (> {diverged_above:g})"
    return value


def _mimebundle(
    title: str,
    header: list,
    rows: list,
    exact: list,
    plain: str,
    html_text: str,
    rows_say_kind: bool = False,
    derived: list | None = None,
) -> dict:
    """Text, HTML and the cells as JSON (what ``gradcore check`` compares, see reproducibility).

    ``derived`` columns follow from compared ones (a claim's margin from its reproduced value
    and its bound) and are not compared again.
    """
    table = {
        "title": title,
        "header": list(header),
        "rows": rows,
        "exact": exact,
        "rows_say_kind": rows_say_kind,
    }
    if derived:
        table["derived"] = list(derived)
    return {"text/plain": plain, "text/html": html_text, TABLE_MIME: table}


#: How a ``not reproduced`` row's test column starts; the reason follows.
NOT_REPRODUCED_PREFIX = "not reproduced: "
#: The front page's section on reading a claims table, from a chapter's page in the built book.
READING_GUIDE = "../book/intro.html#how-to-read-a-claims-table"
#: A claims row's class and mark in the HTML (the book's stylesheet colours them; the mark survives
#: print).
_VERDICT_HTML = {
    True: ("claim-holds", "\u2713"),
    False: ("claim-fails", "\u2717"),
    None: ("claim-not-reproduced", "\u2013"),
}
_NUMBER = re.compile(
    r"^[+-]?(\d[\d,]*\.?\d*|\.\d+)(e[+-]?\d+)?( ?(%|dB|s|x))?$|^(inf|-inf|nan)$", re.IGNORECASE
)


def _html_cell(value) -> str:
    """One table cell as HTML: numbers get the class that right-aligns them."""
    text = str(value)
    kind = " class='number'" if _NUMBER.match(text.strip()) else ""
    return f"<td{kind}>{html.escape(text)}</td>"


@dataclass
class Claim:
    """One row: what the paper says, what we measured, and whether it holds."""

    claim: str
    paper: object
    reproduced: object
    test: str
    holds: (
        bool | None
    )  # None: a claim this run could not reproduce, shown and explained, never silently dropped
    #: How far the measured value is from failing the test, in the claim's own unit (positive while
    #: it holds); a string where the test is not a distance (a categorical verdict).
    margin: object = None
    #: The measured decimals the verdict turns on (one for a bound, two for an ordering), so a
    #: reader of the table can tell how far the chapter's drift tolerance could move them (fragile
    #: rows).
    tested: tuple = ()
    #: Whether an exact argument fixes the tested values (an identity, an analytic rule), so that
    #: another machine moves them by round-off only, which the claim's bound already allows for.
    exact: bool = False


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate ``successes / trials`` (95% for ``z = 1.96``).

    Unlike the normal approximation it stays inside [0, 1] and is sound at rates near 0 or 1
    (Wilson, JASA 1927; Brown, Cai and DasGupta, Stat. Sci. 2001).
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(
            f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}"
        )
    rate = successes / trials
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z
        / (1 + z * z / trials)
        * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    )
    return max(0.0, centre - half), min(1.0, centre + half)


def _gap(high, low):
    """``high - low`` as a margin; a non-numeric or non-finite pair has none to show."""
    try:
        gap = float(high) - float(low)
    except (TypeError, ValueError):
        return "categorical"
    return gap if math.isfinite(gap) else "unbounded"


def _holds(test) -> bool:
    """``test()``, where a value that cannot be compared (``None``: never measured, e.g. a threshold
    not reached within the budget) fails the claim instead of stopping the chapter."""
    try:
        return bool(test())
    except TypeError:
        return False


def _measured(values) -> tuple:
    """The finite numbers among ``values`` as floats (what a drift could move; others are
    skipped)."""
    found = []
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and not isinstance(value, bool):
            found.append(number)
    return tuple(found)


def _number(value) -> float:
    """A trend's value as a float; one never measured (``None``) is NaN, which fails every
    comparison."""
    return math.nan if value is None else float(value)


class Claims:
    """A claims table for one chapter.

    Examples
    --------
    >>> table = Claims("Deep Leakage from Gradients")
    >>> table.at_most("closed form is exact", paper="exact", reproduced=3e-17, bound=1e-12)
    >>> table.check()
    """

    def __init__(self, title: str):
        # A smoke run's budgets are cut to nothing: its numbers say that the code ran, not what it
        # shows.
        self.smoke = smoke_run()
        self.title = title + (
            " (smoke run: budgets cut, claims not asserted)" if self.smoke else ""
        )
        self.rows: list[Claim] = []

    def add(
        self,
        claim: str,
        paper,
        reproduced,
        holds: bool,
        test: str = "",
        margin=None,
        tested=(),
        exact: bool = False,
    ) -> None:
        """Add a row whose verdict the caller computed.

        ``margin``: how far the measured value is from failing (positive while it holds), in the
        claim's unit; leave it out only for a categorical verdict (shown as "categorical").
        ``tested``: the measured values the verdict compares (for the fragile-row check).
        ``exact``: an exact argument fixes those values (an identity such as a cosine of 1 under
        rescaling, or an analytic rule such as iDLG's label read-out), so another machine moves
        them by round-off at most; the bound must leave room for that round-off. The fragile-row
        check then does not judge the row by the chapter's drift tolerance, which is set for
        values that a search or a random draw decides.
        """
        self.rows.append(
            Claim(
                claim,
                paper,
                reproduced,
                f"{test} (exact)" if exact else test,
                bool(holds),
                "categorical" if margin is None else margin,
                _measured(tested),
                exact,
            )
        )

    def at_most(
        self, claim: str, paper, reproduced: float, bound: float, exact: bool = False
    ) -> None:
        """The reproduced value must not exceed ``bound`` (``exact``: see :meth:`add`)."""
        self.add(
            claim,
            paper,
            reproduced,
            _holds(lambda: reproduced <= bound),
            f"<= {format_bound(bound)}",
            _gap(bound, reproduced),
            (reproduced,),
            exact,
        )

    def at_least(
        self, claim: str, paper, reproduced: float, bound: float, exact: bool = False
    ) -> None:
        """The reproduced value must reach ``bound`` (``exact``: see :meth:`add`)."""
        self.add(
            claim,
            paper,
            reproduced,
            _holds(lambda: reproduced >= bound),
            f">= {format_bound(bound)}",
            _gap(reproduced, bound),
            (reproduced,),
            exact,
        )

    def close_to(self, claim: str, paper: float, reproduced: float, tolerance: float) -> None:
        """The reproduced value must lie within ``tolerance`` of the paper's."""
        try:
            distance = abs(reproduced - paper)
        except TypeError:  # never measured
            distance = math.nan
        self.add(
            claim,
            paper,
            reproduced,
            distance <= tolerance,
            f"within {format_value(tolerance)} of paper",
            _gap(tolerance, distance),
            (reproduced,),
        )

    def rate_at_least(self, claim: str, paper, successes: int, trials: int, bound: float) -> None:
        """A claim about a method over random draws: its success rate, stated with its 95% interval.

        Holds when the interval's lower end reaches ``bound``: a rate that clears the bar only by
        the luck of this sample of draws does not pass. The margin is that lower end minus
        ``bound``. With no trials at all the row fails (nothing was measured).
        """
        if trials == 0:
            # No draws is no evidence: the row fails instead of the chapter crashing on it.
            self.add(claim, paper, "no draws to count", False, f"95% CI above {bound:.0%}", -bound)
            return
        low, high = wilson(successes, trials)
        shown = f"{successes} of {trials} ({successes / trials:.0%}; 95% CI {low:.0%}-{high:.0%})"
        self.add(claim, paper, shown, low >= bound, f"95% CI above {bound:.0%}", low - bound)

    def less(
        self, claim: str, paper, smaller: float, larger: float, names: tuple[str, str] = ("a", "b")
    ) -> None:
        """An ordering the paper claims: ``smaller < larger``."""
        self.add(
            claim,
            paper,
            f"{names[0]} {format_value(smaller)} < {names[1]} {format_value(larger)}",
            _holds(lambda: smaller < larger),
            "ordering",
            _gap(larger, smaller),
            (smaller, larger),
        )

    def increasing(self, claim: str, paper, values, names=None, strict: bool = True) -> None:
        """A trend the paper claims: ``values`` rise along the sweep; the margin is the smallest
        step."""
        self._trend(
            claim, paper, [_number(v) for v in values], names, strict, " < " if strict else " <= "
        )

    def decreasing(self, claim: str, paper, values, names=None, strict: bool = True) -> None:
        """A trend the paper claims: ``values`` fall along the sweep; the margin is the smallest
        step."""
        self._trend(
            claim,
            paper,
            [-_number(v) for v in values],
            names,
            strict,
            " > " if strict else " >= ",
            sign=-1,
        )

    def _trend(self, claim, paper, rising, names, strict, joiner, sign=1) -> None:
        steps = [b - a for a, b in zip(rising, rising[1:])]
        holds = all(step > 0 if strict else step >= 0 for step in steps)
        labels = names or [""] * len(rising)
        shown = joiner.join(
            f"{label} {format_value(sign * value)}".strip() for label, value in zip(labels, rising)
        )
        closest = min(range(len(steps)), key=lambda i: steps[i]) if steps else None
        tested = () if closest is None else (sign * rising[closest], sign * rising[closest + 1])
        self.add(
            claim,
            paper,
            shown,
            holds,
            "increasing" if sign > 0 else "decreasing",
            min(steps) if steps else "categorical",
            tested,
        )

    def not_reproduced(self, claim: str, paper, reproduced, reason: str) -> None:
        """A claim the chapter's setting does not reproduce: listed with the reason, not
        asserted."""
        self.rows.append(
            Claim(
                claim, paper, reproduced, f"{NOT_REPRODUCED_PREFIX}{reason}", None, "not asserted"
            )
        )

    @property
    def failures(self) -> list[Claim]:
        return [row for row in self.rows if row.holds is False]

    def check(self) -> "Claims":
        """Raise ``AssertionError`` naming every claim that does not hold (in a smoke run: only
        print them)."""
        if self.smoke:
            print(
                f"smoke run: {len(self.rows)} claims computed, not asserted ({len(self.failures)} "
                "would not hold at these budgets)"
            )
            return self
        if self.failures and report_only():
            print(
                f"{len(self.failures)} of {len(self.rows)} claims do not hold (reported, not "
                f"asserted: {REPORT_VARIABLE} is set)"
            )
            return self
        if self.failures:
            lines = "; ".join(
                f"{row.claim} (paper {format_value(row.paper)}, reproduced "
                f"{format_value(row.reproduced)}, {row.test})"
                for row in self.failures
            )
            raise AssertionError(
                f"{len(self.failures)} of {len(self.rows)} claims do not hold: {lines}"
            )
        return self

    def _cells(self) -> list[list[str]]:
        verdict = {True: "yes", False: "NO", None: "n/a"}
        if self.smoke:
            verdict = {key: "smoke: not asserted" for key in verdict}
        return [
            [
                row.claim,
                format_value(row.paper),
                format_value(row.reproduced),
                row.test,
                verdict[row.holds],
                format_value(row.margin),
            ]
            for row in self.rows
        ]

    _header = ["claim", "paper", "reproduced", "test", "holds", "margin"]
    #: Compared exactly across machines: the paper's value and the verdict.
    _exact = [1, 4]
    #: Not compared: the margin follows from the reproduced value and the test, both compared.
    _derived = [5]

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = _mimebundle(
            self.title,
            self._header,
            self._cells(),
            self._exact,
            repr(self),
            self._repr_html_(),
            rows_say_kind=True,
            derived=self._derived,
        )
        # Not shown and not compared: what the fragile-row check reads
        # (reproducibility.fragile_claims).
        bundle[TABLE_MIME]["tested"] = [list(row.tested) for row in self.rows]
        exact_rows = [index for index, row in enumerate(self.rows) if row.exact]
        if exact_rows:
            bundle[TABLE_MIME]["exact_rows"] = exact_rows
        return bundle

    def __repr__(self) -> str:
        rows = [self._header] + self._cells()
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._header))]
        lines = [self.title] + [
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows
        ]
        lines.insert(2, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self._header)
        rows = []
        for row, cells in zip(self.rows, self._cells()):
            kind, mark = _VERDICT_HTML[row.holds]
            shown = [_html_cell(c) for c in cells]
            shown[4] = f"<td class='verdict'>{mark} {html.escape(cells[4])}</td>"
            if cells[3].startswith(NOT_REPRODUCED_PREFIX):
                # The reason folds away (whole, never cut), so a row is as tall as its claim.
                reason = cells[3][len(NOT_REPRODUCED_PREFIX) :]
                shown[3] = (
                    "<td class='reason'>not "
                    f"reproduced<details><summary>why</summary>{html.escape(reason)}</details></td>"
                )
            rows.append(f"<tr class='{kind}'>" + "".join(shown) + "</tr>")
        return (
            f"<table class='gradcore-claims'><caption>{html.escape(self.title)} <a "
            f"class='claims-help' href='{READING_GUIDE}'>(how to read this "
            f"table)</a></caption><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )


class Table:
    """A small results table shown as HTML in the book and as aligned text elsewhere."""

    def __init__(self, title: str, header: list[str], rows: list[list]):
        self.title, self.header = title, header
        self.rows = [[format_value(c) for c in row] for row in rows]

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return _mimebundle(
            self.title,
            [str(h) for h in self.header],
            [[str(c) for c in row] for row in self.rows],
            [],
            repr(self),
            self._repr_html_(),
        )

    def __repr__(self) -> str:
        rows = [self.header] + self.rows
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(self.header))]
        lines = [self.title] + [
            "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows
        ]
        lines.insert(2, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(_html_cell(c) for c in r) + "</tr>" for r in self.rows)
        return (
            "<table "
            f"class='gradcore-table'><caption>{html.escape(self.title)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )


def findings(tables: Sequence[Claims], keys: Sequence[str]) -> str:
    """A chapter's key findings as Markdown, every number taken from its claims tables.

    ``keys`` pick the headline rows: each is the start of one claim's text (an unknown key
    raises, naming the claims there are). The text opens with the count of claims that
    held and ends by naming every claim not reproduced, so a reader sees both before the
    first line of code. Paste it at the top of the chapter with myst-nb's ``glue``
    (:func:`glue_findings`).
    """
    rows = [row for table in tables for row in table.rows]
    asserted = [row for row in rows if row.holds is not None]
    missing = [row for row in rows if row.holds is None]
    lines = [
        f"**{sum(bool(row.holds) for row in asserted)} of {len(asserted)} checked claims hold; "
        f"{len(missing)} not reproduced.**",
        "",
    ]
    verdict = {True: "holds", False: "does NOT hold", None: "not reproduced"}
    for key in keys:
        matches = [row for row in rows if row.claim.startswith(key)]
        if len(matches) != 1:
            raise GradcoreValueError(
                f"finding {key!r} matches {len(matches)} claims; claims: "
                + "; ".join(row.claim for row in rows)
            )
        row = matches[0]
        lines.append(
            f"- {row.claim}: {format_value(row.reproduced)} (paper: {format_value(row.paper)}; "
            f"{verdict[row.holds]})"
        )
    if missing:
        # Folded: a page-long list would bury the headline; the claims table gives each reason.
        lines += [
            "",
            f"<details><summary>The {len(missing)} claim{'s' if len(missing) != 1 else ''} not "
            "reproduced here (the claims table at the end says why)</summary>",
            "",
        ]
        lines += [f"- {row.claim}" for row in missing] + ["", "</details>"]
    return "\n".join(lines)


def glue_findings(tables: Sequence[Claims], keys: Sequence[str], name: str = "findings") -> None:
    """Store :func:`findings` under ``name`` for the chapter's key-findings box (``{glue:md}``),
    shown nowhere else."""
    from IPython.display import Markdown
    from myst_nb import glue

    glue(name, Markdown(findings(tables, keys)), display=False)


def claims_in_notebook(path) -> list[dict]:
    """The claims tables an executed notebook shows, as their JSON (title, header, rows).

    Used to summarise a rerun (another seed, another machine): which rows held, and how close
    each came to failing.
    """
    import json

    notebook = json.loads(open(path, encoding="utf-8").read())
    found = []
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            table = output.get("data", {}).get(TABLE_MIME)
            if table and "holds" in table.get("header", []):
                found.append(table)
    return found


def seed_summary(runs: dict) -> list[dict]:
    """Per claim, at how many of the seeds tried it held: ``runs`` maps a seed to a notebook's
    claims tables.

    A claim is identified by its table and its position there (its wording may carry the
    seed's numbers). Returns one record per claim: ``table``, ``claim`` (its wording at the
    first seed), ``held`` (seeds where it held), ``not reproduced``, ``failed`` (seeds where
    it did not hold) and ``missing`` (seeds whose run ended before it).
    """
    records: dict = {}
    seeds = sorted(runs)
    for seed in seeds:
        for table in runs[seed]:
            holds = table["header"].index("holds")
            for position, row in enumerate(table["rows"]):
                record = records.setdefault(
                    (table["title"], position),
                    {
                        "table": table["title"],
                        "claim": row[0],
                        "held": [],
                        "not reproduced": [],
                        "failed": [],
                    },
                )
                verdict = row[holds]
                key = (
                    "held"
                    if verdict == "yes"
                    else "not reproduced"
                    if verdict == "n/a"
                    else "failed"
                )
                record[key].append(seed)
    for record in records.values():
        record["missing"] = [
            s
            for s in seeds
            if s not in record["held"] + record["not reproduced"] + record["failed"]
        ]
    return list(records.values())


def tightest_rows(table: dict, count: int = 3) -> list[tuple[str, str, str]]:
    """The ``count`` asserted rows closest to failing: (claim, verdict, margin).

    Rows are ranked by their margin relative to the threshold of their test (the last
    number in the test column: a margin of 1e-8 under "<= 1e-08" is the whole allowance,
    one of 0.4 under ">= 20" is 2% of it), so exact checks far inside their tolerance do
    not crowd out the claims that nearly fail; rows without a threshold rank by margin.
    """
    header = table["header"]
    holds, margin = header.index("holds"), header.index("margin") if "margin" in header else None
    test = header.index("test") if "test" in header else None
    numeric = []
    for row in table["rows"]:
        try:
            value = float(row[margin]) if margin is not None else math.inf
        except ValueError:
            continue
        numbers = (
            re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", str(row[test]))
            if test is not None
            else []
        )
        scale = abs(float(numbers[-1])) if numbers and float(numbers[-1]) != 0 else 1.0
        numeric.append((value / scale, row))
    numeric.sort(key=lambda pair: pair[0])
    return [(row[0], row[holds], row[margin]) for _, row in numeric[:count]]
