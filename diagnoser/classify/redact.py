"""Keep secrets on this machine: redact text before it is shown, stored or sent; refuse remote
endpoints on request.

Training logs leak credentials all the time: an `env` dump at start-up, a W&B or HF login, a
presigned S3 URL, a `curl -H "Authorization: Bearer ..."` in a launcher script, a `mysql -pPASS`
in a data-loading script, a `.netrc` printed by a debugging session. This module is the one
redaction diagnoser uses: `redact` (text), `scrub` (any JSON value) and `redact_diagnosis` (a
verdict) run before anything is printed (`triage`, `--json`), written (`diagnosis.json`,
`notification.json`), stored (incident signatures) or sent (LLM prompts, Slack).
`check_endpoint` enforces `--no-remote`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from diagnoser.models import Diagnosis

MASK = "[REDACTED]"

# (triggers, pattern, replacement): a rule runs only when one of its lowercase trigger substrings is
# in the text (most log lines have none), `None` always. Specific token formats first, generic last.
_RULES: list[tuple[tuple[str, ...] | None, re.Pattern[str], str]] = [
    # PEM private keys (whole block when it is in one text, else the header line and what follows)
    (("private key",), re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
                                  re.S), "-----" + MASK + " PRIVATE KEY-----"),
    (("sk-",), re.compile(r"\bsk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_\-]{16,}"), "sk-" + MASK),  # OpenAI
    (("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "hf_" + MASK),  # Hugging Face
    (("akia", "asia", "agpa", "aida", "aroa", "anpa"),
     re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"), MASK),  # AWS access key ids
    (("gh", "github_pat_"), re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), MASK),
    (("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), MASK),  # GitLab
    (("xox", "xapp"), re.compile(r"\b(?:xox[abposre]|xapp)(?:\.xox[a-z])?-[A-Za-z0-9\-]{10,}"), MASK),  # Slack
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), MASK),  # Google API keys
    (("eyj",), re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), MASK),  # JWT
    # Authorization headers and bearer tokens
    (("authorization",), re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:\"|')?(?:bearer|basic|token)?\s*"
                                    r"[^\s\"',;]+"), r"\1" + MASK),
    (("bearer",), re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}"), r"\1" + MASK),
    # user:password@host in URLs (redis://, postgres://, https://user:pw@...); the password may hold
    # '/' and '@' (up to the last '@' of the URL: a host never contains one)
    (("://",), re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,20}://[^\s:/@\"'<>]*:)[^\s\"'<>]+@(?=[^\s@/\"'<>]+)"),
     r"\1" + MASK + "@"),
    # mysql -pPASS (the password glued to -p; -P is the port)
    (("mysql", "mariadb"), re.compile(r"(\b(?i:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb"
                                      r"(?:-dump|-admin)?)\b[^\n|;&]*?\s-p)(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)"),
     r"\1" + MASK),
    # .netrc: `machine H login U password VALUE`, or `password VALUE` on a line of its own
    (("password",), re.compile(r"(?i)(\b(?:login|account)\s+\S+\s+password\s+)(?!\[REDACTED)\S+"), r"\1" + MASK),
    (("password",), re.compile(r"(?im)^(\s*password\s+)(?!\[REDACTED)\S+\s*$"), r"\1" + MASK),
    # quoted passwords may contain spaces: password="a b c", PASSWORD: 'x y'
    (("secret", "passw", "pwd"),
     re.compile(r"(?i)((?:secret|passw(?:or)?d|passwd|pwd)[A-Z0-9_.\-]{0,40}[\"']?\s*[=:]\s*)"
                r"(?:\"[^\"\n]*\"|'[^'\n]*')"), r'\1"' + MASK + '"'),
    # presigned URL signatures and tokens in query strings
    (("=",), re.compile(r"(?i)([?&](?:x-amz-signature|x-amz-security-token|x-amz-credential|sig|signature|token|"
                        r"access_token|api_key|apikey|key|password)=)[^&\s\"']+"), r"\1" + MASK),
    # AWS secret access key
    (("aws_secret_access_key",), re.compile(r"(?i)(aws_secret_access_key\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{20,}"),
     r"\1" + MASK),
    # generic NAME=value / NAME: value where NAME says it is a secret; passwords whatever they look like,
    # tokens and keys only when the value looks like one (not `num_tokens: 4096`)
    (("secret", "passw", "pwd"),
     re.compile(r"(?i)((?:secret|passw(?:or)?d|passwd|pwd)[A-Z0-9_.\-]{0,40}[\"']?\s*[=:]\s*[\"']?)"
                r"(?!\[REDACTED)[^\s\"',;}]+"), r"\1" + MASK),
    (("key", "token", "credential"),
     re.compile(r"(?i)((?:api[_\-]?key|token|credential|private[_\-]?key|access[_\-]?key)[A-Z0-9_.\-]{0,40}"
                r"[\"']?\s*[=:]\s*[\"']?)(?!\[REDACTED)(?=[^\s\"',;}]*[A-Za-z])(?=[^\s\"',;}]*\d)"
                r"[^\s\"',;}]{8,}"), r"\1" + MASK),
    # --password VALUE / --token VALUE on a command line
    (("--password", "--passwd", "--token", "--api", "--secret", "-password", "-token"),
     re.compile(r"(?i)(--?(?:password|passwd|token|api-key|api_key|secret)[= ]\s*)(?!\[REDACTED)"
                r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)"), r"\1" + MASK),
]

# Long opaque blobs with upper, lower and digits (key material, base64 secrets); hex hashes and
# words are left alone.
_BLOB = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/])")


def _blob(m: re.Match[str]) -> str:
    """Random base64 is ~40% upper, ~40% lower, ~16% digits; paths and identifiers are not."""
    s = m.group(0)
    n = len(s)
    upper = sum(c.isupper() for c in s)
    lower = sum(c.islower() for c in s)
    digits = sum(c.isdigit() for c in s)
    if upper >= 0.2 * n and lower >= 0.2 * n and digits >= 0.05 * n:
        return MASK
    return s


def redact(text: str) -> str:
    """The text with every recognised secret replaced by `[REDACTED]`."""
    lower = text.lower()
    for triggers, pattern, replacement in _RULES:
        if triggers is None or any(t in lower for t in triggers):
            text = pattern.sub(replacement, text)
    return _BLOB.sub(_blob, text)


def scrub(value: Any) -> Any:
    """`value` with every string in it redacted (dicts, lists and tuples walked; keys kept)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def redact_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """The verdict with every text in it (evidence, root cause, notes, warnings ...) redacted."""
    from diagnoser.models import Diagnosis

    data = diagnosis.model_dump(mode="json", by_alias=True)
    clean = scrub(data)
    return diagnosis if clean == data else Diagnosis.model_validate(clean)


class RemoteRefused(ValueError):
    """`--no-remote` is set and the endpoint is not on this machine."""


def is_loopback_host(host: str) -> bool:
    """Whether every address `host` resolves to is loopback (127.0.0.0/8, ::1)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_endpoint(base_url: str, no_remote: bool) -> None:
    """Raise `RemoteRefused` when `no_remote` and `base_url` is not a loopback address."""
    if not no_remote:
        return
    host = urlsplit(base_url).hostname
    if not host:
        raise RemoteRefused(f"--no-remote: cannot tell the host of {base_url!r}")
    if not is_loopback_host(host):
        raise RemoteRefused(f"--no-remote: {host} is not a loopback address; refusing to send logs there")
