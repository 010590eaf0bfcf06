"""A sweep, start to end: system facts, rooflines, then per width: pack, verify, time; then the read roofline again.

The record is filled in as measurements arrive and handed to the reporter and
exporters at once, so an interrupted run still has everything it measured.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Protocol

import numba
import numpy as np

from gemvbw import calibrate, contention, kernels, system
from gemvbw.compare import compare
from gemvbw.harness import (FIXED_COST_CALLS, CacheFlusher, FixedCost, Group, fixed_cost_shape,
                            measure_call_overhead, measure_fixed_cost, time_groups)
from gemvbw.quant import random_activations, random_quantized
from gemvbw.results import (KernelFailure, KernelResult, Note, SweepRecord, result_notes, roofline_moved_notes,
                            run_notes)
from gemvbw.sampling import Sampler, frequency_findings
from gemvbw.roofline import measure_roofline, read_bandwidth, read_buffer_bytes
from gemvbw.settings import Settings, SettingsError, check_act, llc_in_force
from gemvbw.verify import activation_error, reference_gemv, verify


def fixed_cost_call(spec: kernels.KernelSpec, bits: int, block: int,
                    meta_bytes: int) -> tuple[Callable[[], None], int, int]:
    """A call of ``spec`` bound to the tiny matrix its fixed cost is measured on (of this width, block and metadata;
    :func:`gemvbw.harness.fixed_cost_shape`), and that matrix's M and K."""
    M, K = fixed_cost_shape(block)
    tiny = random_quantized(M, K, bits, block=block, meta_bytes=meta_bytes, seed=0)
    x, y = random_activations(K, 0), np.empty(M, np.float32)
    run = spec.bind(tiny)
    return kernels.call_on(run, x, y), M, K


def fixed_cost(spec: kernels.KernelSpec, qm, flusher: CacheFlusher, calls: int) -> FixedCost:
    """The kernel's fixed cost (see :class:`gemvbw.harness.FixedCost`): the same variant bound to a tiny matrix
    of qm's width, block and metadata, timed after the run's flush, ``calls`` times. Its y is not checked: the
    kernel was verified on the run's shape, and a tiny call's figure is a latency, not a bandwidth."""
    call, M, K = fixed_cost_call(spec, qm.bits, qm.block, qm.meta_bytes)
    return measure_fixed_cost(call, M, K, flusher, calls)


class Reporter(Protocol):
    """What a screen renderer is told during a run (formats only; computes nothing)."""

    def start(self, record: SweepRecord, total_groups: int) -> None: ...
    def roofline(self, record: SweepRecord) -> None: ...
    def group_done(self, label: str, index: int, group: Group) -> None: ...
    def result(self, record: SweepRecord, result: KernelResult) -> None: ...
    def failure(self, record: SweepRecord, failure: KernelFailure) -> None: ...
    def finish(self, record: SweepRecord) -> None: ...


Exporter = Callable[[SweepRecord], None]


def plan_width(bits: int, settings: Settings, record: SweepRecord | None = None, qm=None,
               x=None, flusher: CacheFlusher | None = None) -> list[tuple[str, list[kernels.KernelSpec]]]:
    """What to measure for a width: per activation type (--act auto: int8 where a kernel exists for this
    CPU and block, else f32), the variants; with --kernel auto, the one calibrated on this shape, each call
    after ``flusher``'s flush (the one the run times with). The choices and their reasons are recorded."""
    plan = []
    for act, _ in kernels.acts_for(bits, settings.block, settings.act, settings.kernel):
        if settings.kernel == "all":
            specs = kernels.variants(bits, act)
        elif settings.kernel == "auto":
            choice = calibrate.choose(bits, act, settings.threads, qm, x, recalibrate=settings.recalibrate,
                                      flusher=flusher)
            if record is not None:
                record.kernel_choice[choice_name(bits, settings, qm)] = choice.to_dict()
            specs = [choice.spec]
        else:
            specs = [kernels.get(bits, act, settings.kernel)]
        plan.append((act, specs))
    return plan


def choice_name(bits: int, settings: Settings, qm=None) -> str:
    return f"w{bits}" if qm is None or len(settings.shape_list) == 1 else f"w{bits} {qm.M}x{qm.K}"


