"""The hardware table: peaks and ridge points from the vendors' numbers, user device files, errors."""

import json

import pytest
import sympy

from costmodel import CostModelError
from costmodel.cli import main
from costmodel.devices.table import PEAK_DTYPES, builtin, device, devices, read_file

REQUIRED = (
    "h100-sxm",
    "h100-pcie",
    "h200",
    "a100-40gb",
    "a100-80gb",
    "b200",
    "mi300x",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "l4",
    "rtx-4090",
    "v100",
)


def test_h100_sxm_ridge_is_peak_over_bandwidth():
    h = device("h100-sxm")
    # H100 whitepaper: BF16 dense 989.4 TFLOP/s; datasheet: 3.35 TB/s HBM3
    assert h.peak("bf16") == 989_400_000_000_000
    assert h.memory_bandwidth == 3_350_000_000_000
    assert h.ridge("bf16") == sympy.Rational(989_400, 3_350)  # exact: 295.34...
    assert round(float(h.ridge("bf16"))) == 295  # the issue's "≈ 295"; the lecture's round 1000/3 ≈ 333


@pytest.mark.parametrize(
    "name, dtype, tflops, tb_s, ridge",
    [
        ("a100-80gb", "bf16", 312, 2.039, 153),  # A100 datasheet: 312 TFLOP/s, 2,039 GB/s
        ("a100-40gb", "bf16", 312, 1.555, 201),  # 1,555 GB/s
        ("h200", "bf16", 989.4, 4.8, 206),  # same Hopper compute, 4.8 TB/s HBM3e
        ("mi300x", "bf16", 1307.4, 5.3, 247),  # AMD datasheet
        ("tpu-v5e", "bf16", 197, 0.819, 241),  # Cloud TPU docs
        ("v100", "fp16", 125, 0.9, 139),  # V100: fp16 tensor cores, no bf16
    ],
)
def test_published_peaks_and_ridges(name, dtype, tflops, tb_s, ridge):
    d = device(name)
    assert float(d.peak(dtype)) == pytest.approx(tflops * 1e12, rel=1e-12)
    assert float(d.memory_bandwidth) == pytest.approx(tb_s * 1e12, rel=1e-12)
    assert round(float(d.ridge(dtype))) == ridge


def test_table_covers_the_issue_and_cites_every_number():
    table = builtin()
    for name in REQUIRED:
        d = table[name]
        assert set(d.sources) >= {"peak_flops", "memory", "scale_up", "scale_out"}, name
        assert all(dt in PEAK_DTYPES for dt in d.peak_flops)
        assert all(isinstance(v, sympy.Rational) for v in d.peak_flops.values())
    # dense, not sparse: no device's bf16 peak is the 2x sparse figure (H100 sparse would be 1979)
    assert table["h100-sxm"].peak("fp8") == 1_978_900_000_000_000  # whitepaper dense FP8; 3958 is sparse
    assert table["l4"].peak("bf16") == 121 * 10**12  # datasheet 242 with sparsity, halved


def test_v100_has_no_bf16():
    with pytest.raises(CostModelError, match="no bf16 peak; it has fp16, fp32"):
        device("v100").peak("bf16")


def test_unknown_hardware_suggests_names():
    with pytest.raises(CostModelError, match="did you mean 'h100-sxm' or 'h100-pcie'"):
        device("h100")
    with pytest.raises(CostModelError, match="did you mean 'mi300x'"):
        device("mi300")


def test_user_toml_is_read_exactly(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        '[devices.my-chip]\nabout = "a test chip"\nmemory_bytes = 96e9\nmemory_bandwidth = 3.35e12\n'
        '[devices.my-chip.peak_flops]\nbf16 = 989.4e12\n[devices.my-chip.sources]\npeak_flops = "me"\n'
    )
    d = devices(f)["my-chip"]
    assert d.peak("bf16") == 989_400_000_000_000  # read as decimal text, never a binary float
    assert d.ridge("bf16") == device("h100-sxm").ridge("bf16")
    assert "h100-sxm" in devices(f)  # the built-ins stay
    assert device(str(f)).name == "my-chip"


