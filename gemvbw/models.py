"""Model presets (configs/*.toml) and what a model's GEMVs mean per token.

Every layer of a decoder has the same projection shapes, so each distinct (M, K) is
measured once per bit width and multiplied by how often it runs per token. The
result is an upper bound on decode speed from the GEMVs alone: attention over the
KV cache, norms, rotary embeddings, the embedding lookup and sampling are not in it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from gemvbw import metrics

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib


class PresetError(ValueError):
    """A preset that cannot be found or does not hold what a model needs."""


@dataclass(frozen=True)
class Projection:
    name: str
    M: int
    K: int
    count: int = 1
    scope: str = "layer"  # "layer": runs count times in every layer; "token": count times per token

    def per_token(self, layers: int) -> int:
        return self.count * (layers if self.scope == "layer" else 1)


@dataclass(frozen=True)
class Preset:
    name: str
    source: str
    hidden_size: int
    layers: int
    vocab_size: int
    tie_word_embeddings: bool
    projections: tuple[Projection, ...]
    published_params: float | None = None
    other_params_per_layer: int = 0
    other_params: int = 0
    path: str = ""

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Distinct (M, K), in order of first appearance: each is measured once."""
        out: list[tuple[int, int]] = []
        for p in self.projections:
            if (p.M, p.K) not in out:
                out.append((p.M, p.K))
        return out

    def param_count(self) -> int:
        """Parameters computed from the shapes: every GEMV, the embedding unless tied to lm_head, and the rest."""
        gemv = sum(p.M * p.K * p.per_token(self.layers) for p in self.projections)
        embedding = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return gemv + embedding + self.other_params_per_layer * self.layers + self.other_params


def config_dirs() -> list[Path]:
    user = os.environ.get("GEMVBW_CONFIG_DIR") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"), "gemvbw")
    return [Path(user)]


def builtin_dir() -> Path:
    """Installed: gemvbw/configs (the wheel maps configs/ there); in a checkout: the top-level configs/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if candidate.is_dir():
            return candidate
    return here / "configs"


def builtin_presets() -> dict[str, Path]:
    return {f.stem.lower(): f for f in sorted(builtin_dir().glob("*.toml"))}  # a missing directory globs nothing


def available() -> dict[str, Path]:
    """Preset name -> file: the shipped ones, then the user's (which win on a name clash)."""
    found = builtin_presets()
    for d in config_dirs():
        if d.is_dir():
            for f in sorted(d.glob("*.toml")):
                found[f.stem.lower()] = f
    return found


