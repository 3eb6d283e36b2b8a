"""The price table (costmodel/devices/data/prices.json): dated example prices, used only when asked."""

import json
import subprocess
import sys
from fractions import Fraction

import pytest

import costmodel
from costmodel.devices.prices import price, prices
from costmodel.devices.table import builtin

TINY = {"L": "4", "d": "64", "h": "4", "n_kv": "2", "d_ff": "128", "V": "100", "T": "64"}
#: D tokens that take exactly 2.788M device-hours on 2048 devices at a measured 1,000 tokens/s in all
TOKENS = 2_788_000 * 3600 * 1000 // 2048


def _est(**kw) -> dict:
    return costmodel.estimate("llama", settings=TINY, **kw)


def test_every_entry_is_dated_sourced_and_prices_a_known_device_or_says_not():
    hardware = builtin()
    for p in prices().values():
        assert p.date[:4].isdigit() and p.source and p.usd_per_hour > 0
        assert p.hardware in hardware or "not in the hardware table" in p.about


def test_deepseek_v3_by_name():
    # DeepSeek-AI 2024 (DeepSeek-V3 report, Table 1): 2.788M H800 GPU-hours × $2 per GPU-hour = $5.576M
    r = _est(tokens=TOKENS, devices=2048, hardware="h100-sxm", tokens_per_s=1000, price_per_hour="deepseek-v3-h800")
    t = r["time"]
    assert price("deepseek-v3-h800", "h100-sxm").usd_per_hour * 2_788_000 == 5_576_000
    assert t["cost_usd"] == pytest.approx(5_576_000, rel=1e-12) and t["price_per_hour_usd"] == 2
    assert "deepseek-v3-h800" in t["price_source"] and "arXiv:2412.19437" in t["price_source"]


def test_list_takes_the_device_entry_and_names_its_date_and_source():
    t = _est(hardware="h100-sxm", tokens=TOKENS, devices=2048, tokens_per_s=1000, price_per_hour="list")["time"]
    assert t["price_per_hour_usd"] == float(Fraction("4.916"))
    assert t["cost_usd"] == pytest.approx(2_788_000 * 4.916, rel=1e-12)  # device-hours × the entry's price
    assert "2024-12" in t["price_source"] and "aws.amazon.com" in t["price_source"]


def test_a_number_stays_a_number_and_nothing_is_priced_unasked():
    t = _est(hardware="h100-sxm", price_per_hour="2.5")["time"]
    assert t["price_per_hour_usd"] == 2.5 and "price_source" not in t
    unasked = _est(hardware="h100-sxm", tokens=TOKENS)["time"]
    assert not any("cost" in k or "price" in k for k in unasked)


def test_list_without_an_entry_is_refused():
    with pytest.raises(costmodel.CostModelError, match="no entry for 'tpu-v4'"):
        _est(hardware="tpu-v4", price_per_hour="list")
    with pytest.raises(costmodel.CostModelError, match="entry of the price table"):
        _est(hardware="h100-sxm", price_per_hour="cheapest")


def test_cli_prints_the_source_and_refuses_in_one_line():
    run = [sys.executable, "-m", "costmodel_entry", "estimate", "llama", "--hardware", "h100-sxm"]
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    out = subprocess.run([*run, *sets, "--price-per-hour", "list", "--json"], capture_output=True, text=True)
    assert out.returncode == 0 and "aws-capacity-block-h100" in json.loads(out.stdout)["time"]["price_source"]
    text = subprocess.run([*run, *sets, "--price-per-hour", "list"], capture_output=True, text=True).stdout
    assert "  price         $4.916 per device-hour: aws-capacity-block-h100" in text
    bad = subprocess.run([*run, *sets, "--price-per-hour", "free"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
