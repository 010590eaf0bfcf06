"""Settings precedence (flag > MNN_GEMVBW_* > default) and every bad input."""

from dataclasses import replace

import pytest

from gemvbw.settings import DEFAULTS, Settings, SettingsError, format_cpus, memory_needed, resolve, weight_bytes

CPUS = [0, 1]
PLENTY = 1 << 40


def make(flags=None, env=None, cpus=CPUS, available=PLENTY, llc=16 << 20):
    return resolve(flags or {}, env or {}, cpus=cpus, available_bytes=available, llc_bytes=llc)


def test_defaults():
    s = make()
    assert (s.M, s.K, s.bits, s.block, s.iters, s.reps) == (4096, 14336, (8, 4, 3, 2), 64, 200, 3)
    assert (s.flush_mib, s.meta_bytes, s.act, s.kernel) == (64, 2, "auto", "auto")
    assert s.threads == len(CPUS)


@pytest.mark.parametrize("llc,flush", [
    (None, 64),  # unknown: MNN's 64
    (8 << 20, 64), (16 << 20, 64),  # four times is at most 64
    (32 << 20, 128), (105 << 20, 420),
    ((33 << 20) + 1, 136),  # a cache not a whole number of MiB counts as the next MiB
])
def test_the_default_flush_is_64_mib_or_four_times_the_last_level_cache(llc, flush):
    assert make(llc=llc).flush_mib == flush


def test_the_flush_follows_llc_mib_and_a_given_flush_wins():
    assert make({"llc_mib": "40"}, llc=8 << 20).flush_mib == 160  # --llc-mib over what /sys says
    assert make({"llc_mib": "40", "flush_mib": "64"}, llc=None).flush_mib == 64
    assert make({"flush_mib": "0"}, llc=32 << 20).flush_mib == 0  # warm, as asked


def test_environment_overrides_defaults():
    env = {"MNN_GEMVBW_M": "151936", "MNN_GEMVBW_K": "1024", "MNN_GEMVBW_BITS": "4", "MNN_GEMVBW_THREADS": "1",
           "MNN_GEMVBW_BLOCK": "32", "MNN_GEMVBW_ITERS": "10", "MNN_GEMVBW_REPS": "2"}
    s = make(env=env)
    assert (s.M, s.K, s.bits, s.threads, s.block, s.iters, s.reps) == (151936, 1024, (4,), 1, 32, 10, 2)


def test_flag_beats_environment():
    s = make({"M": "1024", "bits": "8,2", "threads": "2"},
             {"MNN_GEMVBW_M": "151936", "MNN_GEMVBW_BITS": "4", "MNN_GEMVBW_THREADS": "1"})
    assert (s.M, s.bits, s.threads) == (1024, (8, 2), 2)


def test_bits_list_from_environment_keeps_order():
    assert make(env={"MNN_GEMVBW_BITS": "2, 8,3"}).bits == (2, 8, 3)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "4096.5", "", " "])
def test_bad_env_values_name_the_variable(value):
    with pytest.raises(SettingsError) as err:
        make(env={"MNN_GEMVBW_M": value})
    assert err.value.source == "MNN_GEMVBW_M"
    assert "MNN_GEMVBW_M=4096" in str(err.value)  # a valid example


@pytest.mark.parametrize("value,message", [
    ("5", "'5' is not a supported width; use one or more of 32,16,8,4,3,2, e.g. {example}"),
    ("4,4", "w4 is listed twice in '4,4'; list each width once, e.g. {example}"),
    ("8,,4", "'8,,4' lists no bit width; use a comma list of 32,16,8,4,3,2, e.g. {example}"),
])
def test_bad_bits_from_a_flag_or_a_variable_give_an_example_of_the_same_kind(value, message):
    with pytest.raises(SettingsError) as err:
        make({"bits": value})
    assert (err.value.source, err.value.message) == ("--bits", message.format(example="--bits 8,4,3,2"))
    with pytest.raises(SettingsError) as err:
        make(env={"MNN_GEMVBW_BITS": value})
    assert (err.value.source, err.value.message) == ("MNN_GEMVBW_BITS", message.format(example="MNN_GEMVBW_BITS=8,4,3,2"))


