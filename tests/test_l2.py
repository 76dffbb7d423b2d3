"""l2-breakpoints: planted L2 shifts found (exactly on clean data), rules, both ncu pages, bad inputs."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.conftest import SAMPLES, real_trace
from veotrace.analysis.l2.changepoints import match_f1
from veotrace.analysis.l2.l2 import find_breakpoints
from veotrace.sources.nsight.ncu import read_metrics
from veotrace.synth.ncu import HIT, THROUGHPUT, planted_l2

TOLERANCE = 3


def _found(result) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for b in result.breakpoints.to_pylist():
        out.setdefault(b["kernel"], []).append(b["launch_index"])
    return out


def test_clean_data_every_planted_break_exact_with_ids_and_rules(tmp_path):
    truth = planted_l2(seed=11, kernels=4, launches=[100, 400, 1500, 3000], breaks=[2, 5, 12, 25], sigma=0.0)
    res = find_breakpoints(read_metrics(truth.write_details(tmp_path / "d.csv")))
    found = _found(res)
    rows = res.breakpoints.to_pylist()
    for k in truth.kernels:
        assert found[k] == truth.breaks[k]
        mine = [r for r in rows if r["kernel"] == k]
        assert [r["id"] for r in mine] == [int(truth.ids[k][t]) for t in truth.breaks[k]]
        assert [r["rules"].split(";") if r["rules"] else [] for r in mine] == truth.rules[k]
        miss = truth.miss_rate(k)
        edges = [0, *truth.breaks[k], miss.size]
        for j, r in enumerate(mine):
            assert r["mean_before"] == pytest.approx(miss[edges[j]:edges[j + 1]].mean())
            assert r["mean_after"] == pytest.approx(miss[edges[j + 1]:edges[j + 2]].mean())
            assert r["jump"] == pytest.approx(r["mean_after"] - r["mean_before"])
            assert r["metric"] == "l2_miss_rate.pct"


def test_two_sigma_jumps_precision_and_recall_at_least_0_9():
    hits = found_total = truth_total = 0
    for seed in range(4):
        truth = planted_l2(seed=seed, kernels=4, launches=[100, 1000, 5000, 20000], breaks=[2, 10, 40, 100],
                           sigma=1.0, jump_sigmas=2.0, min_gap=20)
        from veotrace.analysis.l2 import changepoints

        for k in truth.kernels:
            got = changepoints.detect(truth.miss_rate(k))
            p, _, _ = match_f1(got, truth.breaks[k], TOLERANCE)
            hits += round(p * len(got))
            found_total += len(got)
            truth_total += len(truth.breaks[k])
    precision, recall = hits / found_total, hits / truth_total
    assert precision >= 0.9 and recall >= 0.9, (precision, recall)


def test_two_sigma_jumps_through_the_csv_reader(tmp_path):
    truth = planted_l2(seed=5, kernels=3, launches=[300, 800, 2000], breaks=[3, 8, 20], sigma=1.0)
    res = find_breakpoints(read_metrics(truth.write_details(tmp_path / "d.csv")))
    found = _found(res)
    f1s = [match_f1(found.get(k, []), truth.breaks[k], TOLERANCE)[2] for k in truth.kernels]
    assert min(f1s) >= 0.85 and np.mean(f1s) >= 0.9
    assert all(r["z_score"] > 3 for r in res.breakpoints.to_pylist())


def test_details_and_raw_page_give_the_same_result(tmp_path):
    truth = planted_l2(seed=7, kernels=3, launches=[150, 300, 600], breaks=[2, 4, 6], sigma=0.8)
    a = find_breakpoints(read_metrics(truth.write_details(tmp_path / "d.csv")))
    b = find_breakpoints(read_metrics(truth.write_raw(tmp_path / "r.csv", separators=False)))
    assert a.breakpoints.to_pylist() == b.breakpoints.to_pylist()
    assert a.kernels == b.kernels and a.rules == b.rules


def test_metric_by_label_and_kernel_filter(tmp_path):
    truth = planted_l2(seed=3, kernels=3, launches=200, breaks=2, sigma=0.0)
    table = read_metrics(truth.write_details(tmp_path / "d.csv"))
    res = find_breakpoints(table, metric="L2 Hit Rate", kernel="^reduce")
    assert res.params["metric"] == HIT
    assert [k["kernel"] for k in res.kernels] == [truth.kernels[1]]
    rows = res.breakpoints.to_pylist()
    assert [r["launch_index"] for r in rows] == truth.breaks[truth.kernels[1]]
    miss = find_breakpoints(table, kernel="^reduce").breakpoints.to_pylist()
    assert [r["jump"] for r in rows] == pytest.approx([-r["jump"] for r in miss])  # miss = 100 - hit


def test_rule_with_absent_metrics_says_not_evaluated(tmp_path):
    truth = planted_l2(seed=2, kernels=1, launches=200, breaks=2, sigma=0.0)
    lines = [ln for ln in truth.details_lines() if "lts__t_requests.sum" not in ln and "op_read" not in ln]
    path = tmp_path / "d.csv"
    path.write_text("\n".join(lines) + "\n")
    res = find_breakpoints(read_metrics(path))
    status = {r["name"]: r["status"] for r in res.rules}
    assert status["l2_throughput_low"] == "evaluated"
    assert status["bytes_per_request_drop"] == "not evaluated: missing lts__t_requests.sum"
    assert status["read_sector_slope_rise"].startswith("not evaluated: missing lts__t_sectors_op_read.sum")
    fired = {r for b in res.breakpoints.to_pylist() for r in (b["rules"] or "").split(";") if r}
    assert fired <= {"l2_throughput_low"}


def test_na_launches_are_left_out_but_keep_their_launch_index(tmp_path):
    truth = planted_l2(seed=4, kernels=1, launches=120, breaks=1, sigma=0.0)
    k = truth.kernels[0]
    t = truth.breaks[k][0]
    lines = truth.details_lines()
    target = f'"{int(truth.ids[k][3])}",'
    lines = [ln.rsplit(",", 1)[0] + ',"n/a"' if ln.startswith(target) and f'"{HIT}"' in ln else ln for ln in lines]
    path = tmp_path / "d.csv"
    path.write_text("\n".join(lines) + "\n")
    res = find_breakpoints(read_metrics(path))
    assert res.kernels[0]["missing_values"] == 1 and res.kernels[0]["launches"] == 120
    assert [b["launch_index"] for b in res.breakpoints.to_pylist()] == [t]


def test_cli_json_csv_table(cli, tmp_path):
    truth = planted_l2(seed=9, kernels=2, launches=[100, 250], breaks=[1, 3], sigma=0.0)
    path = truth.write_details(tmp_path / "d.csv")
    r = cli("l2-breakpoints", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    bps = doc["breakpoints"]
    assert {tuple(sorted(b)) for b in bps} == {tuple(sorted(("kernel", "metric", "launch_index", "id", "mean_before",
                                                            "mean_after", "jump", "z_score", "rules")))}
    assert sorted((b["kernel"], b["launch_index"]) for b in bps) == sorted(
        (k, t) for k in truth.kernels for t in truth.breaks[k])
    assert {k["kernel"] for k in doc["kernels"]} == set(truth.kernels)
    assert [r["status"] for r in doc["rules"]] == ["evaluated"] * 3
    r = cli("l2-breakpoints", path, "--format", "csv", "--rules", "none", "--metric", THROUGHPUT)
    assert r.exit_code == 0 and r.stdout.startswith('"kernel","metric","launch_index","id"')
    r = cli("l2-breakpoints", path)
    assert r.exit_code == 0 and "Breakpoints" in r.stdout and "B/req" in r.stdout and "evaluated" in r.stdout


def test_sample_file_runs(cli):
    r = cli("l2-breakpoints", SAMPLES / "ncu" / "l2_details.csv", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["breakpoints"]) >= 1


def test_real_2020_file_by_sol_label(cli):
    path = real_trace("andrewxu_nsight_cfd_097K.log")
    r = cli("l2-breakpoints", path, "--metric", "SOL L2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["params"]["metric"] == THROUGHPUT
    assert sum(k["launches"] for k in doc["kernels"]) == 100
    status = {s["name"]: s["status"] for s in doc["rules"]}
    assert status["bytes_per_request_drop"].startswith("not evaluated: missing")


# ---- bad input: one Error: line, an exit code, never a traceback ----

def _one_error(r, code: int, *needles: str) -> None:
    assert r.exit_code == code, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_bad_csv_not_from_ncu(cli, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("name,value\na,1\n")
    _one_error(cli("l2-breakpoints", path), 1, "x.csv")
    alloc = tmp_path / "alloc.csv"
    alloc.write_text("timestamp,op_type,size_bytes\n1,alloc,10\n")
    _one_error(cli("l2-breakpoints", alloc), 1, "holds no Nsight Compute metrics")
    forced = cli("l2-breakpoints", path, "--format-hint", "ncu-csv")
    _one_error(forced, 1, "no ncu CSV header")


def test_bad_metric_not_in_file_lists_close_names(cli, tmp_path):
    path = planted_l2(seed=1, kernels=1, launches=50, breaks=1).write_details(tmp_path / "d.csv")
    _one_error(cli("l2-breakpoints", path, "--metric", "lts__throughput.avg.pct_of_peak"), 1,
               "'lts__throughput.avg.pct_of_peak' is not in the input", THROUGHPUT)
    _one_error(cli("l2-breakpoints", path, "--metric", "gpu__time_durtion.sum"), 1, "Close names", "gpu__time_duration.sum")


def test_bad_kernel_filter_matching_nothing(cli, tmp_path):
    path = planted_l2(seed=1, kernels=1, launches=8, breaks=0).write_details(tmp_path / "d.csv")
    _one_error(cli("l2-breakpoints", path, "--kernel", "nomatch"), 1, "no kernel name matches")


def test_bad_unparseable_value(cli, tmp_path):
    truth = planted_l2(seed=1, kernels=1, launches=40, breaks=1)
    lines = truth.details_lines()
    i = next(j for j, ln in enumerate(lines) if HIT in ln and ln.startswith('"5",'))
    lines[i] = lines[i].rsplit(",", 1)[0] + ',"12.3.4"'
    path = tmp_path / "d.csv"
    path.write_text("\n".join(lines) + "\n")
    _one_error(cli("l2-breakpoints", path), 1, f"d.csv:{i + 1}", "'12.3.4' is not a number", "--skip-bad-rows")
    r = cli("l2-breakpoints", path, "--skip-bad-rows", "--format", "json")
    assert r.exit_code == 0 and "skipped 1 bad row" in r.stderr


def test_bad_options_are_usage_errors(cli, tmp_path):
    path = planted_l2(seed=1, kernels=1, launches=50, breaks=1).write_details(tmp_path / "d.csv")
    _one_error(cli("l2-breakpoints", path, "--rules", "bogus"), 2, "unknown rule 'bogus'")
    _one_error(cli("l2-breakpoints", path, "--kernel", "("), 2, "not a regular expression")
    _one_error(cli("l2-breakpoints", path, "--min-size", "0"), 2, "--min-size")
    _one_error(cli("l2-breakpoints", path, "--penalty-scale", "-1"), 2, "--penalty-scale")


def test_empty_ncu_table(cli, tmp_path):
    path = tmp_path / "h.csv"
    path.write_text(planted_l2(seed=1, kernels=1, launches=5, breaks=0).details_lines()[3] + "\n")
    _one_error(cli("l2-breakpoints", path), 1, "no ncu metric rows")


@pytest.mark.parametrize("gap", [5, 8, 12, 30])
def test_clean_data_exact_with_regimes_as_short_as_min_size(gap):
    from veotrace.analysis.l2 import changepoints

    for seed in range(60):
        truth = planted_l2(seed=seed, kernels=1, launches=400, breaks=10, sigma=0.0, min_gap=gap)
        k = truth.kernels[0]
        assert changepoints.detect(truth.miss_rate(k)) == truth.breaks[k], seed


def test_ncu_rep_without_the_module_names_the_extra(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails as if not installed
    path = real_trace("tanvisharma_3136_64_64_rtx2080ti_sgemm.ncu-rep")
    _one_error(cli("l2-breakpoints", path), 1, "ncu-report", "veotrace[ncu]")


def test_truncated_ncu_rep_is_refused_naming_the_file(cli, tmp_path):
    pytest.importorskip("ncu_report")
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(real_trace("tanvisharma_3136_64_64_rtx2080ti_sgemm.ncu-rep").read_bytes()[:100_000])
    _one_error(cli("l2-breakpoints", cut), 1, "cut.ncu-rep", "no kernel launches", "truncated")


def test_real_ncu_rep_one_launch_gives_the_l2_picture_and_how_to_record_more(cli):
    pytest.importorskip("ncu_report")
    path = real_trace("tanvisharma_3136_64_64_rtx2080ti_sgemm.ncu-rep")
    r = cli("l2-breakpoints", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["breakpoints"] == [] and doc["params"]["metric"] == "l2_miss_rate.pct"
    (k,) = doc["kernels"]
    assert k["kernel"] == "volta_sgemm_32x128_nn" and k["launches"] == 1
    # FORMATS.md B.3: hit rate 85.47, throughput 15.38, 90113 sectors for 61302 requests
    assert k["l2"]["hit_rate_pct"] == pytest.approx(85.47, abs=0.01)
    assert k["l2"]["miss_rate_pct"] == pytest.approx(100 - k["l2"]["hit_rate_pct"])
    assert k["l2"]["l2_throughput_pct"] == pytest.approx(15.38, abs=0.01)
    assert k["l2"]["sectors"] == 90113 and k["l2"]["requests"] == 61302
    assert k["l2"]["bytes_per_request"] == pytest.approx(32 * 90113 / 61302)
    assert k["rules_on_values"] == {"l2_throughput_low": True, "bytes_per_request_drop": False,
                                    "read_sector_slope_rise": None}
    assert k["changepoints"] == {"status": "needs more launches", "launches_needed": 10, "values": 1}
    assert "volta_sgemm_32x128_nn (1 launch)" in r.stderr and "--launch-count 20" in r.stderr
    assert "--launch-skip" in r.stderr and r.stderr.startswith("Note: change points need at least 10")
    table = cli("l2-breakpoints", path)
    assert table.exit_code == 0 and "85.5" in table.stdout and "need 10 launches" in table.stdout


def test_few_launches_per_kernel_picture_is_the_medians_and_named_kernels_need_more(cli, tmp_path):
    truth = planted_l2(seed=6, kernels=3, launches=[3, 8, 40], breaks=[0, 0, 1], sigma=0.0)
    path = truth.write_details(tmp_path / "d.csv")
    r = cli("l2-breakpoints", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    by = {k["kernel"]: k for k in doc["kernels"]}
    for name in truth.kernels:
        s = truth.series[name]
        pic = by[name]["l2"]
        assert pic["hit_rate_pct"] == pytest.approx(np.median(s[HIT]), abs=1e-4)
        assert pic["l2_throughput_pct"] == pytest.approx(np.median(s[THROUGHPUT]))
        assert pic["bytes_per_request"] == pytest.approx(np.median(32 * s["lts__t_sectors.sum"] / s["lts__t_requests.sum"]))
        assert by[name]["rules_on_values"]["l2_throughput_low"] == bool(np.median(s[THROUGHPUT]) < 65)
    short, long_ = truth.kernels[:2], truth.kernels[2]
    assert [by[k]["changepoints"]["status"] for k in short] == ["needs more launches"] * 2
    assert by[long_]["changepoints"]["status"] == "analysed"
    assert [b["launch_index"] for b in doc["breakpoints"]] == truth.breaks[long_]
    (note,) = [ln for ln in r.stderr.splitlines() if ln.startswith("Note:")]
    assert "2 kernels of 3 have fewer" in note and f"{short[0]} (3 launches)" in note and f"{short[1]} (8 launches)" in note
    assert doc["notes"] == [note.removeprefix("Note: ")]


def test_real_2020_details_without_hit_rate_fall_back_to_l2_throughput(cli):
    path = real_trace("andrewxu_nsight_cfd_097K.log")
    r = cli("l2-breakpoints", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["params"]["metric"] == THROUGHPUT and doc["params"]["asked"] is None
    assert doc["params"]["metric_unit"] == "%" and doc["params"]["min_jump"] == 1.0
    assert "Note: the default metric l2_miss_rate.pct" in r.stderr and f"used {THROUGHPUT}" in r.stderr
    assert doc["notes"][0].startswith("the default metric")
    assert {k["kernel"]: k["launches"] for k in doc["kernels"]} == {
        "cuda_compute_step_factor(int,float*,float*,float*)": 15,
        "cuda_compute_flux(int,int*,float*,float*,float*)": 43,
        "cuda_time_step(int,int,float*,float*,float*,float*)": 42}
    assert all(k["changepoints"]["status"] == "analysed" for k in doc["kernels"])
    assert all(k["l2"]["hit_rate_pct"] is None and k["l2"]["l2_throughput_pct"] < 65 for k in doc["kernels"])


def test_real_2020_small_shift_is_not_a_breakpoint_under_the_default_min_jump(cli):
    path = real_trace("andrewxu_nsight_cfd_097K.log")
    doc = json.loads(cli("l2-breakpoints", path, "--format", "json").stdout)
    assert doc["breakpoints"] == []
    merged = {k["kernel"].split("(")[0]: k["changepoints"]["below_min_jump"] for k in doc["kernels"]}
    assert merged["cuda_compute_step_factor"] == 1
    r = cli("l2-breakpoints", path, "--format", "json", "--min-jump", "0", "--kernel", "step_factor")
    (b,) = json.loads(r.stdout)["breakpoints"]
    assert b["mean_before"] == pytest.approx(13.082) and b["mean_after"] == pytest.approx(13.376)
    assert b["z_score"] == pytest.approx(3.30, abs=0.01)


def test_min_jump_absolute_and_relative(cli, tmp_path):
    truth = planted_l2(seed=12, kernels=1, launches=200, breaks=1, sigma=0.05, jump_sigmas=6)  # a 0.3-point step
    path = truth.write_details(tmp_path / "d.csv")
    k = truth.kernels[0]
    runs = {opt: json.loads(cli("l2-breakpoints", path, "-f", "json", *opt).stdout)["breakpoints"]
            for opt in [(), ("--min-jump", "0"), ("--min-jump", "0.2"), ("--min-jump", "0.2%"), ("--min-jump", "5%")]}
    assert runs[()] == [] and runs[("--min-jump", "5%")] == []
    for opt in [("--min-jump", "0"), ("--min-jump", "0.2"), ("--min-jump", "0.2%")]:
        assert [b["launch_index"] for b in runs[opt]] == truth.breaks[k], opt
        assert abs(runs[opt][0]["jump"]) == pytest.approx(0.3, abs=0.02)
    doc = json.loads(cli("l2-breakpoints", path, "-f", "json", "--min-jump", "5%").stdout)
    assert doc["params"]["min_jump"] == 5 and doc["params"]["min_jump_unit"] == "% of the level before"
    _one_error(cli("l2-breakpoints", path, "--min-jump", "abc"), 2, "--min-jump 'abc' is not a number")
    _one_error(cli("l2-breakpoints", path, "--min-jump", "-1"), 2, "--min-jump must be a non-negative number")


def test_default_min_jump_is_relative_for_metrics_not_in_percent(tmp_path):
    truth = planted_l2(seed=3, kernels=1, launches=200, breaks=2, sigma=0.0)
    res = find_breakpoints(read_metrics(truth.write_details(tmp_path / "d.csv")), metric="lts__t_sectors.sum")
    assert res.params["metric_unit"] == "sector" and res.params["min_jump_unit"] == "% of the level before"
    assert res.params["min_jump"] == 5.0


def test_throughput_rule_needs_the_crossing_at_the_break(tmp_path):
    both_low = fired_low = 0
    for seed in range(6):
        truth = planted_l2(seed=seed, kernels=2, launches=300, breaks=4, sigma=0.0)
        res = find_breakpoints(read_metrics(truth.write_details(tmp_path / f"d{seed}.csv")))
        for b in res.breakpoints.to_pylist():
            thr = truth.series[b["kernel"]][THROUGHPUT]
            before, after = thr[b["launch_index"] - 1], thr[b["launch_index"]]
            fired = "l2_throughput_low" in (b["rules"] or "")
            assert fired == (before >= 65 > after), (seed, b)
            both_low += before < 65 and after < 65
            fired_low += fired
    assert both_low >= 3 and fired_low >= 3  # both cases occur


def test_files_are_one_series_in_file_order_even_when_ids_restart(tmp_path):
    from veotrace.sources import read_table

    truth = planted_l2(seed=8, kernels=2, launches=300, breaks=4, sigma=0.0)
    lines = truth.details_lines()
    head, data = lines[:4], lines[4:]
    half = truth.order.size // 2
    first = [ln for ln in data if int(ln.split('"')[1]) < half]
    second = ['"' + str(int(ln.split('"')[1]) - half) + ln[ln.index('"', 1):] for ln in data if int(ln.split('"')[1]) >= half]
    (tmp_path / "a.csv").write_text("\n".join(head + first) + "\n")
    (tmp_path / "b.csv").write_text("\n".join(head + second) + "\n")
    res = find_breakpoints(read_table([tmp_path / "a.csv", tmp_path / "b.csv"], "ncu_metrics"))
    assert _found(res) == truth.breaks


def test_recording_hint_names_the_function_ncu_k_matches():
    from veotrace.analysis.l2.l2picture import function_name

    assert function_name("<unnamed>::saxpy_kernel(float, const float *, float *, int)") == "saxpy_kernel"
    assert function_name("reduce_sum<256>(float*, int)") == "reduce_sum"
    assert function_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)") \
        == "vectorized_elementwise_kernel"
    assert function_name("volta_sgemm_32x128_nn") == "volta_sgemm_32x128_nn"


def test_percent_metrics_without_a_unit_column_still_get_the_points_default():
    # Tables built by hand (no unit) must not fall to the 5%-relative default, which would merge 2-point breaks.
    import pyarrow as pa

    from veotrace.schemas import NCU_METRICS, conform

    truth = planted_l2(seed=2, kernels=1, launches=300, breaks=4, sigma=0.5, jump_sigmas=4, min_gap=30)
    k = truth.kernels[0]
    v = truth.series[k][HIT]
    table = conform(pa.table({"launch_id": truth.ids[k], "kernel": [k] * v.size, "metric": [HIT] * v.size,
                              "value": v, "source_file": ["t"] * v.size}), NCU_METRICS)
    res = find_breakpoints(table)
    assert res.params["metric_unit"] == "%" and res.params["min_jump"] == 1.0
    assert match_f1(_found(res).get(k, []), truth.breaks[k], TOLERANCE)[2] == 1.0


def test_per_kernel_value_flags_are_labelled_informational():
    """Issue 24: thr<65% marks most kernels (normal below L2 peak); it is information, not a break."""
    from tests.conftest import SAMPLES, run_cli

    out = run_cli("l2-breakpoints", SAMPLES / "ncu" / "launch_count_1.csv").stdout
    assert "informational flags" in out and "for information: most kernels run below 65% of L2 peak" in out
