"""What the Fed-PNE benchmarks share: markdown tables."""

from __future__ import annotations


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    """A markdown table under a ``###`` title, columns padded to equal width."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"

    out = [f"### {title}", "", line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"