def test_a_whole_number_below_its_minimum_names_the_bound():
    from gemvbw.settings import parse_int

    with pytest.raises(SettingsError) as err:
        parse_int("iters", "1", False, minimum=2)  # (every caller's minimum is 0 or 1; the rule is the function's)
    assert err.value.message == "must be at least 2, got 1; use e.g. --iters 200"
    with pytest.raises(SettingsError) as err:
        parse_int("iters", "0", True)
    assert (err.value.source, err.value.message) == ("MNN_GEMVBW_ITERS", "must be positive, got 0; use e.g. MNN_GEMVBW_ITERS=200")
    assert parse_int("seed", "0", False, minimum=0) == 0


@pytest.mark.parametrize("name,flag", [("K", "--K"), ("iters", "--iters"), ("reps", "--reps"), ("block", "--block")])
def test_bad_flag_values_name_the_flag(name, flag):
    with pytest.raises(SettingsError) as err:
        make({name: "x"})
    assert err.value.source == flag


@pytest.mark.parametrize("value,fragment", [("5", "not a supported width"), ("4,4", "listed twice"),
                                             ("", "lists no bit width"), ("8,,4", "lists no bit width")])
def test_bad_bits(value, fragment):
    with pytest.raises(SettingsError, match=fragment) as err:
        make({"bits": value})
    assert err.value.source == "--bits"


@pytest.mark.parametrize("block", ["0", "7", "60"])
def test_bad_block(block):
    with pytest.raises(SettingsError) as err:
        make({"block": block})
    assert err.value.source == "--block"


def test_block_larger_than_K_is_one_block_per_row():
    s = make({"K": "40", "block": "64"})
    assert s.block == 64 and s.K == 40


@pytest.mark.parametrize("threads", ["64", "3"])
def test_more_threads_than_affinity_is_an_error(threads):
    with pytest.raises(SettingsError, match=r"may run on 2 CPU\(s\) \(CPUs 0-1\); use 1..2") as err:
        make({"threads": threads})
    assert err.value.source == "--threads"


def test_threads_zero_is_an_error():
    with pytest.raises(SettingsError, match="positive"):
        make({"threads": "0"})


def test_threads_default_follows_affinity():
    assert make(cpus=[6, 7]).threads == 2
    assert make(cpus=[3]).threads == 1


def test_meta_bytes():
    assert make({"meta_bytes": "4"}).meta_bytes == 4
    with pytest.raises(SettingsError, match="--meta-bytes"):
        make({"meta_bytes": "3"})


def test_flush_zero_allowed():
    assert make({"flush_mib": "0"}).flush_mib == 0


def test_too_much_memory_fails_before_allocating():
    with pytest.raises(SettingsError, match=r"needs about .* GB .* but 1\.0 GB is available"):
        make({"M": "200000", "K": "200000"}, available=10**9)


def test_memory_needed_counts_largest_width():
    # a shape where the sweep outweighs the rooflines: the largest width (w8) sets it, twice (its codes and the
    # temporary they are generated in), plus x and y (8 bytes of float32 per element), flush and verification
    s = make({"M": "65536", "K": "14336", "bits": "2,8", "act": "f32"})
    w8 = 65536 * 14336 + 65536 * 224 * 2 * 2
    assert memory_needed(s) == 2 * w8 + 8 * (65536 + 14336) * 4 + (64 << 20) + (128 << 20) == 2_200_371_200


def test_unwritable_result_paths(tmp_path):
    with pytest.raises(SettingsError, match="does not exist") as err:
        make({"json_path": "/nonexistent/dir/x.json"})
    assert err.value.source == "--json"
    with pytest.raises(SettingsError, match="is a directory"):
        make({"csv_path": str(tmp_path)})
    assert make({"json_path": str(tmp_path / "ok.json")}).json_path.endswith("ok.json")