def test_user_json_single_device(tmp_path):
    f = tmp_path / "one.json"
    f.write_text(
        json.dumps(
            {"name": "x1", "peak_flops": {"fp16": "100e12"}, "memory_bytes": 16 * 10**9, "memory_bandwidth": "1e12"}
        )
    )
    assert read_file(f)["x1"].ridge("fp16") == 100


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"name": "x", "peak_flops": {"bf16": "1e14"}, "memory_bytes": "1e10"}, "missing memory_bandwidth"),
        (
            {"name": "x", "peak_flops": {"bf16": "1e30"}, "memory_bytes": "1e10", "memory_bandwidth": "1e12"},
            r"peak_flops.bf16 = 1e30 is outside",
        ),
        (
            {"name": "x", "peak_flops": {"bf16": "-5"}, "memory_bytes": "1e10", "memory_bandwidth": "1e12"},
            "= -5 is outside",
        ),
        (
            {"name": "x", "peak_flops": {"bfloat16": "1e14"}, "memory_bytes": "1e10", "memory_bandwidth": "1e12"},
            "unknown dtype 'bfloat16'",
        ),
        (
            {"name": "x", "peak_flops": {"bf16": "1e14"}, "memory_bytes": "1e10", "memory_bandwith": "1e12"},
            "unknown field 'memory_bandwith'",
        ),
        (
            {"name": "x", "peak_flops": {"bf16": "1e14"}, "memory_bytes": "10", "memory_bandwidth": "1e12"},
            "memory_bytes = 10 is outside",
        ),
    ],
)
def test_bad_user_devices_are_errors(tmp_path, entry, message):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(entry))
    with pytest.raises(CostModelError, match=message):
        read_file(f)


def test_bad_files(tmp_path):
    with pytest.raises(CostModelError, match="expected a .toml or .json file"):
        read_file(tmp_path / "x.yaml")
    with pytest.raises(CostModelError, match="cannot read it"):
        read_file(tmp_path / "missing.toml")
    f = tmp_path / "broken.toml"
    f.write_text("[devices\n")
    with pytest.raises(CostModelError, match="not valid TOML"):
        read_file(f)


def test_cli_lists_devices_with_ridge(capsys):
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    for name in REQUIRED:
        assert name in out
    line = next(l for l in out.splitlines() if l.startswith("h100-sxm"))
    assert line.split()[-1] == "295"
    assert main(["hardware", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"]["h100-sxm"]["peak_flops"]["bf16"] == 989_400_000_000_000
    assert data["devices"]["h100-sxm"]["scale_up_bandwidth"] == 450 * 10**9  # NVLink 900 GB/s both ways


def test_cli_bad_file_is_one_line_exit_2(tmp_path, capsys):
    f = tmp_path / "bad.json"
    f.write_text("{}")
    assert main(["hardware", "--file", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected a 'devices' table" in err


def test_cli_one_device_with_sources(capsys):
    assert main(["hardware", "b200"]) == 0
    out = capsys.readouterr().out
    # DGX B200 datasheet: 36 PFLOPS BF16 with sparsity for 8 GPUs -> 2.25 PFLOP/s dense per GPU
    assert "peak bf16    2,250.0 TFLOP/s dense" in out and "DGX B200 datasheet" in out
    assert "900.0 GB/s per direction" in out  # NVLink 5: 1.8 TB/s both ways
    assert main(["hardware", "b100"]) == 2


def test_todays_devices_cite_their_numbers_and_an_nvl72_domain_keeps_tp_16_on_nvlink():
    """Issue 29 item 6: the table reaches today's generation, FP4/FP6 peaks where the device has them, and a GB200
    NVL72 rack is one 72-GPU NVLink domain."""
    from costmodel.devices.network import bus_bandwidth, latency

    table = builtin()
    for name in ("h800", "h20", "b300", "gb200", "gb300", "l40s", "rtx-pro-6000", "mi325x", "mi355x"):
        assert set(table[name].sources) >= {"peak_flops", "memory", "scale_up", "scale_out"}, name
    assert table["b300"].peak("fp4") == 14 * 10**15 and table["mi355x"].peak("fp6") == 10**16
    assert table["h800"].peak("bf16") == table["h100-sxm"].peak("bf16")  # the same GH100 part
    assert table["h800"].scale_up_bandwidth == 200 * 10**9  # 400 GB/s NVLink bidirectional, halved
    gb200, h100 = table["gb200"], table["h100-sxm"]
    assert gb200.attained.node_size == 72 and h100.attained.node_size == 8
    # an all-reduce over 16 neighbours: inside the rack on GB200 (NVLink: 900 GB/s × the tier's efficiency), across
    # two 8-GPU nodes on H100 (8 NICs of 50 GB/s each = 400 GB/s, below NVLink's 450)
    up = gb200.attained.scale_up
    assert bus_bandwidth(gb200, gb200.attained, 16, 1) == 900 * 10**9 * up.efficiency
    assert latency(gb200.attained, 16, 1) == up.latency_s
    assert latency(h100.attained, 16, 1) == h100.attained.scale_out.latency_s
