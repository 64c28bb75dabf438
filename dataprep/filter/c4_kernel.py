"""C4's line rules and page rules (`pretrainkit.dataprep.filter.c4`), compiled (numba): a page's
lines cut, tested and the kept ones joined in one call over its code points.

    kernel = C4Kernel(C4Settings())
    found = kernel.run(kernels.code_points(text))   # found.outcome, found.sentences, found.text
    kernel = C4Kernel(C4Settings(), rules_for("zh"))  # a language's words and sentence marks

It does what these Python expressions, in this order, do on the page (TFDS's `clean_page`, as
`c4` describes it; the test holds them and compares the two on real and random texts):

    for line in text.splitlines():
        line = line.strip()
        drop it if any(len(w) > max_word_length for w in line.split())
        line = re.sub(r"\\[\\d*\\]|\\[edit\\]|\\[citation needed\\]", "", line)     # remove_citations
        drop it unless line.endswith((".", "?", "!", '"', "'")) and not line.endswith("...")
        drop it if len(line.split()) < min_words_per_line
        the page goes if "lorem ipsum" in line.lower()      # only where the page's lower case holds it
        drop it if "javascript" in line.lower()             # likewise
        the page goes if "{" in line                        # likewise
        drop it if a policy phrase is in line.lower()       # likewise
    text = "\\n".join(kept lines)
    the page goes if len(kept) + len(re.findall(r"[.!?]+[\\"'”’)\\]]*(?=[^\\S\\n]+\\S)", text)) < min_sentences
    text = text.strip()

Whitespace is `str.isspace`, `\\d` `str.isdecimal`, lower case `str.lower` per character (the tables
of `kernels`; the phrases are ASCII, and no character's lower case of several characters can make
or break one). In Python this took ~20 us of a 1.6 KB page; compiled, ~13 us.

With a language's rules (`language_rules`; English's are the expressions above): a terminal mark is
also one of the language's sentence marks; in a language of an unspaced script each of its
characters is a word of its own for `min_words_per_line` (scaled to the language's characters per
word); the sentence marks are the language's (where they need no space after them, any text after
them on the line will do), and a language without any has no sentence count (`min_sentences` off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pretrainkit.dataprep.filter.kernels import DECIMAL, SPACE, UNSPACED, among, code_points, tables
from pretrainkit.dataprep.filter.line_kernels import NEWLINE, PERIOD, is_line_end, joined_code_points, mark_at

# isort: split
import numba  # noqa: E402

if TYPE_CHECKING:
    from pretrainkit.dataprep.filter.c4 import C4Settings
    from pretrainkit.dataprep.filter.language_rules import LanguageRules

KEPT, LOREM_IPSUM, CURLY_BRACKET, FEW_SENTENCES = 0, 1, 2, 3  # outcomes
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
PHRASES = ("lorem ipsum", "javascript", *POLICY_PHRASES)  # bit i of what `_line_phrases` finds: PHRASES[i]
OPEN_BRACKET, CLOSE_BRACKET, OPEN_BRACE = 91, 93, 123
BRACE = np.uint64(1 << 63)  # among the bits of the phrases a line holds: it holds a "{"
# the rules' settings in one array (a call with fewer arguments costs less): their places in it
(
    LONGEST,
    LEAST,
    CITATIONS,
    TERMINAL,
    MIN_SENTENCES,
    LOREM_RULE,
    JAVASCRIPT_RULE,
    CURLY_RULE,
    POLICY_RULE,
    SPLIT,  # the class bits of a character that is a word of its own (kernels.UNSPACED), or 0
    SPACED_SENTENCES,  # a sentence mark ends a sentence only before blanks
) = range(11)
_CITATION_WORDS = joined_code_points(["[edit]", "[citation needed]"])
_TERMINAL = ".?!\"'"
_SENTENCE_MARKS, _CLOSERS = ".!?", code_points("\"'”’)]")


@dataclass(frozen=True)
class C4Found:
    outcome: int  # KEPT, or the page rule that removes the page
    sentences: int  # kept lines and sentence ends (counted as far as min_sentences needs); exact when FEW_SENTENCES
    text: str  # the kept lines joined by "\n", stripped (KEPT)
    code_points: np.ndarray | None = None  # text's code points (`kernels.code_points`), where the kernel has them


class C4Kernel:
    """C4's rules, with its settings (`c4.C4Settings`; None, a rule that is off), run on pages; with
    `language`, that language's words and sentence marks (`language_rules`)."""

    def __init__(self, settings: C4Settings, language: LanguageRules | None = None) -> None:
        s, r = settings, language
        least = s.min_words_per_line if r is None else r.words(s.min_words_per_line)
        min_sentences = s.min_sentences if r is None or r.sentence_marks else None
        self.terminal = code_points(_TERMINAL if r is None else _TERMINAL + r.sentence_marks)
        self.sentence_marks = code_points(_SENTENCE_MARKS if r is None else r.sentence_marks)
        self.rules = np.array(
            [
                -1 if s.max_word_length is None else s.max_word_length,
                -1 if least is None else least,
                s.remove_citations,
                s.require_terminal_punctuation,
                -1 if min_sentences is None else min_sentences,
                s.lorem_ipsum,
                s.drop_javascript_lines,
                s.curly_bracket,
                s.drop_policy_lines,
                UNSPACED if r is not None and r.unspaced else 0,
                r is None or r.space_after_sentence,
            ],
            np.int64,
        )
        self.phrases = joined_code_points(list(PHRASES))
        # per ASCII code point, the phrases whose first (second) letter it is in either case, as bits:
        # a line is searched for phrases only where two characters in a row begin one
        self.letters = np.zeros((2, 128), np.uint64)
        for i, phrase in enumerate(PHRASES):
            for at in (0, 1):
                for c in {phrase[at], phrase[at].upper()}:
                    self.letters[at, ord(c)] |= np.uint64(1 << i)

    def run(self, cps: np.ndarray) -> C4Found:
        classes, lower = tables()
        outcome, sentences, out, size = _c4_page(
            cps, classes, lower, self.rules, *self.phrases, self.letters, self.terminal, self.sentence_marks
        )
        if outcome != KEPT:
            return C4Found(outcome, sentences, "")
        joined = out[:size].tobytes().decode("utf-32-le", "surrogatepass")
        text = joined.strip()  # kept lines are stripped: only blank lines kept at an end (no words rule) go
        return C4Found(outcome, sentences, text, out[:size] if len(text) == size else None)