def test_unknown_kernel_variant():
    with pytest.raises(SettingsError, match="choose one of: auto, all"):
        make({"kernel": "nope"})


def test_format_cpus():
    assert format_cpus([0, 1, 2, 5, 7, 8]) == "CPUs 0-2,5,7-8"
    assert format_cpus([6]) == "CPU 6"


def test_defaults_table_is_complete():
    assert set(DEFAULTS) >= {"M", "K", "bits", "block", "iters", "reps", "flush_mib", "meta_bytes"}


def test_memory_needed_of_a_small_sweep_is_the_rooflines():
    s = make({"M": "64", "K": "256", "bits": "4"})
    assert memory_needed(s) == 2 * (256 << 20)  # memcpy's two 256 MiB buffers; the read buffer is 256 MiB
    # a last-level cache of 100 MiB makes the read buffer 8 x 100 MiB, larger than memcpy's pair
    assert memory_needed(s, llc_bytes=100 << 20) == 800 << 20


@pytest.mark.parametrize("raw,ok", [("1x1", True), ("0x1", False), ("1x0", False), ("4096x14336", True)])
def test_shape_needs_positive_sides(raw, ok):
    from gemvbw.settings import parse_shape

    if ok:
        assert parse_shape(raw) == tuple(int(v) for v in raw.split("x"))
    else:
        with pytest.raises(SettingsError, match="is not MxK with positive M and K"):
            parse_shape(raw)


def test_an_unknown_kernel_lists_what_the_widths_asked_for_have():
    with pytest.raises(SettingsError) as err:
        make({"bits": "4", "act": "f32", "kernel": "blas"})  # blas is a w32 variant
    assert str(err.value) == "--kernel: no variant 'blas' for w4 (act=f32); choose one of: auto, all, ref, rows4"
    with pytest.raises(SettingsError) as err:
        make({"bits": "32,16", "kernel": "packed"})
    assert str(err.value).endswith("no variant 'packed' for w32,w16 (act=auto); choose one of: auto, all, blas, ref, rows4")


@pytest.mark.parametrize("raw", ["-1", "inf", "nan", "soon"])
def test_max_seconds_names_itself_and_an_example(raw):
    from gemvbw.settings import parse_seconds

    with pytest.raises(SettingsError) as err:
        parse_seconds(raw)
    assert str(err.value) == f"--max-seconds: {raw!r} is not a number of seconds >= 0; use e.g. --max-seconds 30"
    assert parse_seconds(" 2.5 ") == 2.5 and parse_seconds("0") == 0.0


def test_to_dict_is_every_setting_in_json_types():
    s = Settings(M=8, K=64, bits=(4, 2), block=64, threads=2, iters=3, reps=1, flush_mib=0, meta_bytes=2, act="i8",
                 kernel="auto", seed=5, cpus=(0, 3), shapes=((8, 64), (16, 128)), max_seconds=1.5, llc_mib=32)
    d = s.to_dict()
    assert d == {"M": 8, "K": 64, "bits": [4, 2], "block": 64, "threads": 2, "iters": 3, "reps": 1, "flush_mib": 0,
                 "meta_bytes": 2, "act": "i8", "kernel": "auto", "seed": 5, "json_path": None, "csv_path": None,
                 "compare_warm": False, "max_seconds": 1.5, "llc_mib": 32, "cpus": [0, 3],
                 "shapes": [[8, 64], [16, 128]], "recalibrate": False, "thread_limit": None}
    assert [type(d[k]) for k in ("bits", "cpus", "shapes")] == [list, list, list]  # lists, as JSON reads back
    assert all(type(v) is list for v in d["shapes"])
    assert replace(s, cpus=None).to_dict()["cpus"] is None
    assert replace(s, shapes=()).to_dict()["shapes"] == [[8, 64]]  # the one shape (M, K), spelled out


