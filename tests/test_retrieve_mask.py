"""Masking and signatures: two occurrences of one failure look alike, different failures do not."""

import pytest

from diagnoser.retrieve.lexical import LexicalIndex
from diagnoser.retrieve.mask import mask_text
from diagnoser.retrieve.signature import (
    fingerprint,
    is_salient,
    same_failure_key,
    signature_lines,
    signature_text,
    tokens,
)


@pytest.mark.parametrize(("raw", "masked"), [
    ("[Tue Mar  4 05:06:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
     "[<TIME>] NVRM: Xid (PCI:<PCI>): 79, pid=<NUM>, name=python, GPU has fallen off the bus."),
    ("[E ProcessGroupNCCL.cpp:737] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=86645, "
     "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1805320 milliseconds before timing out.",
     "[E ProcessGroupNCCL.cpp:<NUM>] [Rank <RANK>] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=<NUM>, OpType=ALLREDUCE, Timeout(ms)=<NUM>) ran for <NUM> milliseconds before timing out."),
    ("srun: error: gpu-017: task 5: Exited with exit code 137",
     "srun: error: <HOST>: task <NUM>: Exited with exit code 137"),
    ("NET/IB : Got completion from peer 10.1.2.3<45678> with error 12, opcode 0",
     "NET/IB : Got completion from peer <IP><<NUM>> with error 12, opcode <NUM>"),
    ("OSError: [Errno 28] No space left on device: '/lustre/ckpt/step_1000/model.pt'",
     "OSError: [Errno 28] No space left on device: '<PATH>'"),
    ("Mar  4 05:06:07 node12 kernel: mlx5_core 0000:af:00.0: Port module event: module 0, Cable unplugged",
     "<TIME> <HOST> kernel: mlx5_core <PCI>: Port module event: module <NUM>, Cable unplugged"),
    ("[12345.678901] NVRM: GPU at PCI:0000:3b:00: GPU-a1b2c3d4-1111-2222-3333-444455556666",
     "[<TIME>] NVRM: GPU at PCI:<PCI>: <UUID>"),
    ("ssh: Could not resolve hostname ip-10-0-1-23.ec2.internal: Name or service not known",
     "ssh: Could not resolve hostname <HOST>: Name or service not known"),
    ("[rank3]: comm 0x5581e0a0 rank 5 commId 0x9f1c2e3d4b5a6978 fe80::1270:fd03:2c:9abc",
     "[rank<RANK>]: comm <HEX> rank <RANK> commId <HEX> <IP>"),
    ("exitcode  : -9 (pid: 1234)", "exitcode  : -9 (pid: <NUM>)"),
    # numbers glued to words are part of the word
    ("CUDA error on cuda12.1 with python3.10 sm_90 mlx5_0", "CUDA error on cuda12.1 with python3.10 sm_90 mlx5_0"),
])
def test_mask_replaces_what_differs_between_occurrences(raw, masked):
    assert mask_text(raw) == masked


def test_mask_keeps_line_structure():
    text = "Traceback (most recent call last):\n  File \"/a/b/train.py\", line 12, in <module>\nKeyError: 'RANK'"
    assert mask_text(text).splitlines() == [
        "Traceback (most recent call last):", '  File "<PATH>", line <NUM>, in <module>', "KeyError: 'RANK'"]


def test_two_occurrences_share_a_fingerprint_and_other_failures_do_not():
    a = "[Mon Jan  6 04:27:08 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    b = "[Fri Feb 13 23:01:59 2026] NVRM: Xid (PCI:0000:af:00): 79, pid=98765, name=python, GPU has fallen off the bus."
    c = "[Fri Feb 13 23:01:59 2026] NVRM: Xid (PCI:0000:af:00): 48, pid=98765, name=python, GPU has fallen off the bus."
    assert fingerprint(signature_text(a)) == fingerprint(signature_text(b))
    assert fingerprint(signature_text(a)) != fingerprint(signature_text(c))


