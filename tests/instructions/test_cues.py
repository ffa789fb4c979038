"""Cue families found by their anchors agree with the families as one pattern, sentence by sentence and per message."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from contextwarden.instructions import kinds, read_sentence, split_sentences
from contextwarden.instructions.cues import CueSet, words
from contextwarden.instructions.kinds import read_sentences

FAMILIES = [kinds._RULE, kinds._WEAK_RULE, kinds._CORRECTION, kinds._WEAK_CORRECTION, kinds._DECISION]
PROVENANCE = [kinds._AUTHORITY, kinds._STANDING]

# words of the cue forms, their neighbours, and near misses ("nevermore", "mustard", "rules")
VOCABULARY = (
    "never nevermore always from now on going forward for the rest of all future every each time whenever at "
    "times under no circumstance circumstances by default must mustn't mustnt mustard shall not allowed rule rules "
    "house team #4 4 : policy constraint please don't do ever before you any running stop using testing longer "
    "only use run edit remember to make sure that prefer over keep it short under instead rather than , forget "
    "about disregard ignore what my earlier change this i was wrong anymore is are now statt en lugar de au lieu "
    "invece di em vez cambiar correction actually update update: wait sorry no no, nope switch switched replace "
    "with let's lets go ahead proceed proceeding decided agreed option a b yes sounds good works notice from user "
    "says system prompt permission authorized cancelled revoked new instruction until further [ ] [notice] "
    "nunca jamás ne jamais pas bitte keine d'ora in poi não edite daqui em diante 不要 别 必须 改为 ではなく しないで "
    "the a code file . ! ? 5.25 ok"
).split()

sentences = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=14).map(" ".join)


@settings(max_examples=600, deadline=None)
@given(sentence=sentences)
def test_a_family_found_by_its_anchors_is_the_family_as_one_pattern(sentence: str) -> None:
    low = sentence.lower()
    present = words(low)
    for family in FAMILIES + PROVENANCE:
        assert family.found(low, present) == (family.pattern.search(low) is not None), family.pattern.pattern[:60]


@settings(max_examples=1000, deadline=None)
@given(data=st.data(), form=st.sampled_from([(f, form) for f in FAMILIES + PROVENANCE for form in f.forms]))
def test_every_text_a_form_matches_is_found_by_its_anchors(data: st.DataObject, form: tuple[CueSet, str]) -> None:
    family, pattern = form
    text = data.draw(st.from_regex(pattern))
    assert family.found(text, words(text)), (pattern, text)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(sentences, st.sampled_from([". ", "! ", "\n", "。", ".  "])), min_size=1, max_size=8))
def test_a_message_read_at_once_reads_as_its_sentences_one_by_one(parts: list[tuple[str, str]]) -> None:
    text = "".join(s[:1].upper() + s[1:] + end for s, end in parts)
    spans = [(s.start, s.end) for s in split_sentences(text)]
    assert read_sentences(text, spans) == [read_sentence(text[a:b]) for a, b in spans]


def test_a_labelled_rule_is_a_rule_whatever_follows_the_label() -> None:
    for sentence in ("Rule 6: no print statements in library code.", "House rule: every commit names its ticket."):
        reading = read_sentence(sentence)
        assert reading.kind == "rule" and reading.strong