def test_weights_of_every_kind_are_counted_in_whole_bytes():
    # float widths: their M*K values; packed widths: codes with the last block padded, plus fp16/fp32 metadata
    assert weight_bytes(3, 5, 32, 64, 2) == 60 and type(weight_bytes(3, 5, 32, 64, 2)) is int
    assert weight_bytes(3, 5, 16, 64, 2) == 30 and type(weight_bytes(3, 5, 16, 64, 2)) is int
    # two rows of 100 codes in blocks of 64 and 36: w4 32 + 18 bytes a row; w3 24 + 15 (36 codes padded to 40);
    # then a scale and an offset per row and block, of 2 or 4 bytes
    assert weight_bytes(2, 100, 4, 64, 2) == 2 * 50 + 2 * 2 * 2 * 2 == 116
    assert weight_bytes(2, 100, 4, 64, 4) == 2 * 50 + 2 * 2 * 2 * 4 == 132
    assert weight_bytes(2, 100, 3, 64, 2) == 2 * 39 + 2 * 2 * 2 * 2 == 94


def test_the_repacked_copies_are_counted_per_width(monkeypatch):
    """Each width's own int8 layouts: w8 with three here, w4 with none (the f32 loops only), w2 with one."""
    from types import SimpleNamespace

    from gemvbw import kernels, settings as st

    layouts = {8: [("4x2", 32, 0), ("4x2", 32, 128), ("c4", 16)], 4: [], 2: [("c4", 16), ("c4", 16)]}
    monkeypatch.setattr(kernels, "variants", lambda bits, act: [SimpleNamespace(layout=la) for la in layouts[bits]]
                        if act == "i8" else [])
    assert [st.copies_held(b, 64, "auto") for b in (8, 4, 2)] == [4, 2, 2]
    # the sweep's peak is set by the width with the most bytes held, not the most bytes stored: w8 by far here
    s = make({"M": "4096", "K": "4096", "bits": "2,4,8"})
    need, worst, shape = st.sweep_bytes(s)
    w8 = st.weight_bytes(4096, 4096, 8, 64, 2)
    assert (need, worst, shape) == (4 * w8 + 8 * (4096 + 4096) * 4 + (64 << 20) + st.VERIFY_BYTES, 8, (4096, 4096))
    layouts[4] = [(f"layout {i}", i) for i in range(8)]  # nine copies of w4 outweigh four of w8
    w4 = st.weight_bytes(4096, 4096, 4, 64, 2)
    assert st.sweep_bytes(s)[:2] == (9 * w4 + 8 * (4096 + 4096) * 4 + (64 << 20) + st.VERIFY_BYTES, 4)


@pytest.mark.parametrize("llc,advice", [(None, 64), (100 << 20, 400), (256 << 10, 64)])
def test_each_memory_refusal_says_what_does_not_fit_and_what_would(llc, advice):
    from gemvbw import settings as st

    with pytest.raises(SettingsError) as err:
        make({"flush_mib": "4096"}, available=3 * 10**9, llc=llc)
    assert (err.value.source, err.value.message) == (
        "--flush-mib", f"a 4096 MiB flush buffer does not fit in the 3.0 GB available; use e.g. --flush-mib {advice}")
    roofline = st.roofline_bytes(None if llc is None else llc)
    with pytest.raises(SettingsError) as err:
        make({"flush_mib": "1"}, available=roofline - 1, llc=llc)
    assert (err.value.source, err.value.message) == (
        "memory", f"the rooflines need {roofline / 1e9:.1f} GB at once but {(roofline - 1) / 1e9:.1f} GB is "
                  "available; free memory first")
    make({"M": "64", "K": "64", "flush_mib": "1"}, available=roofline, llc=llc)  # exactly enough: accepted


