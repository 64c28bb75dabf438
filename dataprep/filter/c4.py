"""C4's cleaning rules (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", JMLR 21(140), Section 2.2 "The Colossal Clean Crawled Corpus"), line by
line then for the page, as the reference code applies them (TensorFlow Datasets,
https://github.com/tensorflow/datasets/blob/master/tensorflow_datasets/text/c4_utils.py, `clean_page`)
and datatrove's `C4QualityFilter` repeats:

    C4(C4Settings(require_terminal_punctuation=False)).check(doc)   # FineWeb's settings; doc.text loses lines

Per line (stripped): a line holding a word longer than `max_word_length` (1000) is dropped; the
Wikipedia citation marks `[1]`, `[edit]`, `[citation needed]` are cut out; a line that does not end
in a terminal mark (. ? ! " ', not an ellipsis) is dropped ("We only retained lines that ended in a
terminal punctuation mark"); a line of fewer than `min_words_per_line` (3) words is dropped ("only
retained lines that contained at least 3 words"); a line with "javascript" is dropped ("We removed
any line with the word Javascript"); and a line holding one of the policy phrases (terms of use,
privacy policy, cookie policy, uses cookies, use of cookies, use cookies: the reference code's list)
is dropped. Per page: "lorem ipsum" in a kept line removes it ("We removed any page where the phrase
'lorem ipsum' appeared"), so does "{" ("We removed any pages that contained a curly bracket"), and so
does a page whose kept lines hold fewer than `min_sentences` (5) sentences ("We discarded any page
with fewer than 5 sentences"). The paper's 3 words and 5 sentences are datatrove's defaults too; the
first TFDS release had them the other way round (5 words, 3 sentences). The list of bad words is not
applied: it is a download, and FineWeb did not apply it either.

Sentences are counted as runs of text ending in . ! or ? before a space or the line's end (the
reference code uses NLTK's Punkt, which also knows abbreviations; this count can be higher on lines
with "e.g." or "Mr."). FineWeb ran this filter with `require_terminal_punctuation` off
(https://github.com/huggingface/datatrove/blob/main/examples/fineweb.py:
`C4QualityFilter(filter_no_terminal_punct=False)`).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from pretrainkit.dataprep.filter.rules import Doc, Removal, below

CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
TERMINAL_MARKS = (".", "?", "!", '"', "'")
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=[^\S\n]+\S)")  # an end mark with more of its line after it


@dataclass(frozen=True)
class C4Settings:
    require_terminal_punctuation: bool = True
    min_words_per_line: int | None = 3
    max_word_length: int | None = 1000
    remove_citations: bool = True
    drop_javascript_lines: bool = True
    drop_policy_lines: bool = True
    lorem_ipsum: bool = True  # remove the page
    curly_bracket: bool = True  # remove the page
    min_sentences: int | None = 5


class C4:
    name = "c4"

    def __init__(self, settings: C4Settings):
        self.s = settings

    def check(self, doc: Doc) -> Removal | None:
        s = self.s
        # the phrases looked for in each line are looked for in the page first: most pages have none
        lower_page = doc.text.lower()
        lorem = s.lorem_ipsum and "lorem ipsum" in lower_page
        javascript = s.drop_javascript_lines and "javascript" in lower_page
        curly = s.curly_bracket and "{" in doc.text
        policy = s.drop_policy_lines and any(p in lower_page for p in POLICY_PHRASES)
        longest, least = s.max_word_length, s.min_words_per_line
        # Each line rule reads the line alone, so each runs over all lines in turn (a comprehension
        # per rule, rather than one Python loop with a branch per rule per line); the page rules then
        # meet the kept lines in their order, as the reference code's single loop does.
        kept = [line.strip() for line in doc.text.splitlines()]
        if longest is not None:
            kept = [line for line in kept if len(line) <= longest or all(len(w) <= longest for w in line.split())]
        if s.remove_citations and "[" in doc.text:
            kept = [CITATION.sub("", line) if "[" in line else line for line in kept]
        if s.require_terminal_punctuation:
            kept = [line for line in kept if line.endswith(TERMINAL_MARKS) and not line.endswith("...")]
        if least is not None:
            kept = [line for line in kept if len(line.split(None, least)) >= least]
        if lorem or javascript or curly or policy:
            kept, lines = [], kept
            for line in lines:
                lower = line.lower()
                if lorem and "lorem ipsum" in lower:
                    return Removal(f"{self.name}.lorem_ipsum", "lorem ipsum", True)
                if javascript and "javascript" in lower:
                    continue
                if curly and "{" in line:
                    return Removal(f"{self.name}.curly_bracket", "{", True)
                if policy and any(p in lower for p in POLICY_PHRASES):
                    continue
                kept.append(line)
        text = "\n".join(kept)
        if s.min_sentences is not None:
            # a line's sentences: its end marks followed by more of the line, and one more; the marks are
            # counted only as far as the threshold needs (a page's kept lines alone often reach it)
            needed = max(s.min_sentences - len(kept), 0)
            sentences = len(kept) + sum(1 for _ in itertools.islice(_SENTENCE_END.finditer(text), needed))
            if removal := below(self.name, "min_sentences", sentences, s.min_sentences):
                return removal
        doc.text = text.strip()
        return None
