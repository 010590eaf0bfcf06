"""Model presets, per-token arithmetic, multi-shape sweeps, compare and plot."""

import json
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

from gemvbw import metrics, models
from gemvbw.cli import main

PRESETS = ["llama-3-8b", "llama-3.2-1b", "qwen3-0.6b", "qwen3-8b", "mistral-7b", "phi-3-mini", "tinyllama-1.1b"]

TINY_MODEL = """
name = "Tiny"
source = "made up for the tests"
hidden_size = 128
layers = 3
vocab_size = 512
tie_word_embeddings = true
published_params = 1
[[projection]]
name = "qkv"
M = 384
K = 128
[[projection]]
name = "o"
M = 128
K = 128
count = 2
[[projection]]
name = "head"
M = 512
K = 128
scope = "token"
"""


def run(args, **kw):
    return CliRunner().invoke(main, args, catch_exceptions=False, **kw)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_parses_and_counts_its_parameters(name):
    p = models.load(name)
    assert p.source.startswith("https://huggingface.co/")
    assert p.layers > 0 and p.projections[-1].name == "lm_head" and p.projections[-1].scope == "token"
    assert abs(p.param_count() / p.published_params - 1) < 0.02, (p.param_count(), p.published_params)


def test_grouped_query_attention_shapes():
    p = models.load("llama-3-8b")
    shapes = {q.name: (q.M, q.K) for q in p.projections}
    assert shapes["k_proj"] == shapes["v_proj"] == (1024, 4096)  # 8 KV heads x 128
    assert shapes["q_proj"] == (4096, 4096) and shapes["down_proj"] == (4096, 14336)
    assert p.shapes == [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096)]
    q = {x.name: (x.M, x.K) for x in models.load("qwen3-0.6b").projections}
    assert q["q_proj"] == (2048, 1024) and q["o_proj"] == (1024, 2048)  # head_dim 128 x 16 heads != hidden 1024


def test_every_shipped_preset_is_listed():
    assert set(PRESETS) <= set(models.available())


def test_user_preset_by_path_and_by_name(tmp_path, monkeypatch):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    assert models.load(str(path)).name == "Tiny"
    monkeypatch.setenv("GEMVBW_CONFIG_DIR", str(tmp_path))
    assert models.load("TINY").name == "Tiny"


@pytest.mark.parametrize("text,fragment", [("name = 'x'", r"needs \[\[projection\]\] tables"),
                                           (TINY_MODEL.replace("M = 128\nK = 128\ncount = 2", "M = 0\nK = 128"),
                                            "positive M, K"),
                                           ("not toml [", "bad.toml")])