def test_llc_mib_is_the_cache_everything_assumes_the_flush_the_read_buffer_and_the_memory_check():
    """--llc-mib over /sys for the default flush and for the read roofline's buffer, which check_memory counts
    as the runner will allocate it (it used to count /sys's cache while the runner used --llc-mib's)."""
    from gemvbw import settings as st

    assert st.llc_in_force(None, 32 << 20) == (32 << 20, "/sys")
    assert st.llc_in_force(None, None) == (None, "/sys")
    assert st.llc_in_force(512, 32 << 20) == (512 << 20, "--llc-mib")
    big = st.roofline_bytes(512 << 20)
    assert big > st.roofline_bytes(32 << 20)  # 8 x 512 MiB of read buffer against 256 MiB
    small = {"M": "64", "K": "64", "flush_mib": "1"}
    assert make(small, available=big - 1, llc=32 << 20).llc_mib is None  # /sys's cache: the buffers fit
    with pytest.raises(SettingsError) as err:
        make({**small, "llc_mib": "512"}, available=big - 1, llc=32 << 20)
    assert err.value.source == "memory" and err.value.message.startswith(f"the rooflines need {big / 1e9:.1f} GB")
    assert make({**small, "llc_mib": "512"}, available=big, llc=32 << 20).llc_mib == 512


def test_the_flush_buffer_is_refused_exactly_when_it_and_verification_do_not_fit(monkeypatch):
    """A flush buffer larger than the rooflines, so that only the flush check and the sweep's total are in play:
    at its exact size plus verification's the flush fits (and the sweep, which holds more, is what is refused)."""
    from gemvbw import settings as st, system

    monkeypatch.setattr(system, "last_level_cache_bytes", lambda: 32 << 20)
    flush_bytes = (4096 << 20) + st.VERIFY_BYTES
    with pytest.raises(SettingsError) as err:
        make({"M": "64", "K": "64", "flush_mib": "4096"}, available=flush_bytes - 1)
    assert err.value.source == "--flush-mib"
    with pytest.raises(SettingsError) as err:
        make({"M": "64", "K": "64", "flush_mib": "4096"}, available=flush_bytes)
    assert err.value.source == "--M/--K"  # x, y and the weights on top of the flush and verification
    need = st.sweep_bytes(make({"M": "64", "K": "64", "flush_mib": "4096"}))[0]
    assert make({"M": "64", "K": "64", "flush_mib": "4096"}, available=need).flush_mib == 4096


def test_a_flush_that_does_not_fit_gets_the_cache_s_size_where_it_fits_else_the_most_that_fits(monkeypatch):
    """The advice never suggests a flush that would itself not fit, and says so when the one that fits is
    smaller than the cache wants (4x the LLC, --llc-mib over /sys)."""
    from gemvbw import settings as st, system

    monkeypatch.setattr(system, "last_level_cache_bytes", lambda: 32 << 20)
    cases = [({}, (200 << 20) + st.VERIFY_BYTES, "use e.g. --flush-mib 128"),
             ({"llc_mib": "40"}, (200 << 20) + st.VERIFY_BYTES, "use e.g. --flush-mib 160"),
             ({"llc_mib": "40"}, (159 << 20) + st.VERIFY_BYTES + 5,
              "use --flush-mib 159 at most (what fits; less than the 160 MiB this cache wants, so the run will "
              "warn flush-small), or free memory first"),
             ({}, st.VERIFY_BYTES + (1 << 19), "free memory first")]
    for extra, available, advice in cases:
        s = make({"flush_mib": "4096", **extra})
        with pytest.raises(SettingsError) as err:
            st.check_memory(s, available, st.llc_in_force(s.llc_mib, 32 << 20)[0])
        assert err.value.source == "--flush-mib"
        assert err.value.message.endswith(" available; " + advice)


def test_the_first_of_equally_large_shapes_is_the_one_named():
    from gemvbw import settings as st

    # 64 rows of two blocks and 128 rows of one: the same codes and metadata, the same x and y
    s = make({"shapes": ("64x128", "128x64"), "bits": "4", "act": "f32"})
    assert st.weight_bytes(64, 128, 4, 64, 2) == st.weight_bytes(128, 64, 4, 64, 2)
    assert st.sweep_bytes(s)[1:] == (4, (64, 128))
    s = make({"shapes": ("128x64", "64x128"), "bits": "4", "act": "f32"})
    assert st.sweep_bytes(s)[1:] == (4, (128, 64))


