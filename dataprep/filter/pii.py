"""PII redaction as FineWeb did it (datatrove's `PIIFormatter`,
https://github.com/huggingface/datatrove/blob/main/src/datatrove/pipeline/formatters/pii.py): email
addresses and public IP addresses replaced by placeholders, and their count per document recorded.

    PII(PIISettings()).check(doc)    # never removes; doc.text redacted, doc.fields["pii"] = {"email": 2, "ip": 1}
    find("host 8.8.8.8 ...")         # the addresses found: kind, offsets, and whether check() redacts it

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
part. Names in the same shape are no mailboxes: systemd unit instances (`getty@tty1.service`), SSH
algorithm and extension names (RFC 4251 section 6: `aes128-gcm@openssh.com`, any name at openssh.com
or libssh.org) and a command-line option (`lsof -i@host.name`: right after "-").

IPv4: four dotted decimals 0-255 without leading zeros, standing alone (not inside a longer dotted run
like an OID 1.3.6.1.4.1 or 1.2.3.4.5, nor right after a digit or letter: `v2.0.1.3`). FineWeb took
every such quad that `ipaddress` calls global, so that section numbers became addresses ("8.2.2.1.
Installing the required firmwares"); here a quad is no address where the text says what else it is:
- a heading: a quad of small numbers (each below 100) opening a line, then ". " or a capitalised word;
- a cross-reference: right after "Section", "§", "chapter", "appendix", "table", "RFC 5280 section",
  ..., or the word DocBook's translations write for them ("Abschnitt", "Sezione", "Раздел", ...), also
  the later numbers of "Sections 4.2.1.1 and 4.2.1.2"; or followed by a title in typographic quotes
  (`12.2.2.2 – „Network Configuration“`);
- a version: right after "version", "v", "release", "build", "kernel", "Linux", "update", ..., or
  followed by "~" or "+" and a suffix (`1.2.3.4~rc1`, `1.2.3.4+dfsg`);
- an OID: an arc 0, 1 or 2 first and "OID", "object identifier" or "ASN.1" on the line.
And a quad of small numbers (each below 100: `1.8.5.6`, `5.2.1.1`, `8.8.4.4`) is as often a version,
a section or an OID as an address, so it is one only with an address beside it: a word such as "IP",
"address", "host", "server", "nameserver", "gateway", "route", "netmask", "via", "ping", "port" within
48 characters on its line, a port (`:8080`) or prefix length (`/24`) right after it, brackets around
it, or "//" or "@" right before it (a URL's host). A quad with a larger number (`93.184.216.34`)
needs no context. Dotted dates (07.12.2026, 2026.12.07) have three parts and never match. Public ones
only are redacted (`ipaddress` `is_global`, as FineWeb: private, loopback and reserved addresses
identify no one).

IPv6: FineWeb did not redact it; here hexadecimal groups with at least two colons, standing alone, that
`ipaddress` reads as an address (so `std::vector`, `12:30:45` and a MAC address are not), also with a
port glued on as netstat prints it (`:::22`, `::1:25`, `:::*`); one without a digit (`::`, Perl's
`B::C`, `dead:beef::`) only where an address word, a port or brackets are beside it, and `::` only
standing apart ("listening on :: port 22", not "::" as C++ or Perl write it). Global ones only are
redacted.

The rules were set on a labelled set of real text (fixtures/pii_labelled.py: the Debian manuals, network
man pages, changelogs); `python -m bench.pii` prints their precision and recall (docs/filter.md).
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from dataclasses import dataclass

import numpy as np

from pretrainkit.dataprep.filter.kernels import candidate_windows
from pretrainkit.dataprep.filter.rules import Doc, Removal

EMAIL_PLACEHOLDER = "email@example.com"
IPV4_PLACEHOLDER = "192.0.2.1"
IPV6_PLACEHOLDER = "2001:db8::1"
KINDS = ("email", "ipv4", "ipv6")

_EMAIL = re.compile(  # not after "-": `lsof -i@host.name` is an option
    r"(?<!-)\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])"
    r"|\[(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\])"
)
_RESERVED_DOMAIN = re.compile(
    r"@(?:[^@]*\.)?(?:example\.(?:com|org|net)|[^.]+\.(?:example|invalid|test|localhost))$", re.I
)
# systemd's unit types: `name@instance.service` names a unit, no mailbox
_UNIT_SUFFIX = re.compile(r"\.(?:service|socket|target|timer|mount|automount|path|slice|scope|swap|device)$", re.I)
# a token of an SSH algorithm name (`chacha20-poly1305@openssh.com`, `ssh-ed25519-cert-v01@openssh.com`)
_ALGORITHM_TOKEN = re.compile(
    r"(?i)(?:^|-)(?:sha\d*|aes\d+|ctr|cbc|gcm|etm|umac|hmac|ed25519|ed448|ecdsa|dss|rsa|nistp\d+|curve\d+\w*"
    r"|chacha20|poly1305|sntrup\d+\w*|mlkem\d+\w*|cert|v\d\d|zlib|kex\w*)(?=-|@)"
)
# the domains whose implementations name SSH extensions and algorithms `name@domain` (`hostkeys@openssh.com`)
_SSH_NAMING_DOMAINS = ("openssh.com", "libssh.org")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![\w.])(?:{_OCTET}\.){{3}}{_OCTET}(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")

_SPACE = r"[ \t\u00a0]"
# the text before a quad on its line: nothing but indentation or list and heading marks
_LINE_OPENING = re.compile(r"[ \t\u00a0#*>|-]*")
_HEADING_AFTER = re.compile(rf"\.{_SPACE}+\S|\.?{_SPACE}+[A-Z][a-z]|\.$")
_NUMBER_LIST = rf"(?:[\d.]+{_SPACE}*(?:,|\band\b|\bor\b|\bto\b|\bthrough\b|-|\u2013){_SPACE}*)*"
# "Section" and "Chapter" as DocBook's translations write a cross-reference ("siehe Abschnitt 9.2.1.4")
_XREF_WORDS = (
    "abschnitt|kapitel|anhang|afsnit|avsnitt|kapittel|chapitre|annexe|sección|seccion|capítulo|capitulo|apéndice"
    "|seção|secção|sezione|capitolo|appendice|paragraaf|hoofdstuk|bijlage|sekcja|rozdział|oddíl|kapitola|odsek"
    "|odjeljak|poglavlje|szakasz|fejezet|secțiune|capitol|kısım|bölüm|phần|chương|τμήμα|κεφάλαιο|раздел\\w*"
    "|глав\\w*|розділ\\w*|jakso|luku"
)
_XREF_CUE = re.compile(
    rf"(?i)(?:\b(?:sections?|sect|secs?|chapters?|chap|ch|appendix|appendices|annex|parts?|clauses?|paragraphs?"
    rf"|paras?|figures?|figs?|tables?|rfc{_SPACE}*\d+{_SPACE}+section|{_XREF_WORDS})\.?|\u00a7+)"
    rf"{_SPACE}*[-#]?{_SPACE}*{_NUMBER_LIST}$"
)
# a title in typographic quotes after the number: DocBook's "12.2.2.2, “Network Configuration”"
_XREF_TITLE_AFTER = re.compile(rf"{_SPACE}*[,\u2013\u2014-]?{_SPACE}*[\u201c\u201e\u00ab\u300c]")
_VERSION_CUE = re.compile(
    rf"(?i)(?:\b(?:versions?|ver|v|releases?|released|rel|revision|rev|build|kernel|linux|firmware|patch"
    rf"|update[ds]?|upgrade[ds]?)\.?|[<>=~]=){_SPACE}*:?{_SPACE}*$"
)
_VERSION_SUFFIX = re.compile(r"[~+][0-9A-Za-z]")
_OID_CUE = re.compile(r"(?i)(?<![a-z])(?:oids?|object identifiers?|asn\.?1)(?![a-z])")
_ADDRESS_CUE = re.compile(
    r"(?i)(?<![a-z])(?:ip|ipv[46]|ip[46]|inet6?|addr|address|addresses|hosts?|hostname|servers?|nameservers?"
    r"|dns|gateway|gw|routers?|route[ds]?|routing|subnet|netmask|mask|network|broadcast|listen|listening"
    r"|bind|proxy|peer|client|connect|connects|connected|connection|ping|port|localhost|interface|via|src|dst"
    r"|saddr|daddr|allow|deny|dhcp|vpn|localip|remoteip|neigh|neighbour|neighbor|arp|lease|next-?hop)(?![a-z])"
)
_PORT_OR_PREFIX = re.compile(r"[:/](?:\d|\*)")  # 1.2.3.4:8080, [::]:*, 10.0.0.0/8
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_CONTEXT = 48  # characters either side on the line where an address word counts
_CUE_REACH = 64  # characters before a quad read for a cross-reference's or a version's cue
_REACH = 120  # characters before a quad on its line read for a heading's opening


@dataclass(frozen=True)
class Found:
    """An address in a text: `kind` one of KINDS, its offsets, and `personal`: check() redacts it (a
    public IP, an email outside the reserved domains)."""

    kind: str
    start: int
    end: int
    personal: bool


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
        self.kinds = ("email",) * settings.emails + ("ipv4", "ipv6") * settings.ips
        self.placeholders = {
            "email": settings.email_placeholder,
            "ipv4": settings.ipv4_placeholder,
            "ipv6": settings.ipv6_placeholder,
        }

    def check(self, doc: Doc) -> Removal | None:
        counts = {"email": 0, "ip": 0}
        text = doc.text
        pieces, at = [], 0
        for f in find(text, self.kinds, doc.code_points()):
            if f.personal:
                pieces += [text[at : f.start], self.placeholders[f.kind]]
                at = f.end
                counts["email" if f.kind == "email" else "ip"] += 1
        if pieces:
            doc.text = "".join(pieces) + text[at:]
        doc.fields["pii"] = counts
        return None


def find(text: str, kinds: tuple[str, ...] = KINDS, cps: np.ndarray | None = None) -> list[Found]:
    """The addresses of `kinds` in `text`, in order and disjoint: emails first (a bracketed IP in one
    goes with it), then IPv4, then IPv6 where no earlier address is. `cps`: the text's code points,
    where the caller has them (for the candidate windows)."""
    windows = candidate_windows(text, kinds, cps)
    found: list[Found] = []
    for kind in kinds:
        taken = sorted(found, key=lambda f: f.start)  # disjoint: the one before a match is the only one to reach it
        starts = [f.start for f in taken]
        for m in _matches(_PATTERNS[kind], text, windows[kind]):
            i = bisect.bisect_left(starts, m.end())
            if i and taken[i - 1].end > m.start():
                continue  # inside an address found before (a bracketed IP in an email)
            judged = _JUDGES[kind](m)
            if judged is not None:
                found.append(Found(kind, m.start(), m.end(), judged))
    return sorted(found, key=lambda f: f.start)


def _matches(pattern: re.Pattern, text: str, windows: list[tuple[int, int]]):
    """`pattern.finditer(text)` where every match lies in one of `windows` (their lookbehinds see the
    text before a window; one character after it is in reach of their lookaheads)."""
    for start, end in windows:
        for m in pattern.finditer(text, start, min(len(text), end + 1)):
            if m.end() <= end:  # a match cannot end past its window: the character after it is context
                yield m


def _email(m: re.Match) -> bool | None:
    """None where the match is no mailbox, else whether it is redacted."""
    address = m.group(0)
    local, domain = address.rsplit("@", 1)
    if _UNIT_SUFFIX.search(domain) or _ALGORITHM_TOKEN.search(local + "@") or domain.lower() in _SSH_NAMING_DOMAINS:
        return None
    return not _RESERVED_DOMAIN.search(address)


def _ipv4(m: re.Match) -> bool | None:
    before, after = _line_context(m)
    parts = [int(p) for p in m.group(0).split(".")]
    small = max(parts) < 100
    if small and _LINE_OPENING.fullmatch(before) and _HEADING_AFTER.match(after):
        return None  # "8.2.2.1. Installing ...", "4.2.13.1 Guided partitioning"
    # a cue stands right before the quad (a cross-reference's list of numbers between): its tail is read
    if _XREF_CUE.search(before[-_CUE_REACH:]) or _VERSION_CUE.search(before[-_CUE_REACH:]):
        return None
    if _VERSION_SUFFIX.match(after) or _XREF_TITLE_AFTER.match(after):
        return None
    if parts[0] <= 2 and _OID_CUE.search(before + after):
        return None
    if small and not _beside_an_address_word(before, after):
        return None
    return ipaddress.IPv4Address(m.group(0)).is_global  # the pattern admits dotted quads alone


def _ipv6(m: re.Match) -> bool | None:
    before, after = _line_context(m)
    run = m.group(0)
    read = _read_ipv6(run, after)
    if read is None:
        return None
    text, address = read
    after = run[len(text) :] + after  # a port glued on is context: `:::22` is `::` and port 22
    if text == "::" and before[-1:] not in ("", " ", "\t", '"', "'", "(", "[", "=", ","):
        return None  # "::" inside a token: C++'s `ns::`, a path separator
    if not any(c.isdigit() for c in text) and not _beside_an_address_word(before, after):
        return None  # no digit: `::` as a token, Perl's `B::C`, unless an address word is beside it
    return address.is_global


def personal(kind: str, address: str) -> bool:
    """Whether an address of `kind` ("email", "ipv4", "ipv6") is one that redaction replaces: an email
    outside the reserved domains; a global IP (an IPv6 with netstat's port glued on read as find() reads
    it, `:::22` as `::`)."""
    if kind == "email":
        return not _RESERVED_DOMAIN.search(address)
    read = _read_ipv6(address, "") if kind == "ipv6" else (address, _parsed(address))
    return read is not None and read[1] is not None and read[1].is_global


def _read_ipv6(run: str, after: str) -> tuple[str, ipaddress.IPv6Address] | None:
    """The IPv6 address in a run and its text: the run itself, else the run without a port glued on as
    netstat prints it (`:::22` is `::` and port 22, `:::*` is `::` and any port); None where neither
    reads. netstat's `::1:25` reads whole as an address too, in `::/96` (IPv4-compatible addresses,
    deprecated by RFC 4291 and written dotted where used): there it is `::1` and port 25."""
    whole = _parsed(run)
    rest, _, port = run.rpartition(":")
    by_port = _parsed(rest) if port.isdigit() or (not port and after.startswith("*")) else None
    if whole is not None and not (by_port is not None and whole in _IPV4_COMPATIBLE):
        return run, whole
    return (rest, by_port) if by_port is not None else None


def _line_context(m: re.Match) -> tuple[str, str]:
    """The text of the match's line before it (up to _REACH characters) and after it (up to _CONTEXT):
    bounded, so that a long line with many quads costs no more per quad."""
    text, start, end = m.string, m.start(), m.end()
    line_start = text.rfind("\n", max(0, start - _REACH), start) + 1
    line_end = text.find("\n", end, end + _CONTEXT)
    return text[max(line_start, start - _REACH) : start], text[end : end + _CONTEXT if line_end == -1 else line_end]


def _beside_an_address_word(before: str, after: str) -> bool:
    return bool(
        _ADDRESS_CUE.search(before[-_CONTEXT:])
        or _ADDRESS_CUE.search(after)
        or _PORT_OR_PREFIX.match(after)
        or (before.endswith("[") and after.startswith("]"))
        or before.endswith(("//", "@"))  # a URL's host: http://12.34.56.78/, user@[::1]
    )


def _parsed(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


_PATTERNS = {"email": _EMAIL, "ipv4": _IPV4, "ipv6": _IPV6}
_JUDGES = {"email": _email, "ipv4": _ipv4, "ipv6": _ipv6}
