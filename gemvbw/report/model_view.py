"""The per-token view of a model run: a table per bit width and the summary, as markdown or rich."""

from __future__ import annotations

from gemvbw.models import Preset, TokenSummary

CAVEAT = ("GEMVs only: attention over the KV cache, norms, rotary embeddings, the embedding lookup and "
          "sampling are not included, so tokens/s here is an upper bound on decode speed.")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def summary_lines(s: TokenSummary) -> list[str]:
    several = len({r.variant for r in s.rows}) > 1
    return [
        *(["per projection, the fastest variant measured (--kernel all): what an engine would pick"] if several else []),
        f"weight bytes per token: {s.bytes_per_token / 1e6:.1f} MB (sum over projections x count per token)",
        f"measured GEMV time per token: {1e3 * s.gemv_s_per_token:.2f} ms -> {s.tokens_per_s:.1f} tokens/s",
        f"bandwidth bound: {s.bytes_per_token / 1e6:.1f} MB / {s.read_gbps:.1f} GB/s (read roofline) = "
        f"{1e3 * s.bound_s_per_token:.2f} ms -> {s.bound_tokens_per_s:.1f} tokens/s",
        gap_line(s),
    ]


def gap_line(s: TokenSummary) -> str:
    gap_ms = 1e3 * (s.gemv_s_per_token - s.bound_s_per_token)
    if gap_ms >= 0:
        return f"the kernels reach {s.pct_of_bound:.0f}% of the bound ({gap_ms:.2f} ms per token above it)"
    # faster than the read roofline: some weights came from cache (small projections, warm runs)
    return (f"the kernels run {-gap_ms:.2f} ms per token faster than the bound ({s.pct_of_bound:.0f}%): some weights "
            "came from cache, not DRAM; trust cold runs of shapes larger than the last-level cache")


def markdown(preset: Preset, summaries: list[TokenSummary]) -> str:
    lines = [f"## Model {preset.name}: {preset.layers} layers, hidden {preset.hidden_size} ({preset.source})", ""]
    for s in summaries:
        lines.append(f"### w{s.bits}")
        lines.append("projection | shape | per token | W MiB | us/call | eff GB/s | %read | share of token | variant")
        lines.append("-----------|------:|----------:|------:|--------:|---------:|------:|---------------:|--------")
        for r in s.rows:
            p = r.projection
            lines.append(f"{p.name} | {p.M}x{p.K} | {r.per_token} | {_mib(r.logical_bytes)} | {r.best_avg_us:.1f} | "
                         f"{r.eff_gbps:.2f} | {r.pct_read:.1f} | {100 * r.share:.1f}% | {r.variant or '-'}")
        lines.append("")
        lines.extend(f"- {line}" for line in summary_lines(s))
        lines.append("")
    lines.append(f"Note: {CAVEAT}")
    return "\n".join(lines) + "\n"


def print_rich(console, preset: Preset, summaries: list[TokenSummary]) -> None:
    from rich import box
    from rich.table import Table

    console.rule(f"Model {preset.name}: {preset.layers} layers, hidden {preset.hidden_size}")
    for s in summaries:
        table = Table(title=f"w{s.bits}: per projection", title_justify="left", box=box.SIMPLE_HEAD,
                      padding=(0, 0, 0, 1), pad_edge=False)
        # (rich renders any justify it does not know as "left", and pad_edge=None as False: equivalent mutants)
        for col in ("projection", "shape", "per tok", "W MiB", "us/call", "eff GB/s", "%read", "share", "variant"):
            table.add_column(col, justify="left" if col == "projection" else "right")
        for r in s.rows:
            p = r.projection
            table.add_row(p.name, f"{p.M}x{p.K}", str(r.per_token), _mib(r.logical_bytes), f"{r.best_avg_us:.1f}",
                          f"{r.eff_gbps:.2f}", f"{r.pct_read:.1f}", f"{100 * r.share:.1f}%", r.variant or "-")
        console.print(table)
        for line in summary_lines(s):
            console.print(f"  {line}", highlight=False)
    # (CAVEAT holds nothing rich would highlight, and rich reads style names in any case: mutants of this line
    # print the same)
    console.print(CAVEAT, style="yellow", highlight=False)
