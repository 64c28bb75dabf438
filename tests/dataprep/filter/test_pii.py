"""PII redaction: real addresses replaced and counted; what only looks like one (versions, dates,
code, private addresses, the placeholders themselves) left as it is."""

from __future__ import annotations

import random
import re

import pytest

from fixtures.corpora import pep_documents, reuters_documents
from pretrainkit.dataprep.filter.kernels import candidate_windows
from pretrainkit.dataprep.filter.pii import PII, PIISettings
from pretrainkit.dataprep.filter.rules import Doc


def redact(text: str, **settings) -> tuple[str, dict]:
    doc = Doc(text)
    assert PII(PIISettings(**settings)).check(doc) is None  # redaction never removes a document
    return doc.text, doc.fields["pii"]


@pytest.mark.parametrize(
    "text,expected,counts",
    [
        ("Write to jane.doe+news@mail.example-corp.co.uk today.", "Write to email@example.com today.", (1, 0)),
        (
            "a@b.io, C.D@e.org; <x_y@sub.domain.info>",
            "email@example.com, email@example.com; <email@example.com>",
            (3, 0),
        ),
        ("host 8.8.8.8 answered, 2001:4860:4860::8888 too", "host 192.0.2.1 answered, 2001:db8::1 too", (0, 2)),
        ("Connect to 93.184.216.34:443 now.", "Connect to 192.0.2.1:443 now.", (0, 1)),
        ("mail root@[93.184.216.34] please", "mail email@example.com please", (1, 0)),
    ],
)
def test_real_addresses_are_replaced_and_counted(text, expected, counts):
    assert redact(text) == (expected, {"email": counts[0], "ip": counts[1]})


@pytest.mark.parametrize(
    "text",
    [
        "Upgrade to version 1.2.3.4 or v2.0.0.1 (release 4.4.4.4).",  # version numbers (public addresses otherwise)
        "Released 2023.10.12, patched 12.10.2023.",  # dates have three parts
        "see 1.2.3.4.5 and 10.1.2.3.4",  # longer dotted runs are no address
        "LAN 192.168.1.10, loopback 127.0.0.1, link fe80::1, local ::1, doc 192.0.2.7",  # not public
        "@property\ndef name(self):\n    return a@b",  # a decorator; no domain
        "alice@laptop:~$ ls -la",  # a shell prompt: a host without a dot is no domain
        "npm install left-pad@1.3.0 and pip install pkg==2.0",  # a pinned version: no top-level domain
        "std::vector<int> v; at 12:30:45 on a::b::c",  # C++ and clock times
        "Contact email@example.com or 192.0.2.1 or 2001:db8::1.",  # the placeholders: a second run changes nothing
        "word@ alone, @mention, and 3 @ 4",
    ],
)
def test_what_only_looks_like_an_address_stays(text):
    assert redact(text) == (text, {"email": 0, "ip": 0})


def test_redaction_is_idempotent_and_switchable():
    once, counts = redact("x 8.8.4.4 y jo@corp.com z")
    assert counts == {"email": 1, "ip": 1} and redact(once) == (once, {"email": 0, "ip": 0})
    assert redact("x 8.8.4.4 y jo@corp.com", emails=False) == ("x 192.0.2.1 y jo@corp.com", {"email": 0, "ip": 1})
    assert redact("x 8.8.4.4 y jo@corp.com", ips=False, email_placeholder="<EMAIL>") == (
        "x 8.8.4.4 y <EMAIL>",
        {"email": 1, "ip": 0},
    )


# What the IP windows are by definition (kernels.candidate_windows): maximal runs of digits and
# periods, and runs of hexadecimal digits, colons and periods that begin at a digit, letter or colon.
IPV4_RUN = re.compile(r"[0-9.]+")
IPV6_RUN = re.compile(r"[0-9A-Fa-f:][0-9A-Fa-f:.]*")
FRAGMENTS = ["1", "25", "255", ".", "..", ":", "::", "a", "F", "fe80", "g", "x", " ", "\n", "é", "@", "-", "1.2"]


def reference_windows(text: str) -> dict[str, list[tuple[int, int]]]:
    return {
        "ipv4": [m.span() for m in IPV4_RUN.finditer(text) if len(m[0].replace(".", "")) >= 4 and m[0].count(".") >= 3],
        "ipv6": [m.span() for m in IPV6_RUN.finditer(text) if m[0].count(":") >= 2],
    }


def test_ip_windows_are_the_runs_of_their_definition():
    """The kernels find the runs from the periods and colons alone; on random mixes of the characters
    that make and break runs, and on real text, they find exactly the runs the definition gives."""
    rng = random.Random(7)
    texts = ["".join(rng.choices(FRAGMENTS, k=rng.randint(0, 40))) for _ in range(3000)]
    texts += [text for _, text in pep_documents() + reuters_documents(files=1)]  # code, versions, times, numbers
    for text in texts:
        assert candidate_windows(text, ("ipv4", "ipv6")) == reference_windows(text), text
