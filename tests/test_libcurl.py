"""A libcurl error (CURLcode) gets one verdict however the program built on libcurl prints it: the curl CLI of a
setup script, git, the AWS C++ SDK under TensorFlow's s3:// or Arrow, TensorStore under Orbax, TensorFlow's GCS
file system. The transport's failures are the network's (infra, retry); a rejected URL is the job's."""

import pytest
from triage_support import triage_files as _triage

PRINTERS = {
    "28": [  # CURLE_OPERATION_TIMEDOUT
        "curl: (28) Operation timed out after 120000 milliseconds with 0 out of 0 bytes received",
        "E0419 07:12:09.114 aws_logging.cc:60] Curl returned error code 28 - Timeout was reached",
        "pyarrow.lib.ArrowIOError: AWS Error NETWORK_CONNECTION: curlCode: 28, Timeout was reached",
        "ValueError: DEADLINE_EXCEEDED: CURL error[28] Timeout was reached: Operation too slow. "
        "Less than 1 bytes/sec transferred the last 30 seconds",
        "E tensorflow/core/platform/cloud/curl_http_request.cc:614] Error executing an HTTP request: libcurl code 28 "
        "meaning 'Timeout was reached', error details: Operation timed out after 60001 milliseconds",
    ],
    "56": [  # CURLE_RECV_ERROR
        "curl: (56) Recv failure: Connection reset by peer",
        "error: RPC failed; curl 56 GnuTLS recv error (-9): A TLS packet with unexpected length was received.",
        "Curl returned error code 56 - Failure when receiving data from the peer",
        "ValueError: UNAVAILABLE: CURL error[56] Failure when receiving data from the peer",
    ],
}


@pytest.mark.parametrize(("code", "line"), [(c, x) for c, xs in PRINTERS.items() for x in xs])
def test_a_curlcode_gets_the_same_retryable_network_verdict_from_every_printer(tmp_path, code, line):
    d = _triage(tmp_path, {"rank0.log": line + "\n"})
    assert (d.category, d.action) == ("infra", "retry_after_backoff"), (line, d.subtype)
    first = _triage(tmp_path / "cli", {"rank0.log": PRINTERS[code][0] + "\n"})
    assert d.subtype == first.subtype


def test_a_stalled_checkpoint_upload_is_the_network_not_the_programs_exception(tmp_path):
    """Orbax saving through TensorStore raises a plain ValueError; the CURL error inside it is the cause, and an
    object store that stalled is no fault of the node the rank ran on."""
    d = _triage(tmp_path, {"node-b/rank4.log": (
        "I1203 10:00:00.000000 140 checkpointer.py:164] Saving checkpoint to gs://run-ckpts/llama/step_12000.\n"
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 412, in <module>\n'
        "    ckpt_manager.save(step, args=ocp.args.StandardSave(state))\n"
        '  File "/usr/local/lib/python3.11/site-packages/orbax/checkpoint/checkpoint_manager.py", line 1287, in save\n'
        "    self._checkpointer.save(save_directory, args=args)\n"
        "ValueError: DEADLINE_EXCEEDED: CURL error[28] Timeout was reached: Operation too slow. Less than 1 "
        "bytes/sec transferred the last 60 seconds "
        "[source locations='tensorstore/internal/http/curl_transport.cc:383']\n"
    )})
    assert (d.category, d.subtype, d.action) == ("infra", "remote_service_timeout", "retry_after_backoff")
    assert d.culprit.nodes == []


@pytest.mark.parametrize(("line", "category", "action"), [
    ("curl: (22) The requested URL returned error: 503", "infra", "retry_after_backoff"),
    ("error: RPC failed; HTTP 429 curl 22 The requested URL returned error: 429", "infra", "retry_after_backoff"),
    ("curl: (22) The requested URL returned error: 404", "user_code", "stop_and_notify"),
    ("error: RPC failed; HTTP 403 curl 22 The requested URL returned error: 403", "user_code", "stop_and_notify"),
    ("curl: (3) URL using bad/illegal format or missing URL", "user_code", "stop_and_notify"),
])
def test_an_http_error_through_curl_is_decided_by_its_status(tmp_path, line, category, action):
    d = _triage(tmp_path, {"setup.log": "+ curl -fsSL -o /tmp/weights.tar \"$WEIGHTS_URL\"\n" + line + "\n"})
    assert (d.category, d.action) == (category, action)


def test_a_longer_code_is_not_read_as_its_prefix(tmp_path):
    """curl: (77) is a CA-bundle problem, not (7) a refused connection."""
    d = _triage(tmp_path, {"setup.log": "curl: (77) error setting certificate verify locations:  CAfile: "
                                        "/etc/ssl/certs/ca-certificates.crt CApath: none\n"})
    assert d.subtype == "tls_certificate_untrusted"
    assert d.action == "escalate"
