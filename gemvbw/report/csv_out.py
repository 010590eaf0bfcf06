"""CSV: one row per kernel (failures included, with empty figures)."""

from __future__ import annotations

import csv
import io

from gemvbw.report.json_out import FinalOnlyReporter
from gemvbw.results import SweepRecord

COLUMNS = [
    "type", "variant", "bits", "M", "K", "block", "threads", "act", "meta_bytes",
    "best_avg_us", "overall_mean_us", "overall_sd_us", "median_us", "cv",
    "logical_bytes", "stored_bytes", "bytes_per_elem", "eff_gbps", "pct_peak", "pct_read",
    "gflops", "ai", "memcpy_gbps", "read_gbps", "verified", "max_rel_err", "act_quant_err", "fixed_cost_us", "notes",
    "error",
]


def csv_text(record: SweepRecord) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    rf = record.roofline
    for r in record.results:
        d = r.to_dict()
        # DictWriter leaves a column it is not given empty (error, here), and writes None as empty
        row = {k: d[k] for k in COLUMNS if k in d}
        row.update(type=r.type, memcpy_gbps=rf.memcpy.gbps, read_gbps=rf.read.gbps, verified="true",
                   fixed_cost_us=r.fixed_cost_us,
                   notes=";".join(n.code for n in r.notes))
        w.writerow(row)
    for f in record.failures:
        w.writerow({"type": f.type, "variant": f.variant, "bits": f.bits, "M": f.M, "K": f.K,
                    "verified": "false", "max_rel_err": f.max_rel_err,
                    "error": f.message})
    return out.getvalue()


class CsvReporter(FinalOnlyReporter):
    def text(self, record: SweepRecord) -> str:
        return csv_text(record)