# --- --act and --kernel refusals, each message whole ---------------------------------------------

def test_act_i8_refuses_unquantized_widths_naming_them():
    from gemvbw.settings import check_act

    with pytest.raises(SettingsError) as err:
        check_act("i8", (32, 4, 16), 64)
    assert (err.value.source, err.value.message) == (
        "--act", "w32 and w16 are unquantized weights, multiplied with f32 activations; use --act auto (int8 where "
                 "it applies) or drop them from --bits")


@pytest.mark.parametrize("isa,shown", [(["asimd", "fphp"], "asimd fphp"), ([], "none of the relevant ones")])
def test_act_i8_without_an_int8_tier_names_the_cpus_features(monkeypatch, isa, shown):
    from gemvbw import kernels, settings

    monkeypatch.setattr(kernels, "int8_unavailable", lambda b, block: "no int8 tier for this CPU (neon-dotprod: "
                        "no asimddp)" if b == 4 else None)
    monkeypatch.setattr(settings.system, "describe_cpu", lambda: {"isa": isa, "isa_source": "from HWCAPs"})
    assert settings.check_act("i8", (8,), 64) == "i8"
    with pytest.raises(SettingsError) as err:
        settings.check_act("i8", (8, 4), 64)
    assert (err.value.source, err.value.message) == (
        "--act", f"no int8 tier for this CPU (neon-dotprod: no asimddp); this CPU's features (from HWCAPs): {shown}. "
                 "Use --act auto or --act f32")


def test_act_i8_at_a_block_the_int8_kernels_do_not_take(monkeypatch):
    from gemvbw import kernels, settings

    monkeypatch.setattr(kernels, "int8_unavailable", lambda b, block: f"the int8 kernels take blocks of 64, not {block}")
    monkeypatch.setattr(settings.system, "describe_cpu", lambda: pytest.fail("the CPU is no part of this advice"))
    with pytest.raises(SettingsError) as err:
        settings.check_act("i8", (4,), 32)
    assert (err.value.source, err.value.message) == (
        "--act", "the int8 kernels take blocks of 64, not 32; use --block 64, or --act auto (f32 where int8 cannot run)")


def test_kernel_unknown_lists_the_names_the_missing_widths_have(monkeypatch):
    from gemvbw import kernels
    from gemvbw.settings import check_kernel

    names = {"f32": {(4, 3): ["ref", "rows4"]}, "i8": {(4, 3): ["packed-1x1-fake", "ref"]}}
    monkeypatch.setattr(kernels, "variant_names", lambda act, widths=None: names[act].get(widths, ["other"]))
    with pytest.raises(SettingsError) as err:
        check_kernel("nope", (8, 4, 3), "auto")  # no width has 'nope'
    assert err.value.source == "--kernel"
    assert err.value.message == "no variant 'nope' for w8,w4,w3 (act=auto); choose one of: auto, all, other"
    with pytest.raises(SettingsError) as err:
        check_kernel("nope", (4, 3), "auto")
    assert err.value.message == ("no variant 'nope' for w4,w3 (act=auto); choose one of: auto, all, packed-1x1-fake, "
                                 "ref, rows4")
    with pytest.raises(SettingsError) as err:
        check_kernel("nope", (4, 3), "i8")
    assert err.value.message == "no variant 'nope' for w4,w3 (act=i8); choose one of: auto, all, packed-1x1-fake, ref"


def _i8_names():
    from gemvbw import kernels

    return sorted({s.variant for b in (8, 4, 3, 2) for s in kernels.variants(b, "i8")})


I8_NAMES = _i8_names()


