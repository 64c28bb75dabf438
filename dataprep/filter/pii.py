"""PII redaction as FineWeb did it (datatrove's `PIIFormatter`,
https://github.com/huggingface/datatrove/blob/main/src/datatrove/pipeline/formatters/pii.py): email
addresses and public IP addresses replaced by placeholders, and their count per document recorded.

    PII(PIISettings()).check(doc)    # never removes; doc.text redacted, doc.fields["pii"] = {"email": 2, "ip": 1}

Placeholders: FineWeb wrote `email@example.com` (alternating with `firstname.lastname@example.org`)
and, for IPs, one of six public addresses in turn (`22.214.171.124`, ...), the turn carried from one
document to the next within a worker, so that a document's output depended on the worker's history.
Here each kind has one fixed placeholder: `email@example.com` (FineWeb's first; `example.com` is
reserved by RFC 2606), `192.0.2.1` for IPv4 (TEST-NET-1, RFC 5737) and `2001:db8::1` for IPv6 (RFC
3849): addresses reserved for documentation, which reach no one and which a second run leaves as they
are (the detector skips reserved domains and non-public addresses), so redaction is idempotent.

Emails: FineWeb's pattern (RFC 5322's local part, then dot-separated domain labels or a bracketed
IP) with one change: the last label must be letters (a top-level domain), so that `pkg@1.2.3` (a
pinned version) and `user@host` (a shell prompt, no dot) are no addresses; `@decorator` has no local
part. IPv4: four dotted decimals 0-255 standing alone (not inside a longer dotted run like 1.2.3.4.5,
nor right after a digit or letter), public ones only (`ipaddress` `is_global`, as FineWeb: private,
loopback and reserved addresses identify no one), and not a version number: a quad that follows
"version", "ver.", "v" or "release" is left (FineWeb's regex redacted `version 1.2.3.4`, since
1.2.3.4 is a public address). Dates (2023.10.12) have three parts and never match. IPv6: FineWeb did
not redact it; here hexadecimal groups with at least two colons, standing alone, that `ipaddress`
reads as a global address (so `std::vector` and `12:30:45` are not).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from pretrainkit.dataprep.filter.kernels import candidate_windows
from pretrainkit.dataprep.filter.rules import Doc, Removal

EMAIL_PLACEHOLDER = "email@example.com"
IPV4_PLACEHOLDER = "192.0.2.1"
IPV6_PLACEHOLDER = "2001:db8::1"

_EMAIL = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])"
    r"|\[(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\])"
)
_RESERVED_DOMAIN = re.compile(
    r"@(?:[^@]*\.)?(?:example\.(?:com|org|net)|[^.]+\.(?:example|invalid|test|localhost))$", re.I
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![\w.])(?:{_OCTET}\.){{3}}{_OCTET}(?![\w]|\.\d)")
_VERSION_CUE = re.compile(r"(?:\bversion|\bver\.?|\bv|\brelease)\s*$", re.I)
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


@dataclass(frozen=True)
class PIISettings:
    emails: bool = True
    ips: bool = True
    email_placeholder: str = EMAIL_PLACEHOLDER
    ipv4_placeholder: str = IPV4_PLACEHOLDER
    ipv6_placeholder: str = IPV6_PLACEHOLDER


class PII:
    name = "pii"

    def __init__(self, settings: PIISettings):
        self.s = settings
        self.passes = [("email", _EMAIL, self._email)] * settings.emails + [
            ("ipv4", _IPV4, self._ipv4),
            ("ipv6", _IPV6, self._ipv6),
        ] * settings.ips
        self.kinds = tuple(kind for kind, _, _ in self.passes)

    def check(self, doc: Doc) -> Removal | None:
        counts = {"email": 0, "ip": 0}
        text = doc.text
        windows = candidate_windows(text, self.kinds, doc.code_points())
        for kind, pattern, replace in self.passes:  # emails first: a bracketed address in one goes with it
            redacted = _substitute(pattern, text, windows[kind], lambda m, replace=replace: replace(m, counts))
            if redacted is not text:  # the offsets after a replacement moved
                text = redacted
                windows = candidate_windows(text, self.kinds)
        doc.text = text
        doc.fields["pii"] = counts
        return None

    def _email(self, m: re.Match, counts: dict) -> str:
        if _RESERVED_DOMAIN.search(m.group(0)):
            return m.group(0)
        counts["email"] += 1
        return self.s.email_placeholder

    def _ipv4(self, m: re.Match, counts: dict) -> str:
        before = m.string[max(0, m.start() - 12) : m.start()]
        if _VERSION_CUE.search(before) or not _is_global(m.group(0)):
            return m.group(0)
        counts["ip"] += 1
        return self.s.ipv4_placeholder

    def _ipv6(self, m: re.Match, counts: dict) -> str:
        if not _is_global(m.group(0)):
            return m.group(0)
        counts["ip"] += 1
        return self.s.ipv6_placeholder


def _is_global(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def _substitute(pattern: re.Pattern, text: str, windows: list[tuple[int, int]], replace) -> str:
    """`pattern.sub(replace, text)` where every match lies in one of `windows` (their lookbehinds
    see the text before a window; one character after it is in reach of their lookaheads)."""
    if not windows:
        return text
    pieces, at = [], 0
    for start, end in windows:
        for m in pattern.finditer(text, start, min(len(text), end + 1)):
            if m.end() > end:  # a match cannot end past its window: the character after it is context
                continue
            pieces += [text[at : m.start()], replace(m)]
            at = m.end()
    return "".join(pieces) + text[at:] if pieces else text
