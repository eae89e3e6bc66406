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