@numba.njit(cache=True)
def _holds_at(cps, q, b, lower, phrases, begin, end):
    """Whether cps[:b] in lower case holds phrases[begin:end] at q."""
    if q + end - begin > b:
        return False
    for k in range(end - begin):
        if lower[cps[q + k]] != phrases[begin + k]:
            return False
    return True


@numba.njit(cache=True)
def _holds(cps, a, b, lower, phrases, begin, end):
    """Whether cps[a:b] in lower case holds phrases[begin:end]."""
    for q in range(a, b - (end - begin) + 1):
        if _holds_at(cps, q, b, lower, phrases, begin, end):
            return True
    return False


@numba.njit(cache=True)
def _citation_end(cps, k, b, classes):
    """Where the citation mark at cps[k] ("[") ends, within b, or -1."""
    j = k + 1
    while j < b and classes[cps[j]] & DECIMAL:
        j += 1
    if j < b and cps[j] == CLOSE_BRACKET:
        return j + 1
    return mark_at(cps, k, b, *_CITATION_WORDS)


@numba.njit(cache=True)
def _has_longer_word(cps, a, b, classes, longest):
    """Whether a word of cps[a:b] (a run of non-whitespace) is longer than `longest`."""
    run = 0
    for k in range(a, b):
        run = 0 if classes[cps[k]] & SPACE else run + 1
        if run > longest:
            return True
    return False


@numba.njit(cache=True)
def _has_words(line, a, b, classes, least, split):
    """Whether line[a:b] holds `least` words (runs of non-whitespace, a character of class bits `split`
    a word of its own) or more."""
    words, inside = 0, False
    for k in range(a, b):
        c = classes[line[k]]
        space = (c & SPACE) != 0
        if not space and (not inside or c & split):
            words += 1
            if words >= least:
                return True
        inside = not space and not c & split
    return words >= least


