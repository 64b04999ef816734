"""utils/cpu: the processor's vendor and flags, read from a cpuinfo file."""

from __future__ import annotations

from nmt_cli.utils.cpu import read_cpuinfo

TWO_PROCESSORS = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
flags\t\t: fpu avx2 avx512f avx512_bf16

processor\t: 1
vendor_id\t: GenuineIntel
flags\t\t: fpu sse2
"""


def test_the_first_processor_is_read(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(TWO_PROCESSORS)
    fields = read_cpuinfo(cpuinfo)
    assert fields["vendor_id"] == "AuthenticAMD" and fields["cpu family"] == "25"
    assert set(fields["flags"].split()) == {"fpu", "avx2", "avx512f", "avx512_bf16"}


def test_arm_features_and_unreadable_files(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("\nprocessor : 0\nFeatures : fp asimd bf16\n")  # leading blank line, ARM's key
    assert read_cpuinfo(cpuinfo)["Features"] == "fp asimd bf16"
    assert read_cpuinfo(tmp_path / "missing") == {}
