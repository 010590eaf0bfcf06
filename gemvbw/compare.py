"""Matching results of two runs: the same shape, width, variant and activation type, side by side.

Works on the JSON form (schema gemvbw.sweep/1), so a run can be compared with a
file written on another machine or by another version.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemvbw import metrics

# settings that change what is measured; a difference is marked in any comparison
SETTING_KEYS = ("M", "K", "block", "threads", "iters", "reps", "flush_mib", "meta_bytes", "act", "kernel", "seed")
SYSTEM_KEYS = ("cpu", "machine", "affinity", "numba", "llvmlite", "numpy", "python", "gemvbw", "threading_layer")


class MalformedResult(ValueError):
    """A result file whose results are not what gemvbw writes."""


def result_key(r: dict, by_width: bool) -> tuple:
    """What matches a result across runs; ``by_width``: runs that chose their variants (--kernel auto) are
    matched by shape and width whatever each chose (a choice within the noise may differ between runs)."""
    return (r["M"], r["K"], r["bits"], r.get("block"), r.get("act", "f32"), "auto" if by_width else r.get("variant"))


def check_results(doc: dict, label: str) -> None:
    """Every result a mapping with integer M, K, bits and numeric eff_gbps and best_avg_us."""
    results = doc.get("results", [])
    if not isinstance(results, list):
        raise MalformedResult(f"{label}: 'results' is {type(results).__name__}, not a list")
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            raise MalformedResult(f"{label}: results[{i}] is {type(r).__name__}, not a mapping")
        for key, kinds in (("M", int), ("K", int), ("bits", int), ("eff_gbps", (int, float)),
                           ("best_avg_us", (int, float))):
            if not isinstance(r.get(key), kinds) or isinstance(r.get(key), bool):
                raise MalformedResult(f"{label}: results[{i}].{key} is {r.get(key)!r}, not a number gemvbw writes")
    for section in ("settings", "system"):
        if not isinstance(doc.get(section, {}), dict):
            raise MalformedResult(f"{label}: '{section}' is not a mapping")


@dataclass(frozen=True)
class Row:
    key: tuple
    eff_gbps: tuple[float | None, ...]  # one per run, None where that run lacks the result
    best_avg_us: tuple[float | None, ...]

    @property
    def ratios(self) -> tuple[float | None, ...]:
        """eff GB/s of each run divided by the first run's (None where either is missing)."""
        base = self.eff_gbps[0]
        return tuple(None if base is None or v is None else metrics.ratio(v, base) for v in self.eff_gbps)

    def to_dict(self) -> dict:
        M, K, bits, block, act, variant = self.key
        return {"M": M, "K": K, "bits": bits, "block": block, "act": act, "variant": variant,
                "eff_gbps": list(self.eff_gbps), "best_avg_us": list(self.best_avg_us), "ratio_to_first": list(self.ratios)}


@dataclass(frozen=True)
class Comparison:
    labels: tuple[str, ...]
    rows: tuple[Row, ...]
    differences: tuple[str, ...]  # "settings.threads: 2 vs 1", "system.cpu: ...", ...

    def to_dict(self) -> dict:
        return {"runs": list(self.labels), "rows": [r.to_dict() for r in self.rows],
                "differences": list(self.differences)}


def differences(docs: list[dict]) -> list[str]:
    out = []
    for section, keys in (("settings", SETTING_KEYS), ("system", SYSTEM_KEYS)):
        for key in keys:
            values = [d.get(section, {}).get(key) for d in docs]
            if any(v != values[0] for v in values[1:]):
                out.append(f"{section}.{key}: " + " vs ".join(str(v) for v in values))
    return out


def compare(docs: list[dict], labels: list[str]) -> Comparison:
    """Rows in the order results first appear; every run's figure for each (shape, width, variant)."""
    keys: list[tuple] = []
    tables = []
    by_width = all(isinstance(d.get("settings"), dict) and d["settings"].get("kernel") == "auto" for d in docs)
    for doc, label in zip(docs, labels):
        check_results(doc, label)
        table = {result_key(r, by_width): r for r in doc.get("results", [])}
        tables.append(table)
        keys.extend(k for k in table if k not in keys)
    rows = []
    for k in keys:
        rows.append(Row(
            k,
            tuple(t[k]["eff_gbps"] if k in t else None for t in tables),
            tuple(t[k]["best_avg_us"] if k in t else None for t in tables),
        ))
    chosen = []
    for k in keys:  # --kernel auto chose differently in some run: said, since it is not the same kernel
        names = [t[k].get("variant") if k in t else None for t in tables]
        if by_width and len({n for n in names if n is not None}) > 1:
            chosen.append(f"variant w{k[2]} {k[0]}x{k[1]}: " + " vs ".join(str(n) for n in names))
    return Comparison(tuple(labels), tuple(rows), tuple(differences(docs) + chosen))
