"""The ISA layer: CPU features, numba's compiler target, the gate, and every tier's code.

A tier is run and checked exact in tests/test_kernels.py wherever this machine has it. Here:
the gate decided from pretended CPU flags and targets (so every refusal is tested on any
machine); the HWCAP and auxv parsing; the LLVM probe; and, for tiers this machine lacks,
compile-only checks in a subprocess told another CPU (the code is never called).
"""

import json
import os
import platform
import re
import subprocess
import sys
import textwrap

import numba
import pytest

from gemvbw import kernels, system, tiers
from gemvbw.kernels import packed

ARCH = tiers.arch_of(platform.machine())


def target(cpu="somecpu", features="", cpu_source="LLVM's host detection", features_source="LLVM's host detection"):
    return tiers.Target("triple", cpu, features, cpu_source, features_source, tiers.parse_features(features))


def by_name(name):
    return next(t for t in tiers.TIERS if t.name == name)


# --- the gate, from pretended facts -------------------------------------------------------------

def test_tier_usable_only_when_cpu_and_target_both_have_it():
    dotprod = by_name("neon-dotprod")
    tgt = target("cortex-a76", "+neon,+dotprod")
    ok = tiers.status(dotprod, ["asimd", "asimddp"], lambda f: tgt.explicit.get(f, False), tgt)
    assert ok.usable and "asimddp" in ok.reason and "+dotprod" in ok.reason
    no_cpu = tiers.status(dotprod, ["asimd"], lambda f: True, tgt)
    assert not no_cpu.usable and no_cpu.reason == "this CPU lacks asimddp"
    generic = target("generic", "+neon")
    no_llvm = tiers.status(dotprod, ["asimd", "asimddp"], lambda f: generic.explicit.get(f, False), generic)
    assert not no_llvm.usable
    assert "lacks +dotprod" in no_llvm.reason and "NUMBA_CPU_NAME=<this core, e.g. cortex-a76>" in no_llvm.reason
    unknown = tiers.status(dotprod, ["asimd", "asimddp"], lambda f: True, None)
    assert not unknown.usable and "llvmlite is not importable" in unknown.reason


@pytest.mark.parametrize("flags,expected", [
    (["asimd", "asimddp", "i8mm"], ["neon-dotprod", "neon"]),  # a recent big core (i8mm: no tier uses it)
    (["asimd", "asimddp"], ["neon-dotprod", "neon"]),  # Cortex-A55/A76 class
    (["asimd"], ["neon"]),  # Cortex-A53/A73 class
    ([], []),
])
def test_arm_tiers_follow_the_hwcaps(flags, expected):
    tgt = target("neoverse-n2", "+neon,+dotprod,+i8mm")
    rep = tiers.build_report("aarch64", flags, "HWCAP", tgt, has=lambda f: tgt.explicit.get(f, False))
    assert [t.name for t in rep.usable] == expected
    assert {s.tier.arch for s in rep.statuses} == {"aarch64"}  # x86 tiers are not even listed


