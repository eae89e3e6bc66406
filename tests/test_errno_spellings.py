"""One errno, three spellings: Python ("[Errno 28] No space left on device"), C's strerror ("...: No space left on
device") and Go's lower-case syscall table, which kubelet, containerd, Docker, gcsfuse and every Go operator print
("write /x: no space left on device"). The verdict must not depend on which language hit the error."""

from __future__ import annotations

from pathlib import Path

import pytest
from triage_support import triage_files

SAME_ERRNO = [
    ("OSError: [Errno 28] No space left on device: '/ckpt/run4/step_900/optim_03.pt'",
     "Warning  Failed  3m  kubelet  Failed to pull image \"nvcr.io/nvidia/pytorch:24.01-py3\": failed to extract layer "
     "sha256:4f2a: write /var/lib/containerd/snapshots/1123/fs/usr/lib/libcudnn_adv.so.9: no space left on device: "
     "unknown"),
    ("OSError: [Errno 122] Disk quota exceeded: '/home/bob/.cache/huggingface/hub/tmp3x9'",
     "Error: mkdir /scratch/alice/.cache/enroot/data/pytorch+24.01: disk quota exceeded"),
    ("OSError: [Errno 5] Input/output error: '/mnt/gcs/ckpt/step_100/shard_3'",
     "E0609 12:00:00.123456 1 fs.go:100] ReadFile: write /mnt/gcs/ckpt/step_100/shard_3: input/output error"),
    ("[rank0]: OSError: [Errno 30] Read-only file system: '/data/checkpoints/step_1200'",
     "Error: failed to start container \"trainer\": mkdir /var/lib/kubelet/pods/8c1/volumes/ckpt: "
     "read-only file system"),
    ("OSError: [Errno 8] Exec format error: '/workspace/tools/preprocess'",
     "exec /usr/bin/python3: exec format error"),
    ("[rank0]: socket.gaierror: [Errno -2] Name or service not known",
     "Head \"https://nvcr.io/v2/nvidia/pytorch/manifests/24.01-py3\": dial tcp: lookup nvcr.io on 10.96.0.10:53: "
     "no such host"),
]


@pytest.mark.parametrize(("python_or_c", "go"), SAME_ERRNO, ids=lambda s: s[:24])
def test_go_spelling_of_an_errno_gets_the_same_verdict(tmp_path: Path, python_or_c: str, go: str):
    first = triage_files(tmp_path / "py", {"job.log": python_or_c + "\n"})
    other = triage_files(tmp_path / "go", {"job.log": go + "\n"})
    assert first.rule
    assert (other.category, other.action, other.subtype) == (first.category, first.action, first.subtype)


def test_a_lower_case_phrase_in_a_sentence_is_not_an_errno(tmp_path: Path):
    log = "step 120: the tokenizer reported no space left on device budget, skipping cache warm-up\n"
    assert triage_files(tmp_path, {"job.log": log}).rule is None


def test_an_image_for_another_architecture_is_the_jobs_but_a_module_for_another_kernel_is_the_nodes(tmp_path: Path):
    image = triage_files(tmp_path / "image", {"job.log": "exec /usr/bin/python3: exec format error\n"})
    assert (image.category, image.subtype) == ("user_code", "binary_wrong_architecture")
    module = triage_files(tmp_path / "module", {"job.log": "modprobe: ERROR: could not insert 'nvidia': "
                                                           "Exec format error\n"})
    assert (module.category, module.subtype) == ("infra", "driver_kernel_module_mismatch")


# strerror() text after its context, as C tools print it ("mount: ...: No such device") and as Go's syscall table
# does in lower case ("rename a b: invalid cross-device link"): the same errno entry as Python's "[Errno N]"
STRERROR_AFTER_CONTEXT = [
    ("OSError: [Errno 18] Invalid cross-device link: '/tmp/tmpq1/ckpt.pt' -> '/lustre/run7/ckpt.pt'",
     "rename /tmp/ckpt-3 /lustre/run7/ckpt-3: invalid cross-device link"),
    ("OSError: [Errno 37] No locks available: '/nfs/home/bob/.cache/enroot/.lock'",
     "flock /nfs/home/bob/.cache/enroot/.lock: no locks available"),
    ("OSError: [Errno 38] Function not implemented",
     "flock /gpfs/scratch/run7/.lock: function not implemented"),
    ("OSError: [Errno 27] File too large: '/scratch/ckpt/model_states.pt'",
     "write /scratch/ckpt/model_states.pt: file too large"),
    ("OSError: [Errno 36] File name too long: '/ckpt/lr=0.0003,bs=512'",
     "open /ckpt/lr=0.0003,bs=512,warmup=2000,model=llama-7b: file name too long"),
    ("OSError: [Errno 99] Cannot assign requested address",
     "dial tcp 10.0.0.5:29500: connect: cannot assign requested address"),
    ("OSError: [Errno 121] Remote I/O error: '/mnt/weka/tokens/000231.bin'",
     "read /mnt/weka/tokens/000231.bin: remote I/O error"),
    ("OSError: [Errno 39] Directory not empty: '/ckpt/run7/tmp-step_4000'",
     "rename /ckpt/run7/tmp-step_4000 /ckpt/run7/step_4000: directory not empty"),
    ("OSError: [Errno 105] No buffer space available",
     "write udp 10.0.0.5:4791->10.0.0.6:4791: sendto: no buffer space available"),
    ("OSError: [Errno 19] No such device",
     "mount: /mnt/fuse: mount failed: No such device"),
    ("OSError: [Errno 16] Device or resource busy: '/mnt/localssd'",
     "UnmountDevice failed for volume \"ckpt\": umount /var/lib/kubelet/plugins/kubernetes.io/csi/pv/ckpt/globalmount: "
     "device or resource busy"),
]


@pytest.mark.parametrize(("python", "after_context"), STRERROR_AFTER_CONTEXT, ids=lambda s: s[:24])
def test_strerror_text_after_its_context_is_the_same_errno_entry(tmp_path: Path, python: str, after_context: str):
    first = triage_files(tmp_path / "py", {"job.log": python + "\n"})
    other = triage_files(tmp_path / "c", {"job.log": after_context + "\n"})
    assert first.rule and first.rule.startswith("linux.")
    assert other.rule == first.rule


def test_no_such_device_or_address_is_not_no_such_device(tmp_path: Path):
    # ENXIO's text begins with ENODEV's: "No such device or address" must not read as a missing device
    d = triage_files(tmp_path, {"job.log": "open /dev/ttyS4: No such device or address\n"})
    assert d.rule != "linux.enodev"