def test_bad_preset(tmp_path, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(models.PresetError, match=fragment):
        models.load(str(path))
    with pytest.raises(models.PresetError, match="no preset named"):
        models.load("no-such-model")


def test_per_token_arithmetic_by_hand(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    p = models.load(str(path))
    # made-up measurements: (logical bytes, best_avg_us) per distinct shape
    measured = {(384, 128): (30_000, 10.0), (128, 128): (10_000, 4.0), (512, 128): (40_000, 20.0)}
    s = models.token_summary(p, 4, measured, read_gbps=10.0)
    # per token: qkv 3 calls, o 2 x 3 = 6 calls, head 1 call
    assert [r.per_token for r in s.rows] == [3, 6, 1]
    assert s.bytes_per_token == 3 * 30_000 + 6 * 10_000 + 40_000 == 190_000
    assert s.gemv_s_per_token == pytest.approx((3 * 10 + 6 * 4 + 20) * 1e-6)  # 74 us
    assert s.tokens_per_s == pytest.approx(1 / 74e-6)
    assert s.bound_s_per_token == pytest.approx(190_000 / 10e9)  # 19 us
    assert s.pct_of_bound == pytest.approx(100 * 19 / 74)
    assert [r.share for r in s.rows] == pytest.approx([30 / 74, 24 / 74, 20 / 74])
    assert s.rows[0].eff_gbps == pytest.approx(3.0, rel=1e-12)  # 30,000 bytes in 10 us
    assert [r.pct_read for r in s.rows] == pytest.approx([30.0, 25.0, 20.0], rel=1e-12)  # of 10 GB/s
    assert [r.share for r in s.rows] == pytest.approx([30 / 74, 24 / 74, 20 / 74], rel=1e-12)


def test_model_command_end_to_end(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    md, js = tmp_path / "m.md", tmp_path / "m.json"
    res = run(["model", "--config", str(path), "--bits", "4,2", "--iters", "3", "--reps", "1", "--flush-mib", "1",
               "--threads", "1", "--format", "mnn", "--md", str(md), "--json", str(js)])
    assert res.exit_code == 0, res.output
    assert "## Model Tiny: 3 layers" in res.stdout and "### w4" in res.stdout and "### w2" in res.stdout
    assert "upper bound on decode speed" in res.stdout
    doc = json.loads(js.read_text())
    assert [s["bits"] for s in doc["model"]["per_bits"]] == [4, 2]
    s = doc["model"]["per_bits"][0]
    measured = {(r["M"], r["K"]): r for r in doc["results"] if r["bits"] == 4}
    assert len(measured) == 3  # each distinct shape measured once
    expected_ms = (3 * measured[(384, 128)]["best_avg_us"] + 6 * measured[(128, 128)]["best_avg_us"]
                   + measured[(512, 128)]["best_avg_us"]) / 1e3
    assert s["gemv_ms_per_token"] == pytest.approx(expected_ms)
    assert s["bound_ms_per_token"] == pytest.approx(1e3 * s["bytes_per_token"] / (doc["roofline"]["read_gbps"] * 1e9))
    assert "### w4" in md.read_text() and "| type | thr |" in md.read_text()


def test_model_needs_a_name_or_config():
    res = run(["model"])
    assert res.exit_code == 2 and "qwen3-0.6b" in res.stderr
    res = run(["model", "nope"])
    assert res.exit_code == 2 and "no preset named 'nope'" in res.stderr


SWEEP = ["sweep", "--bits", "4", "--iters", "2", "--reps", "1", "--flush-mib", "0", "--threads", "1"]


def test_sweep_several_shapes_one_table():
    res = run(SWEEP + ["--shape", "64x256", "--shape", "32x128", "--format", "mnn"])
    assert res.exit_code == 0, res.output
    assert "shape | type | thr | us/iter" in res.stdout
    rows = [l for l in res.stdout.splitlines() if l.startswith(("64x256 |", "32x128 |"))]
    assert [r.split(" |")[0] for r in rows][:2] == ["64x256", "32x128"]


def test_sweep_shapes_from_preset(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    res = run(SWEEP + ["--shapes-from", str(path), "--format", "json"])
    doc = json.loads(res.stdout)
    assert [(r["M"], r["K"]) for r in doc["results"]] == [(384, 128), (128, 128), (512, 128)]
    assert doc["settings"]["shapes"] == [[384, 128], [128, 128], [512, 128]]


@pytest.mark.parametrize("args,fragment", [(["--shape", "10"], "--shape: '10' is not MxK"),
                                           (["--shape", "0x5"], "is not MxK"),
                                           (["--shape", "8x64", "--M", "8"], "not both"),
                                           (["--shape", "8x64", "--shape", "8x64"], "listed twice"),
                                           (["--shapes-from", "nope"], "--shapes-from: no preset named")])
def test_bad_shapes(args, fragment):
    res = run(SWEEP + args)
    assert res.exit_code == 2 and fragment in res.stderr


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    a, b = d / "a.json", d / "b.json"
    common = ["sweep", "--M", "32", "--K", "128", "--reps", "1", "--flush-mib", "0", "--threads", "1", "--format", "json"]
    assert run(common + ["--bits", "4,2", "--iters", "2", "--json", str(a)]).exit_code == 0
    assert run(common + ["--bits", "4", "--iters", "3", "--json", str(b)]).exit_code == 0
    return a, b


def test_compare_matches_and_marks_differences(two_runs):
    a, b = two_runs
    res = run(["compare", str(a), str(b), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {r["bits"]: r for r in doc["rows"]}
    ea, eb = (json.loads(p.read_text())["results"][0]["eff_gbps"] for p in (a, b))
    assert rows[4]["eff_gbps"] == [ea, eb]
    assert rows[4]["ratio_to_first"] == [pytest.approx(1.0), pytest.approx(eb / ea)]
    assert rows[2]["eff_gbps"][1] is None  # w2 only in the first run
    assert "settings.iters: 2 vs 3" in doc["differences"]
    res = run(["compare", str(a), str(b), "--format", "mnn"])
    assert "! differs: settings.iters: 2 vs 3" in res.stdout and "[1]/[0]" in res.stdout


def test_compare_errors(two_runs, tmp_path):
    a, _ = two_runs
    assert run(["compare", str(a)]).exit_code == 2
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    res = run(["compare", str(a), str(bad)])
    assert res.exit_code == 2 and "is not a gemvbw.sweep/1 result" in res.stderr


def test_plot_writes_a_png(two_runs, tmp_path):
    pytest.importorskip("matplotlib")
    a, _ = two_runs
    out = tmp_path / "roofline.png"
    res = run(["plot", str(a), "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_of_a_result_with_nothing_above_zero_has_an_axis(two_runs, tmp_path):
    """No roofline and no rows (an interrupted run keeps such a file): a chart, without matplotlib's
    warning about an empty y range (made an error here)."""
    pytest.importorskip("matplotlib")
    a, _ = two_runs
    doc = json.loads(a.read_text())
    doc["roofline"], doc["results"] = {}, []
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(doc))
    out = tmp_path / "empty.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = run(["plot", str(empty), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(two_runs, tmp_path):
    a, _ = two_runs
    code = ("import sys; sys.modules['matplotlib'] = None; from gemvbw.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "plot", str(a), "-o", str(tmp_path / "x.png")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "pip install 'gemvbw[plot]'" in res.stderr


@pytest.mark.parametrize("act", ["i8", "f32"])
def test_model_command_takes_act(tmp_path, act):
    from gemvbw import kernels

    if act == "i8" and not kernels.variants(4, "i8"):
        pytest.skip("no int8 tier is usable on this CPU and compiler target (see gemvbw info)")
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    js = tmp_path / "m.json"
    res = run(["model", "--config", str(path), "--bits", "4", "--iters", "2", "--reps", "1", "--flush-mib", "1",
               "--threads", "1", "--act", act, "--format", "mnn", "--json", str(js)])
    assert res.exit_code == 0, res.output
    doc = json.loads(js.read_text())
    assert doc["settings"]["act"] == act and {r["act"] for r in doc["results"]} == {act}
    res = run(["model", "--config", str(path), "--act", "i4"])
    assert res.exit_code == 2 and "--act" in res.output


def test_model_kernel_all_uses_the_fastest_variant_of_each_projection():
    from gemvbw.cli import fastest_per_shape
    from gemvbw.results import SweepRecord

    class R:  # the fields fastest_per_shape reads
        def __init__(self, M, K, us, variant, bits=4):
            self.M, self.K, self.best_avg_us, self.variant, self.bits, self.logical_bytes = M, K, us, variant, bits, 100

    rec = SweepRecord(system={}, settings={})
    rec.results = [R(8, 8, 5.0, "ref"), R(8, 8, 2.0, "rows4"), R(8, 8, 3.0, "packed-4x2-x"), R(16, 8, 9.0, "ref"),
                   R(8, 8, 1.0, "ref", bits=2)]
    assert fastest_per_shape(rec, 4) == {(8, 8): (100, 2.0, "rows4"), (16, 8): (100, 9.0, "ref")}


def test_compare_of_auto_runs_matches_by_width_and_says_when_the_choice_differed():
    from gemvbw.compare import compare

    def doc(variant, gbps):
        return {"settings": {"kernel": "auto"}, "system": {},
                "results": [{"M": 8, "K": 64, "bits": 2, "block": 64, "act": "i8", "variant": variant,
                             "eff_gbps": gbps, "best_avg_us": 1.0}]}

    cmp = compare([doc("packed-4x2-a", 10.0), doc("packed-4x2-b", 12.0)], ["first", "now"])
    assert [r.ratios for r in cmp.rows] == [(1.0, 1.2)]
    assert cmp.differences == ("variant w2 8x64: packed-4x2-a vs packed-4x2-b",)


def test_parameter_counts_by_hand():
    # Llama-3.2-1B, tied embeddings: 16 x (2 x 2048^2 + 2 x 512x2048 + 3 x 8192x2048) + 128256x2048 (lm_head)
    # + 16 x 4096 (two RMSNorms per layer) + 2048 (final norm)
    assert models.load("llama-3.2-1b").param_count() == 16 * 60_817_408 + 262_668_288 + 65_536 + 2048 == 1_235_814_400
    # Llama-3-8B, untied: the embedding counts again beside lm_head
    assert models.load("llama-3-8b").param_count() == 32 * 218_103_808 + 2 * 525_336_576 + 32 * 8192 + 4096 \
        == 8_030_261_248


def test_where_presets_are_looked_for(monkeypatch, tmp_path):
    from pathlib import Path

    monkeypatch.delenv("GEMVBW_CONFIG_DIR", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.config_dirs() == [tmp_path / "home" / ".config" / "gemvbw"]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert models.config_dirs() == [tmp_path / "xdg" / "gemvbw"]
    monkeypatch.setenv("GEMVBW_CONFIG_DIR", str(tmp_path / "mine"))
    assert models.config_dirs() == [tmp_path / "mine"]
    shipped = Path(models.__file__).resolve().parent.parent / "configs"  # a checkout: the top-level configs/
    assert models.builtin_dir() in (shipped, Path(models.__file__).resolve().parent / "configs")
    assert sorted(models.builtin_presets()) == sorted(p.stem.lower() for p in models.builtin_dir().glob("*.toml"))
    assert "llama-3-8b" in models.builtin_presets()


def test_a_preset_is_read_field_by_field(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL.replace("published_params = 1",
                                       "published_params = 1\nother_params_per_layer = 7\nother_params = 11"))
    assert models.load(str(path)) == models.Preset(
        name="Tiny", source="made up for the tests", hidden_size=128, layers=3, vocab_size=512,
        tie_word_embeddings=True, published_params=1, other_params_per_layer=7, other_params=11, path=str(path),
        projections=(models.Projection("qkv", 384, 128, 1, "layer"), models.Projection("o", 128, 128, 2, "layer"),
                     models.Projection("head", 512, 128, 1, "token")))
    # what may be left out, and what it means then
    bare = tmp_path / "bare.toml"
    bare.write_text('name = "Bare"\nhidden_size = 64\nlayers = 1\n[[projection]]\nname = "p"\nM = 1\nK = 1\n')
    assert models.load(str(bare)) == models.Preset(
        name="Bare", source="", hidden_size=64, layers=1, vocab_size=0, tie_word_embeddings=False,
        projections=(models.Projection("p", 1, 1, 1, "layer"),), published_params=None, other_params_per_layer=0,
        other_params=0, path=str(bare))


BARE = 'name = "Bare"\nhidden_size = 64\nlayers = {layers}\n{more}'
ONE = '[[projection]]\nname = "{name}"\nM = {M}\nK = {K}\ncount = {count}\nscope = "{scope}"\n'


def _projection(name="p", M=1, K=1, count=1, scope="layer"):
    return ONE.format(name=name, M=M, K=K, count=count, scope=scope)


@pytest.mark.parametrize("more,layers,message", [
    (_projection(M=0), 1, "projections need positive M, K, count and scope 'layer' or 'token' (check p)"),
    (_projection(K=0), 1, "projections need positive M, K, count and scope 'layer' or 'token' (check p)"),
    (_projection(count=0), 1, "projections need positive M, K, count and scope 'layer' or 'token' (check p)"),
    (_projection(scope="model"), 1, "projections need positive M, K, count and scope 'layer' or 'token' (check p)"),
    (_projection("a", M=-1) + _projection("b") + _projection("c", K=-2), 1,
     "projections need positive M, K, count and scope 'layer' or 'token' (check a, c)"),
    (_projection(), 0, "projections need positive M, K, count and scope 'layer' or 'token' (check layers)"),
    ("projection = []\n", 1,
     "projections need positive M, K, count and scope 'layer' or 'token' (check the [[projection]] tables)"),
    (_projection(M=64.5), 1, "projection 'p': M = 64.5 must be a whole number (e.g. M = 4096); see configs/README.md"),
    (_projection(K='"64"'), 1, "projection 'p': K = '64' must be a whole number (e.g. K = 4096); see configs/README.md"),
    (_projection(count=1.0), 1,
     "projection 'p': count = 1.0 must be a whole number (e.g. count = 4096); see configs/README.md"),
    ("vocab_size = 1.5\n" + _projection(), 1,
     "vocab_size = 1.5 must be a whole number (e.g. vocab_size = 4096); see configs/README.md"),
    ("other_params = true\n" + _projection(), 1,
     "other_params = True must be a whole number (e.g. other_params = 4096); see configs/README.md"),
    ("other_params_per_layer = 'x'\n" + _projection(), 1,
     "other_params_per_layer = 'x' must be a whole number (e.g. other_params_per_layer = 4096); see configs/README.md"),
    ("[[projection]]\nM = 1\nK = 1\n", 1, "missing or malformed field ('name'); see configs/README.md"),
])
def test_a_malformed_preset_is_named_whole(tmp_path, more, layers, message):
    path = tmp_path / "bad.toml"
    path.write_text(BARE.format(layers=layers, more=more))
    with pytest.raises(models.PresetError) as err:
        models.load(str(path))
    assert str(err.value) == f"{path}: {message}"


def test_preset_fields_at_their_bounds_load(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text(BARE.format(layers=1, more=_projection(M=1, K=1, count=1, scope="token")))
    assert models.load(str(path)).projections == (models.Projection("p", 1, 1, 1, "token"),)
    path.write_text('name = "N"\nhidden_size = 1.0\nlayers = 1\n' + _projection())
    with pytest.raises(models.PresetError) as err:
        models.load(str(path))
    assert str(err.value) == (f"{path}: hidden_size = 1.0 must be a whole number (e.g. hidden_size = 4096); "
                              "see configs/README.md")
    path.write_text('name = "N"\nhidden_size = 1\nlayers = 2.0\n' + _projection())
    with pytest.raises(models.PresetError, match=r"edge.toml: layers = 2.0 must be a whole number"):
        models.load(str(path))


def test_a_preset_that_is_not_utf8_toml_is_named(tmp_path):
    path = tmp_path / "latin.toml"
    path.write_bytes('name = "caf\u00e9"\n'.encode("latin-1"))
    with pytest.raises(models.PresetError) as err:
        models.load(str(path))
    assert str(err.value).startswith(f"{path}: not a readable UTF-8 TOML file (")
    path.write_bytes('name = "caf\u00e9"\nhidden_size = 1\nlayers = 1\n'.encode() + _projection().encode())
    assert models.load(str(path)).name == "caf\u00e9"  # read as UTF-8 whatever the locale says


def test_a_preset_is_found_by_path_or_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMVBW_CONFIG_DIR", str(tmp_path))
    (tmp_path / "tiny.toml").write_text(TINY_MODEL)
    monkeypatch.chdir(tmp_path)
    assert models.find("tiny.toml") == models.Path("tiny.toml")  # a .toml name is a path, even without a slash
    assert models.find("TINY.TOML") == tmp_path / "tiny.toml"  # not ".toml": a name, case and suffix ignored
    assert models.find("Tiny") == tmp_path / "tiny.toml"
    for missing in ("nope.toml", "sub/tiny"):  # a slash makes a path too
        with pytest.raises(models.PresetError) as err:
            models.find(missing)
        assert str(err.value) == f"no preset file {missing!r}"
    with pytest.raises(models.PresetError) as err:
        models.find("nope")
    assert str(err.value) == (f"no preset named 'nope'; known: {', '.join(sorted(models.available()))} "
                              "(or give a path to a .toml file)")


def test_shipped_presets_are_looked_for_beside_the_package_then_above_it(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "gemvbw"
    pkg.mkdir(parents=True)
    monkeypatch.setattr(models, "__file__", str(pkg / "models.py"))
    assert models.builtin_dir() == pkg / "configs" and models.builtin_presets() == {}  # neither exists
    (tmp_path / "site" / "configs").mkdir()
    assert models.builtin_dir() == tmp_path / "site" / "configs"  # a checkout: the top-level configs/
    (pkg / "configs").mkdir()
    (pkg / "configs" / "Small.toml").write_text(TINY_MODEL)
    assert models.builtin_dir() == pkg / "configs"  # installed: the wheel's gemvbw/configs wins
    assert models.builtin_presets() == {"small": pkg / "configs" / "Small.toml"}
