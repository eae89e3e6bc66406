"""The kernel's hardware-error records (APEI/CPER lines behind "[Hardware Error]: ") are hardware evidence, never a
Python exception: a CPER PCIe section prints "fru_text: PcieError", which reads like a bare exception class."""

from triage_support import triage_files as _triage

_CPER_PCIE = (
    "[71234.118201] {3}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1\n"
    "[71234.118203] {3}[Hardware Error]: It has been corrected by h/w and requires no further action\n"
    "[71234.118204] {3}[Hardware Error]: event severity: corrected\n"
    "[71234.118205] {3}[Hardware Error]:  Error 0, type: corrected\n"
    "[71234.118206] {3}[Hardware Error]:  fru_text: PcieError\n"
    "[71234.118207] {3}[Hardware Error]:   section_type: PCIe error\n"
    "[71234.118208] {3}[Hardware Error]:   port_type: 4, root port\n"
    "[71234.118209] {3}[Hardware Error]:   device_id: 0000:c0:01.4\n")


def test_a_cper_pcie_record_is_not_read_as_the_jobs_exception(tmp_path):
    d = _triage(tmp_path, {"gpu-n-015/dmesg.log": _CPER_PCIE})
    assert d.subtype != "python_exception"
    assert d.category.value != "user_code"


def test_a_real_bare_exception_line_still_is(tmp_path):
    d = _triage(tmp_path, {"rank3.log": (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 88, in <module>\n'
        "    assert batch.shape[0] == cfg.micro_batch\n"
        "AssertionError\n")})
    assert (d.category.value, d.subtype) == ("user_code", "python_exception")
