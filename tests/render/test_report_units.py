"""Issue 30, items 1 and 2: a report shows a rate as a rate, and the shares of a step's time are shares of
the step (communication overlapped with compute takes none of it)."""

from costmodel.render import names, summary
from costmodel.verbs.report import report


def test_throughput_is_a_rate_not_a_duration():
    # "time.tokens_per_s" starts with "time." and ends with "_s": it was shown as 22455.9 s = "6.24 h"
    assert names.unit("time.tokens_per_s") == "rate"
    assert names.unit("time.decode_tokens_per_s") == "rate"
    assert names.show("time.tokens_per_s", 22455.9) == "22,456"
    assert names.unit("time.model_flops_per_s") == "flops"  # the FLOP/s keys keep their unit
    assert names.unit("time.step_s") == "seconds"


def test_report_rows_show_tokens_per_second():
    md = report("gpt2-small", hardware="h100-sxm", devices=8).to_markdown()
    row = next(line for line in md.splitlines() if "`time.tokens_per_s`" in line)
    shown = row.rstrip(" |").rsplit("|", 1)[1].strip()
    assert shown.replace(",", "").isdigit(), row  # "188,957", not "2.2 days"


# the calibrated step of `estimate llama3-8b --batch 8 --flash --hardware h100-sxm --devices 8 --dp 8 --zero 3`
STEP = {
    "time.step_s": 0.8527334672075277,
    "time.breakdown.compute_s": 0.8384771872760091,
    "time.breakdown.exposed_communication_s": 0.0,
    "time.breakdown.hidden_communication_s": 0.11187575933476565,  # overlapped with compute
    "time.breakdown.bubble_s": 0.0,
    "time.breakdown.optimizer_s": 0.014256279931518616,
}


def test_time_shares_are_shares_of_the_step():
    parts = summary.parts_from(STEP, None, {}, 1)
    assert "hidden communication" not in parts
    assert abs(sum(parts.values()) - STEP["time.step_s"]) < 1e-12  # 838.48 + 14.26 = 852.73 ms
    # compute is 838.48 / 852.73 = 98.3 % of the step (it was shown as 838.48 / 964.61 = 86.9 %)
    binding = summary._binding({**STEP, "memory.fits": True}, {"hardware": "h100-sxm", "inference": False}, parts)
    assert binding == "compute (98.3% of the time: compute)"


def test_a_calibrated_step_is_not_called_the_roofline_bound():
    f = {"hardware": "h100-sxm", "inference": False, "basis": "calibrated"}
    v = {"time.devices": 8, "time.step_s": 0.85, "time.tokens_per_s": 76854.0, "mfu": 0.563}
    text = summary._time(v, f)
    assert "calibrated step" in text and "roofline" not in text


def test_a_time_key_without_a_name_reads_as_a_quantity_and_its_unit():
    # issue 30 ("compute s:" labels): the last parts of a key, spaced, read "time kernel launch s"
    assert names.label("time.kernel_launch_s") == "time kernel launch (s)"
    assert names.label("time.breakdown.compute_s") == "time: compute"  # the unit column says seconds
    assert names.label("time.tokens_per_s") == "throughput (tokens/s, all devices)"  # a rate keeps its name