@pytest.mark.skipif(not I8_NAMES, reason="no int8 tier is usable on this CPU and compiler target (see gemvbw info)")
def test_kernel_named_int8_variant_is_found_at_the_default_block():
    from gemvbw import kernels
    from gemvbw.settings import check_kernel

    name = kernels.variants(4, "i8")[0].variant
    assert check_kernel(name, (8, 4, 3, 2), "auto") == name  # block 64 unless told: the int8 kernels' block
    assert check_kernel(name, (4,), "i8", 64) == name
    assert check_kernel("rows4", (4,), "auto") == "rows4"  # an f32 name under auto: f32 for that width
    with pytest.raises(SettingsError, match=f"no variant '{name}' for w4 "):
        check_kernel(name, (4,), "auto", 32)  # at block 32 only f32 runs, which has no such name


def test_memory_refusals_print_decimal_gigabytes_rounded_as_told(monkeypatch):
    """Figures a hair above x.x5 GB: decimal gigabytes (1e9 bytes) print rounded up, a divisor one byte larger would not."""
    from gemvbw import settings as st, system

    monkeypatch.setattr(system, "last_level_cache_bytes", lambda: 16 << 20)
    with pytest.raises(SettingsError) as err:
        make({"flush_mib": "4096"}, available=1_050_000_000)
    assert err.value.message == "a 4096 MiB flush buffer does not fit in the 1.1 GB available; use e.g. --flush-mib 64"
    monkeypatch.setattr(st, "roofline_bytes", lambda llc: 1_350_000_000)
    with pytest.raises(SettingsError) as err:
        make({"flush_mib": "1"}, available=1_050_000_000)
    assert err.value.message == "the rooflines need 1.4 GB at once but 1.1 GB is available; free memory first"
    monkeypatch.setattr(st, "roofline_bytes", lambda llc: 1)
    monkeypatch.setattr(st, "sweep_bytes", lambda s: (2_350_000_000, 4, (4096, 14336)))
    with pytest.raises(SettingsError) as err:
        make({"bits": "4", "flush_mib": "1"}, available=1_050_000_000)
    assert (err.value.source, err.value.message) == (
        "--M/--K", "M=4096 x K=14336 needs about 2.4 GB at once (w4: its weights, their temporary and repacked copies, "
                   "the buffers, verification) but 1.1 GB is available; reduce M or K")
    with pytest.raises(SettingsError) as err:
        make({"shapes": ("4096x14336", "64x64"), "bits": "8,4", "flush_mib": "1"}, available=1_050_000_000)
    assert (err.value.source, err.value.message) == (
        "--shape", "M=4096 x K=14336 needs about 2.4 GB at once (w4: its weights, their temporary and repacked copies, "
                   "the buffers, verification) but 1.1 GB is available; drop 4 from --bits, reduce M or K")
    make({"bits": "4", "flush_mib": "1"}, available=2_350_000_000)  # exactly enough: accepted


# --- resolve(): what each refusal says, and what it passes on ----------------------------------------

@pytest.mark.parametrize("flag", ["M", "K"])
def test_shapes_and_one_shape_together_are_refused(flag):
    with pytest.raises(SettingsError) as err:
        make({"shapes": ("64x64",), flag: "128"})
    assert (err.value.source, err.value.message) == (
        "--shape", "give the shapes with --shape (or --shapes-from), or one shape with --M/--K, not both")


def test_a_shape_listed_twice_is_refused():
    with pytest.raises(SettingsError) as err:
        make({"shapes": ("64x64", "8x64", "64X64")})
    assert (err.value.source, err.value.message) == ("--shape", "a shape is listed twice; list each once")


def test_recalibrate_and_the_thread_limit_reach_the_settings():
    s = resolve({"recalibrate": True}, {}, cpus=[0, 1, 2, 3], available_bytes=PLENTY, thread_limit=2)
    assert (s.recalibrate, s.thread_limit, s.threads) == (True, 2, 2)  # the default as far as numba goes
    s = resolve({"threads": "2"}, {}, cpus=[0, 1, 2, 3], available_bytes=PLENTY, thread_limit=2)
    assert (s.recalibrate, s.thread_limit, s.threads) == (False, 2, 2)  # exactly the limit: accepted