@numba.njit(cache=True)
def _sentence_ends(line, a, b, classes, most, marks, spaced):
    """The matches of r"[.!?]+[\"'”’)\\]]*(?=[^\\S\\n]+\\S)" in line[a:b], counted up to `most` (none
    when it is 0 or less): a run of end marks (`marks`), then closing quotes or brackets, with blanks
    (optional where not `spaced`) and more of the line after it (a match never reaches past its line:
    the blanks after it are no line feed)."""
    found, p = 0, a
    while p < b and found < most:
        if not among(line[p], marks):
            p += 1
            continue
        j = p
        while j < b and among(line[j], marks):
            j += 1
        while j < b and among(line[j], _CLOSERS):
            j += 1
        k = j
        while k < b and classes[line[k]] & SPACE:
            k += 1
        if (k > j or not spaced) and k < b:
            found += 1
        p = j  # a match from within the run would end where this one does, and fail or succeed alike
    return found


@numba.njit(cache=True)
def _phrases_at(cps, q, b, lower, phrases, phrase_ends, candidates):
    """Which of the `candidates` (bits of PHRASES) cps[:b] holds at q in lower case, as bits."""
    held, begin = np.uint64(0), 0
    for p in range(len(phrase_ends)):
        bit = np.uint64(1) << np.uint64(p)
        if candidates & bit and _holds_at(cps, q, b, lower, phrases, begin, phrase_ends[p]):
            held |= bit
        begin = phrase_ends[p]
    return held


@numba.njit(cache=True)
def _candidates(cps, q, b, letters):
    """The phrases whose first two letters cps[:b] holds at q (in either case), as bits; 0 for most q."""
    if q + 1 >= b or cps[q] >= 128 or cps[q + 1] >= 128:
        return np.uint64(0)
    return letters[0, cps[q]] & letters[1, cps[q + 1]]


@numba.njit(cache=True)
def _line_phrases(line, a, b, lower, phrases, phrase_ends, letters):
    """The phrases line[a:b] holds in lower case, as bits in PHRASES' order, and BRACE where it holds a "{"."""
    held = np.uint64(0)
    for q in range(a, b):
        if line[q] == OPEN_BRACE:
            held |= BRACE
        candidates = _candidates(line, q, b, letters)
        if candidates:
            held |= _phrases_at(line, q, b, lower, phrases, phrase_ends, candidates)
    return held


@numba.njit(cache=True)
def _line_verdict(line, a, b, classes, lower, rules, phrases, phrase_ends, held, page, cut, terminal):
    """The rules after the citations on line[a:b], which holds the phrases `held` (`_line_phrases`):
    (KEPT and whether it is kept), or a page rule's outcome. `cut`: the line lost a citation mark,
    which can join a phrase the page does not hold (it counts only where the page, `page[:]`, holds it)."""
    size = b - a
    if rules[TERMINAL]:
        ellipsis = size >= 3 and line[b - 1] == PERIOD and line[b - 2] == PERIOD and line[b - 3] == PERIOD
        if size == 0 or not among(line[b - 1], terminal) or ellipsis:
            return KEPT, False
    if rules[LEAST] > 0 and not _has_words(line, a, b, classes, rules[LEAST], rules[SPLIT]):
        return KEPT, False
    if held == 0:
        return KEPT, True
    begin = 0
    for p in range(len(phrase_ends)):  # "lorem ipsum", then "javascript", then the policy phrases
        rule = rules[LOREM_RULE] if p == 0 else rules[JAVASCRIPT_RULE] if p == 1 else rules[POLICY_RULE]
        end = phrase_ends[p]
        if rule and held & (np.uint64(1) << np.uint64(p)):
            if not cut or _holds(page, 0, len(page), lower, phrases, begin, end):
                if p == 0:
                    return LOREM_IPSUM, False
                if p == 1:
                    return KEPT, False
                break  # a policy phrase: the brace's rule comes first
        begin = end
    else:
        p = len(phrase_ends)
    if rules[CURLY_RULE] and held & BRACE:
        return CURLY_BRACKET, False
    return KEPT, p == len(phrase_ends)