class Sweep:
    def __init__(self, settings: Settings, reporter: Reporter, exporters: Iterable[Exporter] = (),
                 baseline: tuple[str, dict] | None = None):
        self.settings = settings
        self.baseline = baseline  # (label, JSON document) of the run being repeated (--rerun)
        self.reporter = reporter
        self.exporters = list(exporters)
        self.record = SweepRecord(system={}, settings=settings.to_dict())
        self.export_errors: list[str] = []  # files that could not be written; the run goes on

    def _export(self) -> None:
        for export in self.exporters:
            try:
                export(self.record)
            except OSError as exc:  # a full disk, a file removed under us: keep measuring, say it at the end
                message = f"could not write {exc.filename or 'a result file'} ({exc.strerror or exc})"
                if message not in self.export_errors:
                    self.export_errors.append(message)

    def run(self) -> SweepRecord:
        s, rec = self.settings, self.record
        numba.set_num_threads(s.threads)
        rec.system = system.describe()
        llc, llc_source = llc_in_force(s.llc_mib, rec.system.get("llc_bytes"))
        rec.system["llc_bytes_used"] = llc
        rec.system["flush_threads"] = numba.get_num_threads()  # each reads the whole flush (CacheFlusher)
        rec.notes.extend(run_notes(s.flush_mib, llc, s.threads, len(rec.system["affinity"]), llc_source,
                                   s.block, min(K for _, K in s.shape_list), rec.system["affinity_mixed"],
                                   s.act, _usable("i8", s.bits, s.block), rec.system.get("emulated"),
                                   s.thread_limit))
        for b in s.bits:  # known before anything is compiled: the header says it
            rec.act_choice[f"w{b}"] = [{"act": a, "why": why} for a, why in kernels.acts_for(b, s.block, s.act, s.kernel)]
        per_width = [sum(len(kernels.variants(b, a)) if s.kernel == "all" else 1
                         for a, _ in kernels.acts_for(b, s.block, s.act, s.kernel)) for b in s.bits]
        total = sum(per_width) * s.reps * (2 if s.compare_warm else 1) * len(s.shape_list)
        self.reporter.start(rec, total)

        rec.roofline = measure_roofline(s.threads, llc)
        # the flush buffer after the rooflines' buffers are freed: check_memory counts them never alive together
        flusher = CacheFlusher(s.flush_mib)
        rec.overhead = measure_call_overhead(s.threads, flusher=flusher)
        rec.system.update(system.numba_threading())  # the threading layer is known once a parallel call ran
        self.reporter.roofline(rec)
        self._export()

        self.no_flush = CacheFlusher(0)
        self.sampler = Sampler(rec.system["affinity"])
        for M, K in s.shape_list:
            x = random_activations(K, s.seed)
            y = np.empty(M, dtype=np.float32)
            for bits in s.bits:
                qm = random_quantized(M, K, bits, s.block, s.meta_bytes, seed=s.seed + bits)
                exact = None
                try:
                    plan = plan_width(bits, s, rec, qm, x, flusher)
                except calibrate.CalibrationFailed as exc:  # a failed row, like a verification failure
                    self._fail(KernelFailure(bits, M, K, "auto", f"--kernel auto: {exc}"))
                    continue
                for act, specs in plan:
                    # each activation type has its reference: int8 kernels are checked against the product
                    # with the same quantized x, and what quantizing x alone costs is reported beside
                    reference = reference_gemv(qm, specs[0].reference_x(x, qm.block))
                    act_err = None
                    if specs[0].activations is not None:
                        exact = exact or reference_gemv(qm, x)
                        act_err = activation_error(exact, reference)
                    elif exact is None:
                        exact = reference
                    for spec in specs:
                        if not self._measure(spec, qm, x, y, reference, flusher, llc, act_err) and s.kernel == "auto":
                            self._fall_back(spec, act, qm, x, y, reference, flusher, llc, act_err)
                    del reference
                del qm, exact
        del flusher  # its buffer is never alive with the roofline's (check_memory counts them apart)
        self._read_again(llc)
        rec.partial = False
        self._compare()
        self.reporter.finish(rec)
        self._export()
        return rec

    def _read_again(self, llc) -> None:
        """The read roofline once more, the rows done: a bandwidth that moved during the run gets a note
        (:func:`gemvbw.results.roofline_moved_notes`), since every %read was taken against the first."""
        rec = self.record
        if not rec.results:  # no %read to qualify
            return
        numba.set_num_threads(self.settings.threads)  # as for the first (a kernel's session may have changed it)
        rec.read_after = read_bandwidth(self.settings.threads, read_buffer_bytes(llc))
        rec.notes.extend(roofline_moved_notes(rec.roofline.read, rec.read_after, rec.results))

    def _fall_back(self, failed, act, qm, x, y, reference, flusher, llc, act_err) -> None:
        """--kernel auto's choice failed verification on this shape (a cached choice is not verified again
        before it is used): its failed row stays, and the choice is made again without it."""
        s, rec = self.settings, self.record
        try:
            choice = calibrate.choose(qm.bits, act, s.threads, qm, x, recalibrate=True,
                                      exclude=frozenset({failed.variant}), flusher=flusher)
        except calibrate.CalibrationFailed:
            return
        name = choice_name(qm.bits, s, qm)
        rec.kernel_choice[name] = {**choice.to_dict(), "source": f"{choice.source}, after {failed.variant} failed "
                                                                 "verification"}
        self._measure(choice.spec, qm, x, y, reference, flusher, llc, act_err)

    def _measure(self, spec, qm, x, y, reference, flusher, llc, act_err=None) -> bool:
        """Verify, then time (in the variant's session: numpy's BLAS threads for blas); False when the
        kernel failed (its failed row is recorded)."""
        with spec.session(self.settings.threads):
            return self._measure_in_session(spec, qm, x, y, reference, flusher, llc, act_err)

    def _measure_in_session(self, spec, qm, x, y, reference, flusher, llc, act_err=None) -> bool:
        s, rec = self.settings, self.record
        try:
            check = verify(spec, qm, x, reference)
        except Exception as exc:  # a kernel that cannot run is a failed row, not a crash
            self._fail(KernelFailure(qm.bits, qm.M, qm.K, spec.variant, f"kernel raised {type(exc).__name__}: {exc}",
                                     act=spec.act))
            return False
        if not check.ok:
            self._fail(KernelFailure(
                qm.bits, qm.M, qm.K, spec.variant,
                f"FAILED verification: max rel err {check.max_rel_err:.2e} > tolerance {check.tolerance:.0e}",
                check.max_rel_err, check.tolerance, act=spec.act,
            ))
            return False
        run = spec.bind(qm)
        label = f"w{qm.bits} {spec.variant}"
        samples = [self.sampler.sample()]

        def group_done(i, g):
            samples.append(self.sampler.sample())
            self.reporter.group_done(label, i, g)

        before = contention.snapshot()
        measurement = time_groups(kernels.call_on(run, x, y), s.iters, s.reps, flusher, on_group=group_done,
                                  max_seconds=s.max_seconds, switches=contention.involuntary_switches)
        held = contention.between(before, contention.snapshot(), measurement)
        warm = None
        if s.compare_warm:
            warm = time_groups(kernels.call_on(run, x, y), s.iters, s.reps, self.no_flush,
                               on_group=lambda i, g: self.reporter.group_done(label + " warm", i, g))
        # as many calls as the row had, up to FIXED_COST_CALLS: a quick run (--iters 2) stays quick
        fixed = fixed_cost(spec, qm, flusher, min(FIXED_COST_CALLS, s.iters * s.reps))
        result = KernelResult(
            qm.bits, qm.M, qm.K, qm.block, qm.meta_bytes, numba.get_num_threads(), spec.act, spec.variant, measurement,
            qm.logical_bytes, qm.nbytes, check.max_rel_err, rec.roofline, warm=warm, act_quant_err=act_err,
            contention=held, fixed_cost=fixed,
        )
        resident = qm.nbytes + x.nbytes + y.nbytes
        notes = result_notes(measurement, result.eff_gbps, rec.overhead, rec.roofline, resident, llc, s.flush_mib,
                             measurement_has_warm=warm is not None, fixed_cost=fixed)
        notes += tuple(Note(code, message, "let the device cool, set the performance governor where you may, "
                            "and compare with gemvbw soak")
                       for code, message in frequency_findings(samples, self.sampler.max_mhz))
        if held["contended"]:
            notes += (Note("contention", contention.message(held),
                           "close other programs, use fewer threads than CPUs, or rerun when the machine is quiet"),)
        if spec.facts is not None:
            notes += (Note("library", f"ran {spec.facts()}", "compare with the numba variants of the same width"),)
        result = replace(result, notes=notes, samples=tuple(samples))
        rec.results.append(result)
        self.reporter.result(rec, result)
        self._export()
        return True

    def _compare(self) -> None:
        if self.baseline is not None:
            label, doc = self.baseline
            self.record.comparison = compare([doc, self.record.to_dict()], [label, "this run"])

    def _fail(self, failure: KernelFailure) -> None:
        self.record.failures.append(failure)
        self.reporter.failure(self.record, failure)
        self._export()

    def interrupted(self, why: str) -> SweepRecord:
        """Close the record after a signal: what was measured stays, marked partial."""
        self.record.partial = True
        self.record.interrupted = why
        self._compare()
        self.reporter.finish(self.record)
        self._export()
        return self.record


def _usable(act: str, bits: tuple[int, ...], block: int) -> bool:
    """Whether --act act would pass validation for these widths and block (the same check as settings)."""
    try:
        check_act(act, bits, block)
    except SettingsError:
        return False
    return True