@pytest.mark.parametrize("flags,expected", [
    (["avx2", "fma", "f16c", "avx512bw", "avx512vl", "avx512_vnni"],
     ["avx512vnni", "avx512vnni-zmm", "avx512bw", "avx2"]),  # Ice Lake-SP, Zen 4
    (["avx2", "fma", "f16c", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni"],
     ["avx512vnni", "avx512vnni-zmm", "avxvnni", "avx512bw", "avx2"]),  # Zen 5
    (["avx2", "fma", "f16c", "avx_vnni"], ["avxvnni", "avx2"]),  # Alder Lake
    (["avx2", "fma", "f16c", "avx512bw", "avx512vl"], ["avx512bw", "avx2"]),  # Skylake-X: AVX-512 without VNNI
    (["avx2", "fma", "f16c", "avx512f"], ["avx2"]),  # AVX-512 without BW (Knights Landing)
    (["avx2", "fma", "f16c"], ["avx2"]),
    (["fma"], []),
])
def test_x86_tiers_follow_the_cpu_flags(flags, expected):
    tgt = target("any", "+avx2,+fma,+f16c,+avx512bw,+avx512vl,+avx512vnni,+avxvnni")
    rep = tiers.build_report("x86_64", flags, "/proc/cpuinfo", tgt, has=lambda f: tgt.explicit.get(f, False))
    assert [t.name for t in rep.usable] == expected


def test_registry_holds_only_the_tiers_the_gate_allows():
    # pretend this machine lacks every VNNI flag: no vnni variant may be registered, so none is compiled
    lacking = [t for t in tiers.TIERS if t.name == "avx2"]
    names = {s.variant for s in kernels.i8_specs(lacking)}
    assert names == {"packed-4x2-avx2"}
    live = {s.variant for b in (8, 4, 3, 2) for s in kernels.variants(b, "i8")}
    assert live == {v for t in tiers.usable() for v in t.variants()}
    vnni = [by_name("avx512vnni-zmm"), by_name("avxvnni")]
    specs = kernels.i8_specs(vnni)
    assert {(s.bits, s.variant) for s in specs if "c4" in s.variant} == {
        (b, v) for b in (8, 4, 3, 2) for v in ("packed-16c4-avx512vnni-zmm", "packed-8c4-avxvnni")} | {
        (b, v + twin) for b in (8, 4, 3, 2) for v in ("packed-16c4-avx512vnni-zmm", "packed-8c4-avxvnni")
        for twin in ("-prfm", "-1stream")}
    # the prefetching twin prefetches, the plain tile does not; each the tile's own layout (one repacked copy)
    assert {s.ahead > 0 for s in specs if s.variant.endswith("-prfm")} == {True}
    assert {s.ahead for s in specs if "c4" in s.variant and not s.variant.endswith("-prfm")} == {0}
    assert len({s.layout for s in specs if s.bits == 4 and "16c4" in s.variant}) == 1
    # a column tile is preferred over its tier's packed-4x2 where no calibration says otherwise
    assert all(a.priority > b.priority for a in specs if "c4" in a.variant for b in specs if "4x2" in b.variant)


def test_each_int8_variant_states_the_call_it_binds(monkeypatch):
    # benchmarks/asm_check.py compiles a variant from its kernel_args: they must be the call its bind makes (the
    # tag carries prefetch distance, hint and streams), or the check reads other code than the sweep times
    from gemvbw.kernels import streams, tile
    from gemvbw.quant import random_quantized

    monkeypatch.setattr(streams, "bind", lambda args: args)
    specs = kernels.i8_specs([t for t in tiers.TIERS if t.arch == ARCH])
    assert specs, f"no int8 tier for {ARCH}"
    qm = random_quantized(8, 128, bits=2, block=64)
    for spec in (s for s in specs if s.bits == 2):
        bound = spec.bind(qm)
        stated = spec.kernel_args(qm, *kernels.typed_like(qm), bound[-1])  # the same chunks
        assert numba.typeof(stated[0]) == numba.typeof(bound[0]), spec.variant
    twins = [s for s in specs if s.bits == 2 and s.variant.endswith("-prfm")]
    for spec in twins:
        tag = spec.kernel_args(qm, *kernels.typed_like(qm), 2)[0]
        assert (tag.ahead, tag.nstreams) == (tile.prfm_ahead(2), tile.prfm_streams(2)), spec.variant
        assert spec.ahead == tag.ahead, spec.variant  # the spec states the distance its twin binds
    # the -1stream twin: the plain tile (its layout, no prefetch) with one group per thread, one tile at a time
    for spec in (s for s in specs if s.bits == 2 and s.variant.endswith("-1stream")):
        tag = spec.kernel_args(qm, *kernels.typed_like(qm), 2)[0]
        plain = next(s for s in specs if s.bits == 2 and s.variant == spec.variant.removesuffix("-1stream"))
        assert (tag.ahead, tag.nstreams, tag.turn, spec.ahead) == (0, 1, 1, 0), spec.variant
        assert spec.layout == plain.layout and tag.w2_stack == tile.W2_STACK, spec.variant
    for t in (t for t in tile.tile_tiers() if by_name(t).arch == ARCH):
        assert {f"packed-{tile.tile_rows(t)}c4-{t}-1stream"} <= {s.variant for s in specs if s.bits == 2}, t


TWO = dict.fromkeys((8, 4, 3, 2), 2)
FOUR = dict.fromkeys((8, 4, 3, 2), 4)


@pytest.mark.parametrize("cpu, plain, shared, twin", [
    (("GenuineIntel", 6), TWO, TWO, {8: 2, 4: 2, 3: 4, 2: 4}),
    (("AuthenticAMD", 25), FOUR, {**FOUR, 2: 8}, TWO),  # Zen 4 (the only family-25 CPU with a VNNI tier)
    (("AuthenticAMD", 26), TWO, TWO, TWO),  # Zen 5
    (("AuthenticAMD", None), TWO, TWO, TWO),  # no cpu family line
    (("SomeOtherVendor", 25), TWO, TWO, TWO),
    ((None, None), TWO, TWO, TWO),  # off x86
])
def test_the_tiles_read_as_many_groups_as_the_cpu_was_measured_to_want(monkeypatch, cpu, plain, shared, twin):
    # four groups per thread won on a Zen 4 for the plain tile (eight for w2 where two threads share the memory)
    # and on an Intel Xeon for w3's and w2's twins, and lost by a third on a Zen 5 (see tile.PLAIN_STREAMS_BY_CPU):
    # each variant the registry builds must take the count of the CPU it runs on at the threads in force when it
    # is bound, every other CPU the tiles' own two, and its description say so
    from gemvbw.kernels import tile
    from gemvbw.quant import random_quantized

    # (plain and shared: w2's tile with one row per lane; its plain tile is stacked and reads by its tile's lanes)
    assert {bits: tile.plain_streams(bits, cpu, threads=1, w2_stack=False) for bits in tile.WIDTHS} == plain
    for threads in (2, 8):
        assert {bits: tile.plain_streams(bits, cpu, threads=threads, w2_stack=False) for bits in tile.WIDTHS} == shared
        # stacked w2 by its tile's lanes, on every CPU: 16 (zmm) two groups in turns of two tiles, 8 (ymm) two
        # in turns of one (tile.STACKED_STREAMS, tile.STACKED_TURN)
        assert [tile.plain_streams(2, cpu, threads=threads, tier=t) for t in ("avx512vnni-zmm", "avx512vnni")] == [2, 2]
    assert [tile.plain_turn(2, tier=t) for t in ("avx512vnni-zmm", "avx512vnni")] == [2, 1]
    assert {tile.plain_turn(bits, tier="avx512vnni-zmm") for bits in (8, 4, 3)} == {1}
    assert tile.plain_turn(2, w2_stack=False) == 1  # w2 with one row per lane: tile by tile
    for ask in (tile.plain_streams, tile.plain_turn):
        with pytest.raises(ValueError, match="give tier"):
            ask(2, cpu) if ask is tile.plain_streams else ask(2)
    stacked, turns = {16: 2, 8: 2}, {16: 2, 8: 1}
    assert {bits: tile.prfm_streams(bits, cpu) for bits in tile.WIDTHS} == twin
    monkeypatch.setattr(tile, "_this_cpu", lambda: cpu)
    # the column tiles are x86_64's; their specs are built (not compiled) on any machine, as the registry test does
    specs = kernels.i8_specs([t for t in tiers.TIERS if t.arch == "x86_64" and t.tile_rows])
    for bits in tile.WIDTHS:
        qm = random_quantized(8, 128, bits=bits, block=64)
        tiles = [s for s in specs if s.bits == bits and s.layout[0] == "c4"]
        assert {s.variant.endswith("-prfm") for s in tiles} == {False, True}, (cpu, bits)
        def wanted(counts, spec):  # the plain tile's count for this spec's tile
            return stacked[tile.tile_rows(spec.tier)] if bits == 2 else counts[bits]

        for threads, counts in ((1, plain), (2, shared)):
            monkeypatch.setattr(tile, "_threads_now", lambda: threads)  # the count in force when a kernel is bound
            for spec in tiles:
                one = spec.variant.endswith("-1stream")  # one group per thread whatever the CPU and threads
                groups = 1 if one else twin[bits] if spec.variant.endswith("-prfm") else wanted(counts, spec)
                tag = spec.kernel_args(qm, *kernels.typed_like(qm), 2)[0]
                turn = 1 if one or spec.variant.endswith("-prfm") or bits != 2 else turns[tile.tile_rows(spec.tier)]
                assert (tag.nstreams, tag.turn) == (groups, turn), spec.variant
                # a tag built without a count (benchmarks/tile_variants.py's "default") is the plain tile's
                assert tile.TileTag(spec.tier, bits, 2).nstreams == wanted(counts, spec)
        for spec in tiles:
            alone, more = wanted(plain, spec), wanted(shared, spec)
            if spec.variant.endswith("-1stream"):
                assert ", one group of rows at once per thread" in spec.description, spec.description
                assert "groups of rows" not in spec.description and "in turn" not in spec.description
                continue
            if spec.variant.endswith("-prfm"):
                said = f", {twin[bits]} groups of rows at once per thread" if twin[bits] != 2 else None
            elif alone != more:
                said = f", {alone} groups of rows at once per thread at 1 thread and {more} at more"
            elif bits == 2:
                said = (f", {alone} groups of rows at once per thread" if alone != 2 else "") + \
                    "; w2 as four rows per lane"
                in_turn = "two tiles of a group in turn" in spec.description
                assert in_turn == (turns[tile.tile_rows(spec.tier)] == 2), (spec.variant, spec.description)
                assert ("groups of rows" in spec.description) == (alone != 2), (spec.variant, spec.description)
            else:
                said = f", {alone} groups of rows at once per thread" if alone != 2 else None
            assert (said in spec.description) if said else ("groups of rows" not in spec.description), \
                (spec.variant, spec.description)


ZEN5_AHEAD = {8: 2048, 4: 4096, 3: 4096, 2: 4096}


@pytest.mark.parametrize("cpu, wanted", [
    (("AuthenticAMD", 26), ZEN5_AHEAD),
    (("GenuineIntel", 6), {**ZEN5_AHEAD, 3: 2048, 2: 2048}),
    (("AuthenticAMD", 25), ZEN5_AHEAD),
    ((None, None), ZEN5_AHEAD),  # off x86, where no tile runs: the tiles' own distances
])
@pytest.mark.parametrize("threads", [1, 2, 8])
def test_the_prefetching_twins_prefetch_as_far_ahead_at_every_thread_count(monkeypatch, threads, cpu, wanted):
    # measured on a Zen 5: w4-w2's twins want 4 KiB ahead at one thread, and at two wherever each core gets the
    # bandwidth one thread gets (2 KiB was level at most where it does not); w8's 2 KiB. On an Intel Xeon w3's
    # and w2's 2 KiB (tile.PRFM_AHEAD_BY_CPU). The tag bound, the spec's ahead and its description say the CPU's distance
    # whatever the thread count in force
    from gemvbw.kernels import tile
    from gemvbw.quant import random_quantized

    assert {bits: tile.prfm_ahead(bits, cpu) for bits in tile.WIDTHS} == wanted
    monkeypatch.setattr(tile, "_this_cpu", lambda: cpu)
    monkeypatch.setattr(numba, "get_num_threads", lambda: threads)
    specs = kernels.i8_specs([t for t in tiers.TIERS if t.arch == "x86_64" and t.tile_rows])
    for bits in tile.WIDTHS:
        qm = random_quantized(8, 128, bits=bits, block=64)
        tiles = [s for s in specs if s.bits == bits and "c4" in s.variant]
        assert len(tiles) == 3 * len(tile.tile_tiers()), bits  # the plain tile, its -prfm and -1stream twins
        for spec in tiles:
            tag = spec.kernel_args(qm, *kernels.typed_like(qm), 2)[0]
            prfm = spec.variant.endswith("-prfm")
            assert tag.ahead == spec.ahead == (wanted[bits] if prfm else 0), spec.variant
            assert (f"prefetches {wanted[bits]} bytes ahead" in spec.description) == prfm, spec.description
            hint = tile.HINTS[tile.PREFETCH_LOCALITY]
            assert (f"prefetches {wanted[bits]} bytes ahead in its stream ({hint})" in spec.description) == prfm


def test_a_target_promising_what_the_cpu_lacks_is_unsafe_only_when_the_user_named_it():
    named = target("cortex-a76", "", cpu_source="NUMBA_CPU_NAME")
    rep = tiers.build_report("aarch64", ["asimd"], "HWCAP", named, has=lambda f: f in ("neon", "dotprod"))
    assert rep.unsafe == ("dotprod",)
    msg = tiers.unsafe_target_message(rep)
    assert msg.startswith("NUMBA_CPU_NAME: numba would compile for cortex-a76 with +dotprod") and "SIGILL" in msg
    detected = target("cortex-a76", "+neon,+dotprod")
    assert tiers.build_report("aarch64", ["asimd"], "HWCAP", detected,
                              has=lambda f: detected.explicit.get(f, False)).unsafe == ()
    feats = target("znver4", "+avx2,+avxvnni", features_source="NUMBA_CPU_FEATURES")
    rep = tiers.build_report("x86_64", ["avx2", "fma"], "/proc/cpuinfo", feats,
                             has=lambda f: feats.explicit.get(f, False))
    assert rep.unsafe == ("avxvnni",) and tiers.unsafe_target_message(rep).startswith("NUMBA_CPU_FEATURES:")


def test_parse_features():
    assert tiers.parse_features("+neon,-sve, +dotprod,,x") == {"neon": True, "sve": False, "dotprod": True}


def test_numba_target_reads_the_variables_as_numba_does():
    t = tiers.numba_target({"NUMBA_CPU_NAME": "generic"})
    assert (t.cpu, t.features, t.cpu_source) == ("generic", "", "NUMBA_CPU_NAME")  # numba's own default
    t = tiers.numba_target({"NUMBA_CPU_NAME": "cortex-a76", "NUMBA_CPU_FEATURES": "+dotprod"})
    assert t.explicit == {"dotprod": True} and t.features_source == "NUMBA_CPU_FEATURES"
    t = tiers.numba_target({"NUMBA_ENABLE_AVX": "0"})
    assert not any(v for k, v in t.explicit.items() if k.startswith("avx"))


# --- the CPU side: HWCAPs, auxv, emulation -----------------------------------------------------

def test_hwcap_bits_are_named_as_proc_cpuinfo_names_them():
    hwcap = (1 << 1) | (1 << 20) | (1 << 10)  # asimd, asimddp, asimdhp
    assert system.hwcap_names(hwcap, 1 << 13) == {"asimd", "asimddp", "asimdhp", "i8mm"}
    assert system.hwcap_names(1 << 1, 0) == {"asimd"}


def test_auxv_is_parsed_up_to_at_null():
    word = 8
    pairs = [(6, 4096), (16, 0x100002), (26, 1 << 13), (0, 0), (16, 99)]
    raw = b"".join(k.to_bytes(word, sys.byteorder) + v.to_bytes(word, sys.byteorder) for k, v in pairs)
    assert system.parse_auxv(raw) == {6: 4096, 16: 0x100002, 26: 1 << 13}


def test_arm_features_come_from_the_hwcaps_when_given():
    sections = [{"Features": "fp asimd"}]
    assert system.isa_features(sections, "aarch64", {"asimd", "asimddp", "i8mm"}) == ["asimd", "asimddp", "i8mm"]
    assert system.isa_features(sections, "aarch64") == ["asimd"]  # the fallback: the Features line


def test_qemu_user_mode_is_recognised():
    x86_cpuinfo = [{"processor": "0", "flags": "fpu avx2"}]
    assert system.emulation(x86_cpuinfo, "aarch64").startswith("QEMU user mode")
    assert system.emulation([{"Features": "fp asimd"}], "aarch64") is None
    assert system.emulation(x86_cpuinfo, "x86_64") is None


@pytest.mark.skipif(ARCH != "aarch64" or not sys.platform.startswith("linux"), reason="reads this aarch64 CPU's HWCAPs")
def test_this_cpus_hwcaps_are_read():
    caps = system.arm_hwcaps()
    assert caps is not None and "asimd" in caps[0] and caps[1].startswith("HWCAP")


# --- LLVM, asked in a subprocess -------------------------------------------------------------------

def test_llvm_probe_tells_a_feature_the_target_has_from_one_it_lacks(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMVBW_CACHE_DIR", str(tmp_path))
    host = tiers.numba_target({})
    if ARCH == "x86_64":
        feature, with_it, without = "avx2", ("haswell", ""), ("x86-64", "")
    elif ARCH == "aarch64":
        feature, with_it, without = "dotprod", ("cortex-a76", ""), ("cortex-a53", "")
    else:
        pytest.skip(f"no probe for {ARCH}")
    yes = tiers.Target(host.triple, *with_it, "test", "test")
    no = tiers.Target(host.triple, *without, "test", "test")
    assert tiers.probe_feature(yes, feature) is True
    assert tiers.probe_feature(no, feature) is False  # LLVM aborted in the subprocess; this process goes on
    cached = json.loads((tmp_path / "llvm-features.json").read_text())
    assert sorted(cached.values()) == [False, True]


COMPILE_ONLY = textwrap.dedent("""
    import sys, numpy as np, numba
    from gemvbw.kernels import packed, streams, tile
    layout, tier, bits = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a8, a16 = np.zeros(1, np.uint8), np.zeros(1, np.uint16)
    f32 = np.zeros(1, np.float32)
    rest = (a8, np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.uint16), np.zeros((1, 1), np.uint16), f32, 64, f32, 1)
    if layout == "4x2":  # (tag, copy, metadata, workspace, ...)
        args = (packed.KernelTag(tier, bits), a8, a16, *rest)
    else:  # the tiles hold their own metadata; "c4-prfm": the twin that prefetches
        prfm = layout == "c4-prfm"
        ahead, nstreams = (tile.prfm_ahead(bits), tile.prfm_streams(bits)) if prfm else (None, tile.plain_streams(bits))
        args = (tile.TileTag(tier, bits, 2, ahead, nstreams), a8, a8, *rest)
    fn = streams.gemv_streams
    sig = tuple(fn.typeof_pyval(a) for a in args)
    fn.compile(sig)  # compiled for the CPU numba was told; never called
    asm = fn.inspect_asm(sig)
    lines = [" ".join(l.split()) for l in asm.splitlines()]
    print(sum(1 for l in lines if l.split() and not l.startswith(".")))
    for pattern in sys.argv[4:]:
        print(pattern, sum(1 for l in lines if __import__("re").search(pattern, l)))
""")

# tier -> (a CPU name whose LLVM model has it, patterns that must appear in its code, patterns that must not)
FOREIGN = {
    "avx512vnni": ("znver4", [r"^vpdpbusd .*ymm"], [r"\{vex\}", r"vpmaddubsw"]),
    "avx512vnni-zmm": ("sapphirerapids", [r"^vpdpbusd .*zmm"], [r"vpmaddubsw"]),
    "avxvnni": ("alderlake", [r"^\{vex\} vpdpbusd"], [r"zmm", r"vpmaddubsw"]),
    # Skylake-X: 512-bit vpmaddubsw and vpmaddwd, nothing of VNNI (LLVM fuses vpmaddwd + vpaddd into vpdpwssd
    # where the target has it)
    "avx512bw": ("skylake-avx512", [r"^vpmaddubsw .*zmm", r"^vpmaddwd .*zmm"], [r"vpdpbusd", r"vpdpwssd"]),
    "avx2": ("haswell", [r"^vpmaddubsw", r"^vpmaddwd"], [r"vpdpbusd", r"zmm"]),
    "neon-dotprod": ("cortex-a76", [r"^sdot"], [r"smull"]),
    "neon": ("cortex-a53", [r"^smull", r"^s(ad|addl)alp|^saddlp"], [r"sdot"]),
}


@pytest.mark.parametrize("bits", [8, 3])
@pytest.mark.parametrize("tier", sorted(FOREIGN))
def test_every_tier_compiles_to_its_instructions(tier, bits, tmp_path):
    """Run for the tiers of this architecture; for one this machine lacks, the code is only compiled."""
    if by_name(tier).arch != ARCH:
        pytest.skip(f"{tier} is an {by_name(tier).arch} tier; numba here targets {ARCH} only")
    emulated = os.environ.get("GEMVBW_EMULATED_CPU")
    if emulated and emulated != "max":
        # what LLVM emits for the CPU it is told does not depend on the CPU QEMU emulates: done once, under the
        # model that has every ARM tier (each compile here took 7-9 min under QEMU, three models side by side)
        pytest.skip(f"emulated: the code is checked under QEMU_CPU=max, which runs every ARM tier; not again on "
                    f"{emulated}")
    if emulated and tier in {t.name for t in tiers.usable()} and bits != 8:
        # compiling is 8x slower there; a tier this CPU has is run (exact) in test_kernels.py, and its code
        # looked at here for one width only
        pytest.skip(f"emulated: {tier} runs on this CPU and is verified in test_kernels.py; its code is checked at w8")
    cpu, present, absent = FOREIGN[tier]
    if (tier, bits) == ("avx512vnni-zmm", 3):  # w3's 48-byte row pair stays on 256-bit registers
        present = [r"vpdpbusd .*ymm"]  # (VEX-encoded where the CPU has AVX-VNNI too)
    if (tier, bits) == ("avx512bw", 3):
        present = [r"^vpmaddubsw .*ymm", r"^vpmaddwd .*ymm"]
    # w8 does not prefetch; w3 does, 2 KiB ahead: prefetcht0 on x86 (prefetchnta lost there), pldl1strm on ARM
    hint, other = (r"^prfm\s+pldl1strm", r"^prfm\s+pldl1keep") if by_name(tier).arch == "aarch64" else (
        r"^prefetcht0", r"^prefetchnta")
    if bits == 8:
        absent = [*absent, r"^prfm|^prefetch"]
    else:
        present, absent = [*present, hint], [*absent, other]
    _compiled_for(cpu, "4x2", tier, bits, present, absent, tmp_path)


# a step called, not inlined: LLVM once kept the neon tier's out of line (a call per block pair in the hot loop)
STEP_CALLED = r"^(call|bl)\s.*_step"


def _compiled_for(cpu, layout, tier, bits, present, absent, tmp_path):
    absent = [*absent, STEP_CALLED]
    env = {**os.environ, "NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": "", "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", COMPILE_ONLY, layout, tier, str(bits), *present, *absent],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines()[1:])
    for pattern in present:
        assert int(counts[pattern]) > 0, f"{tier} for {cpu}: no {pattern} in its code"
    for pattern in absent:
        assert int(counts[pattern]) == 0, f"{tier} for {cpu}: {pattern} in its code"


# the column tiles: vpdpbusd with the four activations broadcast, on R rows per register, no reduction
TILE_FOREIGN = {
    "avx512vnni": ("znver4", [r"^vpdpbusd .*\{1to8\}.*ymm"], [r"vpdpbusd .*zmm", r"vphaddd", r"\{vex\}"]),
    "avx512vnni-zmm": ("sapphirerapids", [r"^vpdpbusd .*\{1to16\}.*zmm"], [r"vphaddd"]),
    "avxvnni": ("alderlake", [r"^\{vex\} vpdpbusd .*ymm", r"^vpbroadcastd"], [r"zmm", r"vphaddd", r"\{1to"]),
}


@pytest.mark.parametrize("bits", [4, 3])  # one plane, and w3's two
@pytest.mark.parametrize("tier", sorted(TILE_FOREIGN))
def test_column_tiles_compile_to_broadcast_dot_products(tier, bits, tmp_path):
    if ARCH != "x86_64":
        pytest.skip(f"{tier} is an x86_64 tier; numba here targets {ARCH} only")
    cpu, present, absent = TILE_FOREIGN[tier]
    if bits == 3 and tier != "avxvnni":  # w3's split groups (a field of low bits, one of high) multiply the same
        # four activations twice: LLVM broadcasts each such word into a register once for both
        present = [r"^vpdpbusd .*" + ("zmm" if tier.endswith("zmm") else "ymm"), r"^vpbroadcastd"]
    _compiled_for(cpu, "c4", tier, bits, present, [*absent, r"^prefetch"], tmp_path)


def test_the_prefetching_tile_prefetches(tmp_path):
    if ARCH != "x86_64":
        pytest.skip(f"the column tiles are x86_64's; numba here targets {ARCH} only")
    cpu, present, absent = TILE_FOREIGN["avx512vnni-zmm"]
    _compiled_for(cpu, "c4-prfm", "avx512vnni-zmm", 4, [*present, r"^prefetcht0"], [*absent, r"^prefetchnta"],
                  tmp_path)


def test_sweep_refuses_a_numba_target_this_cpu_cannot_run(tmp_path):
    """NUMBA_CPU_NAME naming a CPU with features this one lacks: a clear exit 2 before anything compiles."""
    here = set(system.describe_cpu()["isa"])
    names = {"x86_64": [("sapphirerapids", "avx512_vnni"), ("alderlake", "avx_vnni"), ("haswell", "avx2")],
             "aarch64": [("neoverse-n2", "i8mm"), ("cortex-a76", "asimddp")]}.get(ARCH, [])
    foreign = next((cpu for cpu, flag in names if flag not in here), None)
    if foreign is None:
        pytest.skip("this CPU has every feature of the CPUs the test can name")
    env = {**os.environ, "NUMBA_CPU_NAME": foreign, "NUMBA_CPU_FEATURES": "", "GEMVBW_CACHE_DIR": str(tmp_path),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    done = subprocess.run([sys.executable, "-m", "gemvbw", "sweep", "--M", "8", "--K", "64", "--iters", "1",
                           "--reps", "1"], capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith(f"Error: NUMBA_CPU_NAME: numba would compile for {foreign} with +")
    assert "SIGILL" in done.stderr and "Traceback" not in done.stderr


def test_info_names_the_tiers(tmp_path):
    from click.testing import CliRunner

    from gemvbw.cli import main

    res = CliRunner().invoke(main, ["info"])
    assert res.exit_code == 0, res.output
    usable = [t.name for t in tiers.usable()]
    line = next(l for l in res.output.splitlines() if l.startswith("int8 tiers:"))
    if usable:
        names = [v for n in usable for v in by_name(n).variants()]
        preferred = kernels.variants(4, "i8")[0].variant
        # "(preferred ...)" only where there is a choice (one tier, such as a Cortex-A53's, has none)
        assert line.startswith(f"int8 tiers: {preferred} (preferred" if len(names) > 1 else f"int8 tiers: {preferred}:")
        assert all(v in line for v in names)
    else:
        assert "none usable here" in line
    for s in tiers.report().statuses:
        if not s.usable:
            assert f"  {', '.join(s.tier.variants())}: not usable: {s.reason}" in res.output
    doc = json.loads(CliRunner().invoke(main, ["info", "--format", "json"]).stdout)
    assert [t["name"] for t in doc["tiers"]["tiers"] if t["usable"]] == usable