@numba.njit(cache=True)
def _c4_page(cps, classes, lower, rules, phrases, phrase_ends, letters, terminal, marks):
    n = len(cps)
    line = np.empty(0, np.uint32)  # a stripped line whose citation marks were cut (rare: made when needed)
    out = np.empty(n, np.uint32)  # the kept lines, "\n" between them: never more than the text
    size, kept, found, s = 0, 0, 0, 0
    while s < n:  # the lines of text.splitlines()
        # the line's end, whether it holds a "[", and the phrases and brace it holds, in one pass (a
        # phrase holds no line end, so none reaches past its line)
        e, bracket, held = s, False, np.uint64(0)
        while e < n:
            c = cps[e]
            if 0x20 <= c < 0x80 and c != OPEN_BRACKET and c != OPEN_BRACE:  # most characters
                # the phrases the two letters from here begin, without a branch on the first (a fifth
                # of the characters begin one): row 127 of `letters` is empty, so a next character
                # past ASCII gives none; at the text's end the pair is the last character twice,
                # which `_phrases_at` then finds no room for
                candidates = letters[0, c] & letters[1, min(cps[min(e + 1, n - 1)], 127)]
                if candidates:
                    held |= _phrases_at(cps, e, n, lower, phrases, phrase_ends, candidates)
                e += 1
                continue
            if is_line_end(c):
                break
            bracket |= c == OPEN_BRACKET
            if c == OPEN_BRACE:
                held |= BRACE
            e += 1
        a, b = s, e
        s = e + 2 if e + 1 < n and cps[e] == 13 and cps[e + 1] == NEWLINE else e + 1  # "\r\n" ends one line
        while a < b and classes[cps[a]] & SPACE:
            a += 1
        while b > a and classes[cps[b - 1]] & SPACE:
            b -= 1
        if rules[LONGEST] >= 0 and b - a > rules[LONGEST] and _has_longer_word(cps, a, b, classes, rules[LONGEST]):
            continue
        width = -1
        if rules[CITATIONS] and bracket:
            if len(line) < b - a:
                line = np.empty(b - a, np.uint32)
            width = _cut_citations(cps, a, b, classes, line)
        if width >= 0:  # the line lost a citation mark: it is in `line`
            held = _line_phrases(line, 0, width, lower, phrases, phrase_ends, letters)
            outcome, keep = _line_verdict(
                line, 0, width, classes, lower, rules, phrases, phrase_ends, held, cps, True, terminal
            )
        else:
            outcome, keep = _line_verdict(
                cps, a, b, classes, lower, rules, phrases, phrase_ends, held, cps, False, terminal
            )
        if outcome != KEPT:
            return outcome, 0, out, 0
        if not keep:
            continue
        if kept:
            out[size] = NEWLINE
            size += 1
        kept += 1
        if width >= 0:
            size = _put_line(out, size, line, 0, width)
            more = _sentence_ends(
                line, 0, width, classes, rules[MIN_SENTENCES] - kept - found, marks, rules[SPACED_SENTENCES]
            )
        else:
            size = _put_line(out, size, cps, a, b)
            more = _sentence_ends(
                cps, a, b, classes, rules[MIN_SENTENCES] - kept - found, marks, rules[SPACED_SENTENCES]
            )
        found += more  # counted only as far as min_sentences needs: more ends change nothing
    if kept + found < rules[MIN_SENTENCES]:
        return FEW_SENTENCES, kept + found, out, size
    return KEPT, kept + found, out, size


@numba.njit(cache=True)
def _cut_citations(cps, a, b, classes, line):
    """cps[a:b] without its citation marks, written to `line`: how long it is, or -1 where there was none."""
    width, k, cut = 0, a, False
    while k < b:
        end = _citation_end(cps, k, b, classes) if cps[k] == OPEN_BRACKET else -1
        if end >= 0:
            k, cut = end, True
            continue
        line[width] = cps[k]
        width += 1
        k += 1
    return width if cut else -1


@numba.njit(cache=True)
def _put_line(out, w, line, a, b):
    for k in range(a, b):
        out[w + k - a] = line[k]
    return w + b - a
