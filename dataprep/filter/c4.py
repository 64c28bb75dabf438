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
`C4QualityFilter(filter_no_terminal_punct=False)`). The lines are cut, tested and joined by one
compiled call (`c4_kernel`, whose docstring spells the rules out as Python expressions).

The settings are English's: a document labelled with another language (`language_rules`) has its
words per line counted in that language's words (a character of an unspaced script is a word, 3
words are 6 Chinese characters) and its sentences ended by that language's marks too (`。` with no
space after it); a language without sentence marks (Thai, Lao) has no `min_sentences`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pretrainkit.dataprep.filter.c4_kernel import CURLY_BRACKET, FEW_SENTENCES, LOREM_IPSUM, MIN_SENTENCES, C4Kernel
from pretrainkit.dataprep.filter.language_rules import PerLanguage
from pretrainkit.dataprep.filter.rules import Doc, Removal, below


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
        # the kernel with the language's words and sentence marks (`language_rules`)
        self.kernels = PerLanguage(C4Kernel(settings), lambda language: C4Kernel(settings, language))

    def check(self, doc: Doc) -> Removal | None:
        kernel = self.kernels(doc.fields.get("lang"))
        found = kernel.run(doc.code_points())
        if found.outcome == LOREM_IPSUM:
            return Removal(f"{self.name}.lorem_ipsum", "lorem ipsum", True)
        if found.outcome == CURLY_BRACKET:
            return Removal(f"{self.name}.curly_bracket", "{", True)
        if found.outcome == FEW_SENTENCES:
            return below(self.name, "min_sentences", found.sentences, int(kernel.rules[MIN_SENTENCES]))
        doc.set_text(found.text, found.code_points)
        return None