def test_signature_keeps_error_lines_once_and_drops_noise():
    text = "\n".join(
        [f"[rank{r}]: iteration 10 | lm loss: 2.1 | loss scale: 65536.0" for r in range(8)]
        + [f"[rank{r}]:[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout"
           for r in range(8)]
        + ["[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered"])
    lines = signature_lines(text)
    assert lines == ["[E ProcessGroupNCCL.cpp:<NUM>] [Rank <RANK>] Watchdog caught collective operation timeout",
                     "RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert signature_text("step 1 ok\nstep 2 ok") == "step <NUM> ok"  # no error line: keep what there is
    assert signature_text("") == ""


@pytest.mark.parametrize("prefixed", [
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "[default3]:[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "(RayTrainWorker pid=4242, ip=10.1.2.3) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "  3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "2026-03-04T05:06:01.123456789Z [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "trainer-1  | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
])
def test_a_launcher_prefix_does_not_change_the_signature(prefixed):
    """Where a line came from (rank, Ray worker, srun task, collector time) is not what failed: the same
    failure under any launcher signs alike, so the memory's neighbours do not move with the launcher."""
    bare = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"
    assert signature_text(prefixed) == signature_text(bare)


def test_a_correction_signed_with_prefixes_by_an_older_version_keeps_its_key():
    old = ("[rank<RANK>]: StorageGatewayError: upstream returned status <NUM> for <HOST>\n"
           "(RayTrainWorker pid=<NUM>, ip=<IP>) reader exited")
    new = signature_text("[rank2]: StorageGatewayError: upstream returned status 503 for shard-0017.tar\n"
                         "(RayTrainWorker pid=4242, ip=10.1.2.3) reader exited")
    assert "rank" not in new and same_failure_key(old) == same_failure_key(new)
    other = signature_text("StorageGatewayError: upstream returned status 404")
    assert same_failure_key(old) != same_failure_key(other)


def test_signature_is_bounded_and_keeps_first_and_last_lines():
    text = "\n".join(f"RuntimeError: failure number {chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(200))
    lines = signature_lines(text, max_lines=10)
    assert len(lines) == 10
    assert lines[0].endswith("aa") and lines[-1].endswith(text.splitlines()[-1][-2:])


def test_salient_lines():
    assert is_salient("torch.OutOfMemoryError: CUDA out of memory")
    assert is_salient("loss is nan at step 10") and is_salient("ib0: link down")
    assert not is_salient("iteration 10 | lm loss: 2.1") and not is_salient("exchange rate changed")


def test_tokens_split_camel_case_and_drop_number_placeholders():
    assert tokens("torch.OutOfMemoryError: <NUM> on <HOST>") == [
        "torch", "outofmemoryerror", "out", "of", "memory", "error", "on", "<host>"]


def test_lexical_index_ranks_the_same_failure_first_and_scores_in_unit_range(tmp_path):
    docs = {
        "xid79": "NVRM: Xid (PCI:<PCI>): 79, pid=<NUM>, name=python, GPU has fallen off the bus.",
        "xid48": "NVRM: Xid (PCI:<PCI>): 48, pid=<NUM>, name=python, An uncorrectable double bit error (DBE)",
        "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <NUM> GiB",
        "timeout": "[Rank <RANK>] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=<NUM>)",
    }
    index = LexicalIndex.build(docs.items())
    query = "NVRM: Xid (PCI:0000:1a:00): 79, pid=1, name=python, GPU has fallen off the bus."
    hits = index.search(signature_text(query), 4)
    assert hits[0][0] == "xid79" and hits[0][1] == pytest.approx(1.0, abs=1e-6)
    assert all(0.0 <= s <= 1.0 for _, s in hits) and hits[1][1] < 0.5
    assert index.search("words nobody ever logged", 3) == []
    index.save(tmp_path)
    again = LexicalIndex.load(tmp_path)
    assert again.search(docs["oom"], 1)[0][0] == "oom"
    again.add("nan", "ValueError: loss is nan")  # a loaded (memory-mapped) index still takes documents
    assert again.search("loss is nan", 1)[0][0] == "nan"
