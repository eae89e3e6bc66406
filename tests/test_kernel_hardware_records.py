"""Kernel console lines are never a Python exception: the hardware-error records behind "[Hardware Error]: "
(APEI/CPER; a PCIe section prints "fru_text: PcieError", which reads like a bare exception class) and Lustre's
"LustreError: " / "LNetError: " console prefixes."""

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


def test_lustre_console_errors_are_storage_not_the_jobs_exception(tmp_path):
    d = _triage(tmp_path, {"gpu-n-012/dmesg.log": (
        "[183220.551002] LustreError: 3769:0:(import.c:517:ptlrpc_connect_interpret()) scratch-OST0012_UUID went "
        "back in time (transno 831 was previously committed, server now claims 791)!\n")})
    assert (d.category.value, d.subtype) == ("infra", "storage_io_error")
    unmatched = _triage(tmp_path / "lnet", {"gpu-n-012/dmesg.log": (
        "[183220.551002] LNetError: 120-3: Refusing connection from 10.1.2.3 for 10.1.2.4@tcp: No matching NI\n")})
    assert unmatched.subtype != "python_exception"  # the kernel's LNet console prefix is not a Python class