@pytest.mark.parametrize("env,shown", [({"NUMBA_NUM_THREADS": "3"}, "3"), ({}, "2")])
def test_threads_above_numbas_limit_name_it(env, shown):
    with pytest.raises(SettingsError) as err:
        resolve({"threads": "4"}, env, cpus=[0, 1, 2, 3], available_bytes=PLENTY, thread_limit=2)
    assert (err.value.source, err.value.message) == (
        "--threads", f"4 threads asked for, but numba runs at most 2 here (NUMBA_NUM_THREADS={shown}); use 1..2, "
                     "or raise NUMBA_NUM_THREADS")
    with pytest.raises(SettingsError) as err:
        resolve({}, {**env, "MNN_GEMVBW_THREADS": "3"}, cpus=[0, 1, 2, 3], available_bytes=PLENTY, thread_limit=2)
    assert err.value.source == "MNN_GEMVBW_THREADS"


@pytest.mark.parametrize("flags,env,source,message", [
    ({"threads": "3"}, {}, "--threads", "3 threads asked for, but this process may run on 2 CPU(s) (CPUs 0-1); use 1..2, "
                                        "or allow more CPUs (taskset or --cpus)"),
    ({}, {"MNN_GEMVBW_THREADS": "3"}, "MNN_GEMVBW_THREADS", "3 threads asked for, but this process may run on 2 CPU(s) "
                                                            "(CPUs 0-1); use 1..2, or allow more CPUs (taskset or --cpus)"),
    ({}, {"MNN_GEMVBW_THREADS": "two"}, "MNN_GEMVBW_THREADS", "'two' is not a whole number; use e.g. MNN_GEMVBW_THREADS=2"),
    ({"threads": "two"}, {}, "--threads", "'two' is not a whole number; use e.g. --threads 2"),
])
def test_threads_refused_from_a_flag_or_a_variable_name_it(flags, env, source, message):
    with pytest.raises(SettingsError) as err:
        make(flags, env)
    assert (err.value.source, err.value.message) == (source, message)


def test_the_kernel_is_checked_at_the_runs_block(monkeypatch):
    from gemvbw import settings as st

    seen = []
    monkeypatch.setattr(st, "check_kernel", lambda kernel, bits, act, block: seen.append((kernel, bits, block)) or kernel)
    assert make({"kernel": "ref", "bits": "4", "block": "32", "act": "f32"}).kernel == "ref"
    assert make({"kernel": "ref", "bits": "4", "act": "f32"}, {"MNN_GEMVBW_BLOCK": "128"}).kernel == "ref"
    assert seen == [("ref", (4,), 32), ("ref", (4,), 128)]


def test_csv_path_refusals_name_csv(tmp_path):
    with pytest.raises(SettingsError) as err:
        make({"csv_path": str(tmp_path / "missing" / "r.csv")})
    assert err.value.source == "--csv"
    same = str(tmp_path / "r.out")
    with pytest.raises(SettingsError) as err:
        make({"csv_path": same, "md_path": same})
    assert (err.value.source, err.value.message) == ("--md", f"{same!r} is also the file of --csv; give each output "
                                                             "its own file")


@pytest.mark.parametrize("flags,env,source,message", [
    ({"block": "100"}, {}, "--block", "must be a multiple of 8 so every packed layout tiles it, got 100; use e.g. 96 "
                                      "or 104"),
    ({}, {"MNN_GEMVBW_BLOCK": "4"}, "MNN_GEMVBW_BLOCK", "must be a multiple of 8 so every packed layout tiles it, "
                                                        "got 4; use e.g. 8 or 16"),
])
def test_a_block_off_the_granule_is_refused_with_its_neighbours(flags, env, source, message):
    with pytest.raises(SettingsError) as err:
        make(flags, env)
    assert (err.value.source, err.value.message) == (source, message)


def test_meta_bytes_refusal_whole():
    with pytest.raises(SettingsError) as err:
        make({"meta_bytes": "3"})
    assert (err.value.source, err.value.message) == (
        "--meta-bytes", "must be 2 (float16 scale/offset, MNN's published formula) or 4 (float32, MNN's CPU backend), "
                        "got 3")
