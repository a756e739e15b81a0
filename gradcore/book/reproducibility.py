"""What reproduces across machines: executed outputs compared number by number.

The book's notebooks are executed on one machine and rerun by readers on others. Another
CPU (another SIMD width, BLAS code path or thread count) changes float results in their
last bits, and an attack that optimises for hundreds of steps carries that difference
into its second or third digit. A check that compares printed outputs character by
character therefore passes only on the machine type that produced them. This module is
the comparison that holds wherever the book truly reproduces, and still fails when a
result really changes:

* text between numbers compares exactly, after runs of white space are folded (an aligned
  table re-pads when a number's width changes) and runs of dashes too (its rule line);
* integers (digits with no decimal point or exponent: counts, labels, "10 of 17") compare
  exactly;
* a decimal number compares within the tolerance of its **kind**, read from the words
  around it (:data:`KINDS`): ``decibels`` (PSNR: absolute, in dB), ``magnitude`` (MSE,
  losses, errors, norms: relative), ``fraction`` (SSIM, accuracy, cosine, LPIPS, shares:
  absolute) and ``other`` (relative);
* two numbers that are both at or below the round-off floor are equal: round-off is not a
  result, and 1e-33 and 6e-34 both satisfy any bound a chapter claims of an exact quantity;
* gradcore's tables and claims tables carry their cells as JSON (:data:`TABLE_MIME`): the
  kind of a cell is read from its column header, its row label, then the title; a claims
  table's paper column and verdicts compare exactly, so a wrong paper number or a claim
  that stops holding always fails.

The tolerances are declared once per chapter, in its front matter (``gradcore: tolerance:``),
and may be overridden for one cell with the cell metadata key ``tolerance``; they were
chosen from measured drift (``gradcore drift``; README, "Testing"). The nbval plugin
:mod:`gradcore.book.nbval_tolerance` applies this comparison to every cell.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..claims import TABLE_MIME

#: A number as printed: optional sign, digits with an optional fraction, optional exponent.
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")

#: Kinds of printed number and the words that announce them (matched case-insensitively).
KINDS: tuple[tuple[str, re.Pattern], ...] = (
    ("decibels", re.compile(r"psnr|\bdb\b", re.I)),
    (
        "fraction",
        re.compile(r"ssim|accura|\bacc\b|cosine sim|lpips|\bshare|fraction|probabilit", re.I),
    ),
    (
        "magnitude",
        re.compile(r"mse|loss|error|distance|residual|norm\b|norms\b|gap|growth|condition", re.I),
    ),
)
KIND_NAMES = ("decibels", "fraction", "magnitude", "other")


class ToleranceError(ValueError):
    """A tolerance declared in a chapter or cell that is not understood."""


@dataclass(frozen=True)
class Tolerance:
    """How far a rerun's number may move from the committed one, per kind of number.

    Attributes
    ----------
    decibels : float
        Absolute, in dB (PSNR).
    magnitude : float
        Relative, ``|a - b| <= magnitude * max(|a|, |b|)`` (MSE, losses, errors, norms).
    fraction : float
        Absolute, for quantities in [0, 1] (SSIM, accuracy, cosine, LPIPS, shares).
    other : float
        Relative, for every other decimal number.
    roundoff : float
        Numbers at most this large in both runs are equal, and so are two PSNRs at or above
        ``10 log10(1 / roundoff)`` dB (an MSE at round-off level, however many dB it prints as).
    """

    decibels: float = 0.0
    magnitude: float = 0.0
    fraction: float = 0.0
    other: float = 0.0
    roundoff: float = 0.0

    def __post_init__(self):
        for field in fields(self):
            value = getattr(self, field.name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not value >= 0
                or math.isinf(value)
            ):
                raise ToleranceError(
                    f"tolerance {field.name} must be a finite number >= 0, got {value!r}"
                )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in fields(cls))

    def updated(self, overrides: Mapping | None) -> "Tolerance":
        """This tolerance with some kinds replaced (a chapter's or a cell's declaration)."""
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ToleranceError(
                f"a tolerance is a mapping of {', '.join(self.names())} to numbers, got "
                f"{overrides!r}"
            )
        unknown = sorted(set(overrides) - set(self.names()))
        if unknown:
            raise ToleranceError(
                f"unknown tolerance kind(s) {', '.join(map(str, unknown))}; known: "
                f"{', '.join(self.names())}"
            )
        return replace(
            self,
            **{
                key: float(value)
                if isinstance(value, int) and not isinstance(value, bool)
                else value
                for key, value in overrides.items()
            },
        )

    def allows(self, kind: str, stored: float, new: float) -> bool:
        """Whether ``new`` reproduces ``stored`` for a number of this kind."""
        if stored == new or (math.isnan(stored) and math.isnan(new)):
            return True
        if not (math.isfinite(stored) and math.isfinite(new)):
            return False
        if max(abs(stored), abs(new)) <= self.roundoff:
            return True
        if kind == "decibels" and self.roundoff > 0 and min(stored, new) >= self.exact_decibels:
            return True
        difference = abs(stored - new)
        if kind in ("decibels", "fraction"):
            return difference <= getattr(self, kind) * (1 + 1e-9)
        return difference <= getattr(self, kind) * max(abs(stored), abs(new)) * (1 + 1e-9)

    @property
    def exact_decibels(self) -> float:
        """The PSNR of an MSE at the round-off floor: beyond it a reconstruction is exact."""
        return -10 * math.log10(self.roundoff) if self.roundoff > 0 else math.inf

    def describe(self, kind: str) -> str:
        value = getattr(self, kind)
        if kind == "decibels":
            return f"±{value:g} dB"
        if kind == "fraction":
            return f"±{value:g}"
        return f"±{100 * value:g}% ({kind})"


#: Tolerance of a bit-exact comparison (``gradcore check --exact`` uses plain nbval instead).
EXACT = Tolerance()


def kind_of(*contexts: str) -> str:
    """The kind of a number from the texts around it, most specific first ("other" if none says)."""
    for context in contexts:
        if context:
            for kind, pattern in KINDS:
                if pattern.search(context):
                    return kind
    return "other"


def line_kind(line: str, start: int, end: int, fallback: Sequence[str] = ()) -> str:
    """The kind of the number at ``line[start:end]``: the nearest announcing word to its left,
    else the first to its right, else the ``fallback`` contexts (a table's title)."""
    left = line[:start]
    best, where = None, -1
    for kind, pattern in KINDS:
        for match in pattern.finditer(left):
            if match.start() > where:
                best, where = kind, match.start()
    if best:
        return best
    right_kind = kind_of(line[end:])
    return right_kind if right_kind != "other" else kind_of(*fallback)


# ------------------------------------------------------------------------------------- comparison


@dataclass
class Difference:
    """One place where a rerun does not reproduce the committed output."""

    where: str
    stored: str
    new: str
    kind: str  # a number kind, "integer" or "text"
    allowed: str
    context: str = ""

    def __str__(self) -> str:
        head = (
            f"{self.where}: {self.kind} {self.stored!r} became {self.new!r} "
            f"(allowed: {self.allowed})"
        )
        return head + (f"\n    in: {self.context.strip()[:160]}" if self.context.strip() else "")


@dataclass
class Drift:
    """A number that moved within what was compared (for ``gradcore drift``)."""

    where: str
    kind: str
    stored: float
    new: float

    @property
    def size(self) -> float:
        """Absolute for decibels and fractions, relative otherwise."""
        difference = abs(self.stored - self.new)
        if self.kind in ("decibels", "fraction"):
            return difference
        scale = max(abs(self.stored), abs(self.new))
        return difference / scale if scale else 0.0


def _fold(text: str) -> str:
    return re.sub(r"-{2,}", "--", re.sub(r"\s+", " ", text)).strip()


def _pieces(text: str) -> tuple[list[str], list[re.Match]]:
    numbers = list(NUMBER.finditer(text))
    texts, last = [], 0
    for match in numbers:
        texts.append(text[last : match.start()])
        last = match.end()
    texts.append(text[last:])
    return texts, numbers


def _is_integer(token: str) -> bool:
    return not re.search(r"[.eE]", token)


def compare_text(
    stored: str,
    new: str,
    tolerance: Tolerance,
    where: str = "output",
    fallback: Sequence[str] = (),
    drifts: list | None = None,
) -> list[Difference]:
    """Compare two printed texts: text and integers exactly, decimals within ``tolerance``.

    Returns the differences (empty when ``new`` reproduces ``stored``); numbers that moved
    within the tolerance are appended to ``drifts`` when given.
    """
    if stored == new:
        return []
    stored_lines, new_lines = stored.split("\n"), new.split("\n")
    if len(stored_lines) != len(new_lines):
        return [
            Difference(
                where,
                f"{len(stored_lines)} lines",
                f"{len(new_lines)} lines",
                "text",
                "same layout",
                _first_difference(stored, new),
            )
        ]
    differences = []
    for number, (a, b) in enumerate(zip(stored_lines, new_lines), 1):
        differences += _compare_line(a, b, tolerance, f"{where}, line {number}", fallback, drifts)
    return differences


def _first_difference(stored: str, new: str) -> str:
    for a, b in zip(stored.split("\n"), new.split("\n")):
        if a != b:
            return f"committed: {a!r} / new: {b!r}"
    return ""


def _compare_line(
    stored: str,
    new: str,
    tolerance: Tolerance,
    where: str,
    fallback: Sequence[str],
    drifts: list | None,
) -> list[Difference]:
    if stored == new:
        return []
    texts_a, numbers_a = _pieces(stored)
    texts_b, numbers_b = _pieces(new)
    if len(numbers_a) != len(numbers_b) or any(
        _fold(x) != _fold(y) for x, y in zip(texts_a, texts_b)
    ):
        return [
            Difference(
                where, stored.strip(), new.strip(), "text", "identical text and number count"
            )
        ]
    differences = []
    for a, b in zip(numbers_a, numbers_b):
        token_a, token_b = a.group(), b.group()
        if token_a == token_b:
            continue
        if _is_integer(token_a) and _is_integer(token_b):
            differences.append(Difference(where, token_a, token_b, "integer", "exact", stored))
            continue
        kind = line_kind(stored, a.start(), a.end(), fallback)
        value_a, value_b = float(token_a), float(token_b)
        if tolerance.allows(kind, value_a, value_b):
            if drifts is not None:
                drifts.append(Drift(where, kind, value_a, value_b))
        else:
            allowed = tolerance.describe(kind) + _floor(tolerance, kind)
            differences.append(Difference(where, token_a, token_b, kind, allowed, stored))
    return differences


def _floor(tolerance: Tolerance, kind: str) -> str:
    if not tolerance.roundoff:
        return ""
    if kind == "decibels":
        return f", or both >= {tolerance.exact_decibels:g} dB (exact)"
    return f", or both <= {tolerance.roundoff:g}"


def compare_table(
    stored: Mapping,
    new: Mapping,
    tolerance: Tolerance,
    where: str = "table",
    drifts: list | None = None,
) -> list[Difference]:
    """Compare two gradcore tables (:data:`TABLE_MIME`) cell by cell.

    The JSON holds ``title``, ``header``, ``rows`` (printed cells), ``exact`` (column indices),
    ``rows_say_kind`` (a claims table: each row's claim says what its numbers measure) and, for a
    claims table, ``exact_rows`` (rows whose values an exact argument fixes).

    Columns listed in ``exact`` (a claims table's paper values and verdicts) compare as text;
    columns listed in ``derived`` (a claim's margin, computed from compared cells) are skipped;
    the other cells take the kind named by their own words, else their column header, else the
    title (a claims table: the claim), else the row label.
    """
    title = str(stored.get("title", ""))
    differences = compare_text(
        title, str(new.get("title", "")), tolerance, f"{where}, title", (), drifts
    )
    if stored.get("header") != new.get("header") or stored.get("exact") != new.get("exact"):
        return differences + [
            Difference(
                where, str(stored.get("header")), str(new.get("header")), "text", "same columns"
            )
        ]
    if stored.get("exact_rows", []) != new.get("exact_rows", []):
        differences.append(
            Difference(
                where,
                f"exact rows {stored.get('exact_rows', [])}",
                f"exact rows {new.get('exact_rows', [])}",
                "text",
                "same rows marked exact",
            )
        )
    rows_a, rows_b = stored.get("rows", []), new.get("rows", [])
    if len(rows_a) != len(rows_b):
        return differences + [
            Difference(where, f"{len(rows_a)} rows", f"{len(rows_b)} rows", "text", "same rows")
        ]
    header, exact = list(stored.get("header", [])), set(stored.get("exact", []))
    derived = set(stored.get("derived", []))
    for r, (row_a, row_b) in enumerate(zip(rows_a, rows_b)):
        label = str(row_a[0]) if row_a else ""
        for c, (cell_a, cell_b) in enumerate(zip(row_a, row_b)):
            if c in derived:
                continue
            place = (
                f"{where}, row {r + 1} ({label[:60]}), column {header[c] if c < len(header) else c}"
            )
            if c in exact:
                if cell_a != cell_b:
                    differences.append(
                        Difference(
                            place,
                            str(cell_a),
                            str(cell_b),
                            "text",
                            "exact (paper value or verdict)",
                        )
                    )
                continue
            # A cell's own words come first ("PSNR 17.2 < 18.4"), then its column and the title
            # (which name the metric); a row label names a thing ("cosine + TV"), a claim says what
            # it measures.
            row = label if c else ""
            column = header[c] if c < len(header) else ""
            contexts = (column, row, title) if stored.get("rows_say_kind") else (column, title, row)
            differences += _compare_line(
                str(cell_a), str(cell_b), tolerance, place, contexts, drifts
            )
        if len(row_a) != len(row_b):
            differences.append(
                Difference(
                    f"{where}, row {r + 1}",
                    f"{len(row_a)} cells",
                    f"{len(row_b)} cells",
                    "text",
                    "same columns",
                )
            )
    return differences


# ------------------------------------------------------------------------------ notebook outputs


#: Output fields never compared: volatile by nature, or images (nbval does not compare them either).
SKIPPED = (
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "transient",
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "application/vnd.jupyter.widget-view+json",
)


def _flatten(outputs: Iterable[Mapping], sanitize) -> dict[str, list]:
    """Output values by stream name or display type, as nbval groups them; a gradcore table's
    JSON stands for its text and HTML renderings, which are made from it."""
    grouped: dict[str, list] = {}
    for output in outputs:
        if output.get("output_type") == "stream":
            grouped.setdefault(output["name"], []).append(sanitize(output["text"]))
            continue
        data = dict(output.get("data", {}))
        if TABLE_MIME in data:
            data = {TABLE_MIME: data[TABLE_MIME]}
        for key, value in data.items():
            if key not in SKIPPED:
                grouped.setdefault(key, []).append(
                    value if key == TABLE_MIME else sanitize(_text(value))
                )
        if output.get("output_type") == "error":
            grouped.setdefault("error", []).append(f"{output.get('ename')}: {output.get('evalue')}")
    return grouped


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def compare_outputs(
    stored: Sequence[Mapping],
    new: Sequence[Mapping],
    tolerance: Tolerance,
    sanitize=lambda text: text,
    drifts: list | None = None,
) -> list[Difference]:
    """Compare one cell's committed outputs with a rerun's (both lists of nbformat outputs)."""
    grouped_a, grouped_b = _flatten(stored, sanitize), _flatten(new, sanitize)
    if set(grouped_a) != set(grouped_b):
        missing, extra = (
            sorted(set(grouped_a) - set(grouped_b)),
            sorted(set(grouped_b) - set(grouped_a)),
        )
        return [
            Difference(
                "outputs",
                f"fields {sorted(grouped_a)}",
                f"fields {sorted(grouped_b)}",
                "text",
                "the same output fields",
                f"missing {missing}, unexpected {extra}",
            )
        ]
    differences = []
    for key in grouped_a:
        values_a, values_b = grouped_a[key], grouped_b[key]
        if len(values_a) != len(values_b):
            differences.append(
                Difference(
                    key,
                    f"{len(values_a)} outputs",
                    f"{len(values_b)} outputs",
                    "text",
                    "same count",
                )
            )
            continue
        for index, (a, b) in enumerate(zip(values_a, values_b)):
            where = key if len(values_a) == 1 else f"{key} #{index + 1}"
            if key == TABLE_MIME:
                differences += compare_table(
                    a, b, tolerance, f"table {a.get('title', '')[:60]!r}", drifts
                )
            else:
                # A displayed object's first line is its title ("PSNR per attack and defense").
                title = (a.split("\n", 1)[0],) if key == "text/plain" else ()
                differences += compare_text(a, b, tolerance, where, title, drifts)
    return differences


def chapter_tolerance(notebook_metadata: Mapping, base: Tolerance | None = None) -> Tolerance:
    """The tolerance a chapter declares in its front matter (``gradcore: tolerance: {...}``)."""
    declared = (notebook_metadata.get("gradcore") or {}).get("tolerance")
    return (base or DEFAULT).updated(declared)


def cell_tolerance(chapter: Tolerance, cell_metadata: Mapping) -> Tolerance:
    """A cell's tolerance: the chapter's, with the kinds its metadata key ``tolerance``
    overrides."""
    return chapter.updated(cell_metadata.get("tolerance"))


def allowed_move(values: Sequence[float], kind: str, tolerance: Tolerance) -> float:
    """How far the values a claim compares may move on another machine, all together.

    The output check lets each printed decimal move by its kind's tolerance (absolute in dB and
    for fractions, relative otherwise); a claim that compares two measured values (an ordering)
    can see both move, towards each other. Values at the round-off floor do not move.
    """
    total = 0.0
    for value in values:
        size = abs(float(value))
        if not math.isfinite(size) or size <= tolerance.roundoff:
            continue
        if kind == "decibels" and size >= tolerance.exact_decibels:
            continue
        total += getattr(tolerance, kind) * (1.0 if kind in ("decibels", "fraction") else size)
    return total


def fragile_claims(table: Mapping, tolerance: Tolerance) -> list[dict]:
    """The rows of a claims table (its JSON) that hold by less than the drift the chapter allows.

    A verdict is compared exactly across machines, but the values behind it may move within
    the chapter's declared tolerance; a row whose margin is smaller than that move may flip on
    a reader's CPU. The values are those the row's verdict compares (``tested`` in the JSON);
    their kind is read from the claim's words, as the output check reads it. Rows without
    compared decimals (counts and rates compare exactly; categorical verdicts; rows not
    asserted) are not judged, nor are the rows the chapter marks exact (``exact_rows``: values
    an identity or an analytic rule fixes, which move by round-off only and whose bound allows
    for it; :meth:`gradcore.claims.Claims.add`). Returns ``{"claim", "margin", "allowed",
    "kind"}`` per fragile row.
    """
    header = list(table.get("header", []))
    tested = table.get("tested")
    if "holds" not in header or "margin" not in header or tested is None:
        return []
    claim, holds, margin = (header.index(name) for name in ("claim", "holds", "margin"))
    exact_rows = set(table.get("exact_rows", []))
    fragile = []
    for index, (row, values) in enumerate(zip(table.get("rows", []), tested)):
        if row[holds] != "yes" or not values or index in exact_rows:
            continue
        try:
            distance = float(row[margin])
        except ValueError:
            continue
        kind = kind_of(row[claim], table.get("title", ""))
        allowed = allowed_move(values, kind, tolerance)
        if math.isfinite(distance) and distance < allowed:
            fragile.append(
                {"claim": row[claim], "margin": distance, "allowed": allowed, "kind": kind}
            )
    return fragile


#: What a chapter gets when it declares nothing: round-off only. A chapter whose numbers drift
#: across machines must declare, from measurement, how far (README, "Testing").
DEFAULT = Tolerance(roundoff=1e-12)


# ------------------------------------------------------------------------------------ measuring


#: Accepts every number, so that a comparison records how far each one moved.
_ANYTHING = Tolerance(decibels=1e300, magnitude=1e300, fraction=1e300, other=1e300)


@dataclass
class DriftReport:
    """How far one rerun of the chapters moved from the committed notebooks."""

    label: str
    drifts: dict  # chapter -> [Drift]
    differences: (
        dict  # chapter -> [Difference]: text or integers that changed, and cells that failed
    )

    def largest(self) -> dict:
        """``{chapter: {kind: (size, Drift)}}``: the largest move per kind of number."""
        result: dict = {}
        for chapter, drifts in self.drifts.items():
            for drift in drifts:
                best = result.setdefault(chapter, {}).get(drift.kind)
                if best is None or drift.size > best[0]:
                    result[chapter][drift.kind] = (drift.size, drift)
        return result


def _code_cells(path) -> list:
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def measure_drift(
    reference_dir, rerun_dir, label: str = "", sanitize=lambda text: text
) -> DriftReport:
    """Compare every notebook of ``rerun_dir`` with the one of the same name in ``reference_dir``.

    Every decimal number is accepted and recorded with how far it moved; text and integers
    that changed are recorded as differences. ``sanitize`` is the check's own (timings).
    """
    report = DriftReport(label or str(rerun_dir), {}, {})
    for path in sorted(Path(rerun_dir).glob("*.ipynb")):
        reference = Path(reference_dir) / path.name
        if not reference.exists():
            continue
        chapter = path.stem
        drifts, differences = [], []
        stored_cells, new_cells = _code_cells(reference), _code_cells(path)
        if len(stored_cells) != len(new_cells):
            differences.append(
                Difference(
                    chapter,
                    f"{len(stored_cells)} cells",
                    f"{len(new_cells)} cells",
                    "text",
                    "same cells",
                )
            )
        for index, (a, b) in enumerate(zip(stored_cells, new_cells)):
            cell_drifts: list = []
            found = compare_outputs(a.outputs, b.outputs, _ANYTHING, sanitize, drifts=cell_drifts)
            for item in (*found, *cell_drifts):
                item.where = f"cell {index}: {item.where}"
            differences += found
            drifts += cell_drifts
        report.drifts[chapter], report.differences[chapter] = drifts, differences
    return report


def sanitizer(path) -> "callable":
    """The substitutions of an nbval sanitize file (``regex:``/``replace:`` pairs) as one
    function."""
    pairs, pattern = [], None
    for line in Path(path).read_text().splitlines():
        if line.startswith("regex: "):
            pattern = line[len("regex: ") :]
        elif line.startswith("replace: ") and pattern is not None:
            pairs.append((re.compile(pattern), line[len("replace: ") :]))
            pattern = None

    def apply(text: str) -> str:
        for compiled, replacement in pairs:
            text = compiled.sub(replacement, text)
        return text

    return apply