def find(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or os.sep in name_or_path:
        if not p.is_file():
            raise PresetError(f"no preset file {name_or_path!r}")
        return p
    presets = available()
    key = name_or_path.lower().removesuffix(".toml")
    if key not in presets:
        raise PresetError(f"no preset named {name_or_path!r}; known: {', '.join(sorted(presets))} "
                          "(or give a path to a .toml file)")
    return presets[key]


def _whole(table: dict, key: str, path, where: str = "", default=None) -> int:
    """An integer field as TOML wrote it: 64.9 or "64" is an error, not silently 64."""
    value = table.get(key, default)
    if type(value) is not int:
        raise PresetError(f"{path}: {where}{key} = {value!r} must be a whole number (e.g. {key} = 4096); "
                          "see configs/README.md")
    return value


def load(name_or_path: str) -> Preset:
    path = find(name_or_path)
    try:
        # (an explicit codec, whatever the locale; "UTF-8" would name the same one)
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PresetError(f"{path}: not a readable UTF-8 TOML file ({exc})") from None
    try:
        if not isinstance(doc.get("projection"), list) or not all(isinstance(p, dict) for p in doc["projection"]):
            raise PresetError(f"{path}: needs [[projection]] tables; see configs/README.md")
        projections = tuple(
            Projection(str(p["name"]), _whole(p, "M", path, f"projection {p['name']!r}: "),
                       _whole(p, "K", path, f"projection {p['name']!r}: "),
                       _whole(p, "count", path, f"projection {p['name']!r}: ", 1), str(p.get("scope", "layer")))
            for p in doc["projection"]
        )
        preset = Preset(
            name=str(doc["name"]), source=str(doc.get("source", "")), hidden_size=_whole(doc, "hidden_size", path),
            layers=_whole(doc, "layers", path), vocab_size=_whole(doc, "vocab_size", path, "", 0),
            tie_word_embeddings=bool(doc.get("tie_word_embeddings")), projections=projections,
            published_params=doc.get("published_params"),
            other_params_per_layer=_whole(doc, "other_params_per_layer", path, "", 0),
            other_params=_whole(doc, "other_params", path, "", 0), path=str(path),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, PresetError):
            raise
        raise PresetError(f"{path}: missing or malformed field ({exc}); see configs/README.md") from None
    bad = [p.name for p in projections if p.M <= 0 or p.K <= 0 or p.count <= 0 or p.scope not in ("layer", "token")]
    if bad or preset.layers <= 0 or not projections:
        raise PresetError(f"{path}: projections need positive M, K, count and scope 'layer' or 'token' "
                          f"(check {', '.join(bad) or ('layers' if preset.layers <= 0 else 'the [[projection]] tables')})")
    return preset


@dataclass(frozen=True)
class ProjectionRow:
    projection: Projection
    per_token: int
    logical_bytes: int  # one matrix
    best_avg_us: float  # one call
    eff_gbps: float
    pct_read: float
    share: float  # of the token's GEMV time
    variant: str | None = None  # the kernel variant whose figure this is


@dataclass(frozen=True)
class TokenSummary:
    bits: int
    bytes_per_token: int
    gemv_s_per_token: float
    bound_s_per_token: float
    read_gbps: float
    rows: tuple[ProjectionRow, ...]

    @property
    def tokens_per_s(self) -> float:
        return metrics.tokens_per_s(self.gemv_s_per_token)

    @property
    def bound_tokens_per_s(self) -> float:
        return metrics.tokens_per_s(self.bound_s_per_token)

    @property
    def pct_of_bound(self) -> float:
        """How close the measured kernels come to the bandwidth bound (100 = at the bound)."""
        return 100 * metrics.ratio(self.bound_s_per_token, self.gemv_s_per_token)

    def to_dict(self) -> dict:
        return {
            "bits": self.bits, "bytes_per_token": self.bytes_per_token, "gemv_ms_per_token": 1e3 * self.gemv_s_per_token,
            "tokens_per_s": self.tokens_per_s, "read_gbps": self.read_gbps,
            "bound_ms_per_token": 1e3 * self.bound_s_per_token, "bound_tokens_per_s": self.bound_tokens_per_s,
            "pct_of_bound": self.pct_of_bound,
            "projections": [{
                "name": r.projection.name, "M": r.projection.M, "K": r.projection.K, "per_token": r.per_token,
                "logical_bytes": r.logical_bytes, "best_avg_us": r.best_avg_us, "eff_gbps": r.eff_gbps,
                "pct_read": r.pct_read, "share": r.share, "variant": r.variant,
            } for r in self.rows],
        }


def token_summary(preset: Preset, bits: int, measured: dict[tuple[int, int], tuple],
                  read_gbps: float) -> TokenSummary:
    """Per-token figures from one measurement per distinct shape: measured[(M, K)] = (logical bytes, best_avg_us)
    or (logical bytes, best_avg_us, variant)."""
    parts = []
    for p in preset.projections:
        lb, us, *variant = measured[(p.M, p.K)]
        parts.append((p, p.per_token(preset.layers), lb, us, variant[0] if variant else None))
    total_s = sum(n * us / 1e6 for _, n, _, us, _ in parts)
    total_bytes = sum(n * lb for _, n, lb, _, _ in parts)
    rows = tuple(ProjectionRow(
        p, n, lb, us, metrics.eff_gbps(lb, us / 1e6), metrics.pct_read(metrics.eff_gbps(lb, us / 1e6), read_gbps),
        metrics.ratio(n * us / 1e6, total_s), v,
    ) for p, n, lb, us, v in parts)
    return TokenSummary(bits, total_bytes, total_s, metrics.bound_seconds(total_bytes, read_gbps), read_gbps, rows)
