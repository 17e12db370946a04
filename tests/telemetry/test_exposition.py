import math

from infermeter.telemetry.exposition import looks_like_exposition, parse_exposition, parse_line, select

TEXT = r'''# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
odd_label{path="a,b}c",quote="say \"hi\"",nl="x\ny",back="c:\\d"} 7 1700000000000
h_bucket{le="+Inf"} 12
h_bucket{le="0.5"} 4
inf_val -Inf
nan_val NaN
no_labels 1e3
this line is garbage {
spaced_labels{ a = "1" , b="2" ,} 5
# EOF
'''


def test_parse_values_labels_and_escapes():
    exp = parse_exposition(TEXT)
    by = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in exp.samples}
    assert by[("vllm:num_requests_running", (("engine", "0"), ("model_name", "m")))] == 3.0
    odd = next(s for s in exp.samples if s.name == "odd_label")
    assert odd.labels == {"path": "a,b}c", "quote": 'say "hi"', "nl": "x\ny", "back": "c:\\d"}
    assert odd.value == 7.0  # the timestamp is not the value
    assert by[("h_bucket", (("le", "+Inf"),))] == 12.0
    assert by[("inf_val", ())] == -math.inf
    assert math.isnan(by[("nan_val", ())])
    assert by[("no_labels", ())] == 1000.0
    assert by[("spaced_labels", (("a", "1"), ("b", "2")))] == 5.0
    assert exp.bad_lines == 1
    assert len(exp.samples) == 9


def test_comments_and_blank_lines_are_not_samples():
    assert parse_line("# TYPE x counter") is None
    assert parse_line("   ") is None


def test_select_sums_matching_series_and_reports_missing_as_none():
    exp = parse_exposition(TEXT)
    assert select(exp, "vllm:num_requests_running") == 5.0
    assert select(exp, "vllm:num_requests_running", {"engine": "1"}) == 2.0
    assert select(exp, "vllm:num_requests_running", {"engine": "7"}) is None
    assert select(exp, "absent_metric") is None
    assert select(exp, "nan_val") is None  # NaN only: unavailable, not zero


def test_rank0_keeps_rank_zero_or_unlabelled_series():
    exp = parse_exposition('g{tp_rank="0"} 4\ng{tp_rank="1"} 4\ng{dp_rank="1"} 1\n')
    assert select(exp, "g", rank0=("tp_rank",)) == 5.0  # rank 0 plus the series without tp_rank


def test_looks_like_exposition_rejects_json_and_html():
    assert looks_like_exposition("a 1\n")
    assert not looks_like_exposition('{"iteration": 1}')
    assert not looks_like_exposition("<html>nope</html>")
    assert not looks_like_exposition("")
