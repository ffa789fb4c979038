"""What kind of sentence the user wrote: a standing rule, a correction, a named value, a decision.

The kind is read from the form of the sentence, not from a list of known sentences: a rule
forbids, requires or sets a default for the rest of the session ("never …", "always …", "from
now on …", "before you …", "please don't … again", "stop using X", "no print statements …", a
"rule:" or "constraint:" label, "whatever you do, …", a "don't" opening a later clause, "hold off
on …", "nothing gets … while …", "I don't want any …", "… in everything you touch"); a correction
replaces something said before ("correction:", "actually", "instead", "X, not Y", "forget …",
"make that …", "no longer …", "I misspoke"); a value names something ("the deploy window is
K-442y", "ticket: OPS-1", "the host is actually h-3", "replace h-1 with h-2 for the host", "we
agreed on h-2 for the host"), also after a lead-in or in a later clause ("Scratch that, the host is
h-2", "Turns out the host is h-4"); a decision settles a choice ("let's go with option A", "yes,
proceed"). Cues in a few other languages (Spanish, French, German,
Portuguese, Italian, Chinese, Japanese) are recognized too.

The same reading serves the provenance rule (`contextwarden.provenance`): a sentence in a tool
output that reads as an instruction is what a forged notice looks like.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .cues import CueSet, words

__all__ = ["Reading", "SentenceKind", "read_sentence", "read_sentences", "reads_as_instruction", "value_key"]

SentenceKind = Literal["rule", "correction", "value", "decision", "request"]

_I = re.IGNORECASE
# Cue forms are matched against the lower-cased sentence (see `cues`): a rule forbids, requires or
# sets a default for the rest of the session.
_RULE = CueSet(
    opening=(
        # after a short lead-in ("Quick note —", "Oh, and one thing:", "By the way,")
        # (a bounded run of word characters, spaces and commas: nested repeats would backtrack exponentially)
        # (one "^" for both forms: a sentence inside a message is matched from its offset without it)
        r"^\W*(?:(?:[^\W\d_][\w' ,]{0,32}?[:—–]+\s*|(?:by the way|btw|also|and|oh|oh and|plus|one more thing|ps|"
        r"fyi)\s*,\s*)?"
        r"(?:(?:please|pls|plz),?\s+)?"
        r"(?:no \w+|don'?t|do not|make sure|ensure|use|run|ask|write|put|leave|limit|prefix|sign|tag|include|exclude|"
        r"respond|reply|answer|speak|format|follow|wait for|confirm|double-check|name|cite|call|commit|push|stick|stay|"
        r"prefer|target|quote|address|refer|respect|honou?r|obey|observe|hold off)\b"
        # a standing order under a condition: "When you write a test, name it …", "If there's a choice, I want …"
        r"|(?:when|whenever|if|once|each time|every time|any time|anytime)\s+(?:you|we|there'?s|there is)\b"
        # (then an imperative: any word that is not a subject, a modal, a question or a filler)
        r"[^,.;!?]{1,80},\s*(?:please\s+)?(?:i (?:want|need|prefer|expect)|don'?t|do not|(?!(?:i|we|you|it|its|that|"
        r"this|these|those|the|a|an|there|they|he|she|my|our|your|could|would|can|will|should|may|might|maybe|"
        r"perhaps|let|lets|just|then|so|and|but|or|is|are|was|were|what|how|why|which|who|where|do|does|did|not|"
        r"no|yes|ok|okay|thanks|thank|great|good|nice|cool|sure|fine|all|everything)\b)[a-z]{2,})\b)"
    ),
    words=(
        "never always henceforth whenever forbidden prohibited mandatory avoid refrain must mustnt "
        # other languages: never / always / from now on
        "nunca siempre jamás jamais toujours désormais dorénavant niemals immer nie sempre mai"
    ),
    phrases={
        "now here point": [r"\bfrom (?:now|here|this point) on\b"],
        "forward": [r"\bgoing forward\b"],
        "rest": [r"\bfor the rest of\b"],
        # whatever else happens: "Whatever you do, …", "No matter what, …"
        "whatever": [r"\bwhatever (?:you|happens|else)\b"],
        "matter": [r"\bno matter what\b"],
        # a prohibition opening a later clause: "Whatever the reason, don't …", "…; no imports from …"
        "don do": [
            r"[,;:—–]\s*(?:please\s+)?(?:don'?t|do not)\s+(?!(?:worry|know|think|see|understand|mind|have|need)\b)\w"
        ],
        "hold": [r"\bhold off\b"],
        "unless": [r"\bunless (?:i|we|you (?:ask|check)) (?:say|tell|ask|approve|confirm|agree|explicitly)"],
        # "Nothing gets merged while …", "Nothing ships without …"
        "nothing": [r"\bnothing (?:gets|goes|ships|lands|should|may|can|is to|ever)\b"],
        # "Every commit needs a sign-off", "All endpoints must …"
        "needs need": [r"\b(?:every|each|all|any) [\w-]+(?: [\w-]+)? needs?\b"],
        # a preference for every change: "keep … in everything you touch"
        "touch write edit change add create": [
            r"\bin (?:everything|anything|every \w+|all \w+|any \w+) (?:you|we) "
            r"(?:touch|write|edit|change|add|create)\b"
        ],
        # "I want every migration to be reversible", "I expect you to always …"
        "want need expect": [
            r"\b(?:i|we) (?:want|need|expect) (?:every|all|each|you to (?:always|never))\b",
            r"\b(?:i|we) (?:don'?t|do not) (?:want|need) (?:any|to|you to|anything|more)\b",
        ],
        "exceptions": [r"\bno exceptions\b"],
        "future": [r"\bfor all future\b"],
        "time": [r"\b(?:every|each) time\b"],
        "times": [r"\bat all times\b"],
        "circumstance circumstances": [r"\bunder no circumstances?\b"],
        "default": [r"\bby default\b"],
        "mustn": [r"\bmustn'?t\b"],
        "shall": [r"\bshall not\b"],
        "allowed": [r"\bnot allowed\b"],
        # a label: "Rule 4:", "House rule:", "Constraint #2:", "Team convention:" (the rule follows it)
        "rule rules policy policies constraint constraints guideline guidelines convention conventions requirement "
        "requirements principle principles": [
            r"\b(?:(?:house|team|project|standing|coding|style|repo|our|my)\s+)?(?:rules?|polic(?:y|ies)|constraints?|"
            r"guidelines?|conventions?|requirements?|principles?)(?: \w+| #?\d+)?:"
        ],
        "please": [r"\bplease (?:don'?t|do not|never|always|avoid|stop|keep|make sure|remember)\b"],
        "ever": [r"\bdon'?t ever\b", r"\bdo not ever\b"],
        "before": [r"\bbefore (?:you|any|each|every|\w+ing)\b"],
        "stop": [r"\bstop \w+ing\b", r"\bfull stop\b"],
        "longer": [r"\bno longer\b"],
        "only": [
            r"\bonly (?:ever )?(?:use|run|edit|touch|change|book|offer|charge)\b",
            r"\b(?:to|with|in|on|for|from) (?:my|the|our|your) [\w -]{1,30}? only\b",
        ],
        "remember": [r"\bremember to\b", r"\bremember (?:that|this)\W*$"],
        "sure": [r"\bmake sure (?:to|that|you)\b"],
        "prefer": [
            r"\b(?:i|we) prefer\b",
            r"\bprefer \w+ (?:over|to)\b",
            r"\b(?:i|we)(?:'d| would) (?:really )?prefer\b",
        ],
        # a preference for how things are, not a one-off wish ("I'd like the docs in plain English")
        "rather": [r"\b(?:i|we)(?:'d| would) (?:really )?rather\b"],
        "like": [
            r"\b(?:i|we)(?:'d| would) like (?:the|all|every|each|our|my|any|everything|things|commit|code|docs?|"
            r"tests?)\b"
        ],
        # a prohibition in the first person plural, an approval to ask for first
        "let": [r"\blet's not\b"],
        "lets": [r"\blets not\b"],
        "without": [
            r"\bwithout (?:asking|checking with|telling|consulting|my (?:ok|okay|approval|sign-off)|approval)\b"
        ],
        # a requirement stated as what matters
        "important essential crucial critical vital": [
            r"\bit(?:'s| is) (?:really |very |super |absolutely )?(?:important|essential|crucial|critical|vital) "
            r"(?:that|to)\b"
        ],
        "keep": [
            r"\bkeep (?:all|every|each|the|your|it|them|answers|replies|responses|messages|lines|output|logs?|code|"
            r"commits?|both|our|my|any|these|those|this|that)\b[^.]*\b(?:under|below|in|to|short|brief|concise|on|"
            r"off|at|compatible|consistent|stable|green|passing|private|small|simple|sorted|unchanged|intact|alone|"
            r"separate|together|same)\b"
        ],
        # other languages: do not / from now on
        "no": [r"\bno (?:edites|toques|uses|hagas|borres|añadas|cambies)\b"],
        "partir": [r"\ba partir de ahora\b", r"\bà partir de maintenant\b"],
        "adelante": [r"\bde ahora en adelante\b"],
        "ne": [r"\bne (?:\w+ )?(?:jamais|pas)\b"],
        "keinen": [r"\bauf keinen fall\b"],
        "jetzt": [r"\bab jetzt\b"],
        "nun": [r"\bvon nun an\b"],
        "bitte": [r"\bbitte kein\w*"],
        "non": [r"\bnon (?:modificare|toccare|usare|aggiungere)\b"],
        "ora": [r"\bd'ora (?:in poi|innanzi)\b"],
        "agora": [r"\ba partir de agora\b"],
        "não": [r"\bnão (?:edite|toque|use|adicione)\b"],
        "daqui": [r"\bdaqui em diante\b"],
    },
    texts=dict.fromkeys(
        "不要 别 勿 禁止 务必 必须 始终 总是 一律 永远 以后都 从现在起 今后 "  # Chinese: never, always, from now on
        "しないで 必ず 絶対 常に 今後 これから".split()  # Japanese
    ),
)
# Weaker forms: as often a one-off request as a standing rule.
_WEAK_RULE = CueSet(
    words=(
        "dont should shouldnt ensure again anymore rule policy constraint requirement guideline convention "
        "preference keep"
    ),
    phrases={"don": [r"\bdon'?t\b"], "do": [r"\bdo not\b"], "shouldn": [r"\bshouldn'?t\b"], "sure": [r"\bmake sure\b"]},
)
_CORRECTION = CueSet(
    opening=(
        r"^\W*(?:(?:sorry|oh|ah|hmm|ok|okay|oops|wait|no)\W+)?"
        r"(?:correction|corrected|actually|scratch that|my (?:bad|mistake)|i meant|let me correct|to correct|"
        r"change of plans?|on second thought|to clarify|erratum|update:|not \S+\s*[—–;-]|en fait|corrección|corrige|"
        r"korrektur|eigentlich|correzione|in realtà|更正|纠正|其实|訂正|実は)(?!\w)"
    ),
    words="instead disregard statt misspoke",
    phrases={
        "rather": [r"\brather than\b"],
        "not": [r",\s*not\s+\S", r"\bnot\s+\S+\s*,\s*but\b", r"\bnot anymore\b"],
        "forget": [r"\bforget (?:about )?"],
        "scratch": [r"\bscratch (?:that|this|\S+[;,])"],
        "ignore": [r"\bignore (?:what|my|the (?:earlier|previous|last|old))"],
        "longer": [r"\bno longer\b"],
        "make": [r"\bmake (?:that|it) \S"],
        "change": [r"\bchange (?:it|that|this) to\b"],
        "wrong": [r"\bi was wrong\b"],
        "bad mistake": [r"\bmy (?:bad|mistake)\b", r"\bwas a mistake\b"],
        "typo": [r"\btypo on my\b", r"\bmy typo\b"],
        "using": [r"\bstop using\b"],
        "now": [r"\b(?:is|are) now\b"],
        "lugar": [r"\ben lugar de\b"],
        "lieu": [r"\bau lieu de\b"],
        "invece": [r"\binvece di\b"],
        "vez": [r"\bem vez de\b"],
    },
    texts={"cambia": r"\bcambia", "而不是": None, "改为": None, "改成": None, "ではなく": None},
)
_WEAK_CORRECTION = CueSet(
    opening=r"^\W*(?:wait|sorry|oops|no[,.!:]|nope|update|rather)(?!\w)",
    phrases={
        "switch switched": [r"\bswitch(?:ed)? (?:to|over)\b"],
        "replace replaced replaces": [r"\breplace[sd]? (?:by|with)\b"],
        "now": [r"\bnow use\b"],
    },
)
_DECISION = CueSet(
    phrases={
        "let": [r"\blet'?s (?:go with|use|do|pick|take|stick with)"],
        "lets": [r"\blets (?:go with|use|do|pick|take|stick with)"],
        "go": [r"\bgo (?:with|ahead)"],
        "we": [r"\bwe(?:'ll| will) (?:use|go|do)"],
        "i": [r"\bi(?:'ll| will) take"],
        "option": [r"\boption [a-z0-9]\b"],
        "sounds": [r"\bsounds good"],
        "that": [r"\bthat works"],
        "yes": [r"\byes,? (?:please|do|go|let'?s)"],
    },
    # these forms end without a word boundary ("proceeding", "decisions"): found by their opening
    texts={w: rf"\b{w}" for w in ("proceed", "decided", "decision", "agreed", "approved")},
)
# "the deploy window is K-442y", "my user id is x", "ticket: OPS-1", "the region = eu-west-1"
# ("the staging host we're using is …", "the tag should read …")
_VALUE_RE = re.compile(
    r"^(?:(?:the|our|my|your|this|that)\s+)?(?P<key>[^\W\d][\w\-/ ]{1,48}?)"
    r"(?:\s+(?:we|i|you)(?:'re| are|'m| am)?\s+(?:using|use))?\s*"
    r"(?:\b(?:is|are|was|will be|should be|must be|has to be|should read|reads)\b|=|:|＝|：)\s*"
    r"(?:(?:now|actually|really|in fact|instead|still)\s+)?"
    r"(?P<value>\S.*)$",
    _I,
)
# a name, then its value after a pronoun: "the cache TTL changed: it's 45s now", "about the host — it's h-2"
_VALUE_IT_RE = re.compile(
    r"^(?:(?:the|our|my|your)\s+)?(?P<key>[^\W\d][\w\-/ ]{1,48}?)\s+(?:(?:has\s+)?(?:changed|moved)\s*)?"
    r"[—–:;,-]+\s*(?:it'?s|it is|that'?s|it should be)\s+(?:now\s+)?(?P<value>\S.*)$",
    _I,
)
# "set the cache TTL to 30s", "switch the region to eu-west-1", "use K-7 for the deploy window",
# "new value for the cron schedule: 0 5 * * *"
_VALUE_VERB_RE = re.compile(
    r"^(?:(?:set|switch|change|move|update|point)\s+(?:the\s+|our\s+|my\s+)?(?P<key>[^\W\d][\w\-/ ]{1,48}?)\s+to\s+"
    r"(?P<value>\S.*)|(?:use|i meant|take|make (?:that|it)|go with|"
    r"(?:we|i)(?:'ve)? (?:agreed on|settled on|decided on|chose|picked|went with)|"
    r"replace\s+\S+\s+(?:with|by))\s+(?P<value2>\S+)\s+(?:for|as)\s+"
    r"(?:the\s+|our\s+|my\s+)?"
    r"(?P<key2>[^\W\d][\w\-/ ]{1,48}?)\W*|new value for\s+(?:the\s+)?(?P<key3>[^\W\d][\w\-/ ]{1,48}?)\s*[:=]\s*"
    r"(?P<value3>\S.*))$",
    _I,
)
# what comes before the name in "Correction: the ticket is …", "For this task, the branch is …"
_LEAD_RE = re.compile(
    r"^(?:\W*(?:for (?:this|the) (?:task|project|session|job|run|trip|booking)|note(?: for [\w ]+)?|correction|"
    r"corrected|actually|also|one more thing|so|and|by the way|fyi|update|updated|sorry|oops|wait|ok(?:ay)?|"
    r"sure|yes|no|hi|hello|please note|just so you know|remember|reminder|let'?s|please|not \S+(?=\s*[—–;-])|btw|"
    # a lead-in that introduces the statement: "you'll need the host: …", "let's say the port is …"
    r"you(?:'ll| will)? need|here'?s|here is|(?:let'?s |lets )?(?:say|suppose|assume)(?: that)?|"
    r"ignore what i (?:said|told you|wrote) about|oh|ah|hey|hmm|right|"
    # a question that asks for the change: "can you change the host to …"
    r"(?:can|could|would) you(?: please)?|(?:it )?turns out(?: that)?|it seems(?: that)?|looks like)\b"
    r"\s*[,.:!;—–-]?\s*)+",
    _I,
)
_NOT_VALUE_KEYS = frozenset(
    {
        "it",
        "this",
        "that",
        "there",
        "here",
        "what",
        "which",
        "who",
        "everything",
        "something",
        "nothing",
        "one",
        "i",
        "we",
        "you",
        "he",
        "she",
        "they",
        "as",
        "if",
        "so",
        "but",
        "and",
        "when",
        "how",
        "why",
        "all",
        "let",
    }
)
_VALUE_LIKE = re.compile(r"[\d_/@.\-]|^[A-Z]{2,}$|^[A-Z][a-z]+[A-Z]")
# what a sentence holds when it names a value: a character `_VALUE_LIKE` looks for, or two capitals
# (it spares the two patterns above a sentence of plain words, the common case)
_VALUE_END = ".,;:!?)]\"'"
"""Trailing characters that are not part of a value."""
_VALUE_HINT = re.compile(r"[\d_/@.\-]|[A-Z][^A-Z]*[A-Z]")
# who a forged notice claims to speak for
_AUTHORITY = CueSet(
    phrases={
        "from": [
            r"\b(?:notice|message|instruction|note|update) from (?:the )?(?:user|system|operator|admin|developer|owner|"
            r"team|maintainers?)\b"
        ],
        "user operator admin administrator system owner developer": [
            r"\b(?:the )?(?:user|operator|admin|administrator|system|owner|developer) (?:says|said|wants|grants|allows|"
            r"permits|has (?:approved|authori[sz]ed|granted|asked|decided|changed)|now (?:allows|wants|says))"
        ],
        "ignore": [r"\bignore (?:all |any )?(?:previous|prior|earlier|above|the) (?:instructions|rules)"],
        "you": [r"\byou (?:may|can|are (?:now )?allowed to|are permitted to|must|should|have permission)\b"],
        "permission": [r"\bpermission to\b"],
        "is are": [
            r"\b(?:is|are) (?:now )?(?:cancel(?:l)?ed|withdrawn|revoked|lifted|void|suspended|overridden|"
            r"no longer in effect)\b"
        ],
        "new": [r"\bnew (?:rule|policy|instruction)s?\b"],
        "prompt": [r"\bsystem prompt\b"],
    },
    texts={
        "[": (
            r"\[\s*(?:notice|note|message|update|instruction|important|urgent|system|admin|operator|user|assistant|"
            r"developer|security|policy)[^\]]{0,40}\]"
        )
    },
)
# orders for the rest of the session, or about rules themselves: program output does not say these
_STANDING = CueSet(
    words="henceforth permission authorized authorised",
    phrases={
        "now": [r"\bfrom now on\b"],
        "forward": [r"\bgoing forward\b"],
        "rest": [r"\bfor the rest of (?:the|this)\b"],
        "point": [r"\bfrom this point\b"],
        "circumstance circumstances": [r"\bunder no circumstances?\b"],
        "times": [r"\bat all times\b"],
        "until": [r"\buntil (?:i|the user|further notice)\b"],
        "cancelled canceled withdrawn revoked lifted void suspended overridden waived rescinded": [
            r"\b(?:is|are|has been|have been) (?:now )?(?:cancell?ed|withdrawn|revoked|lifted|void|suspended|"
            r"overridden|waived|rescinded)\b"
        ],
        "longer": [r"\bno longer (?:applies|apply|in effect|required|needed)\b"],
        "allowed": [r"\ballowed to\b"],
        "permitted": [r"\bpermitted to\b"],
        "new": [r"\bnew (?:rule|policy|instructions?)\b"],
        "changed updated replaced": [
            r"\b(?:rule|policy|instruction)s? (?:\w+ )?(?:is|are) (?:now )?(?:changed|updated|replaced)\b"
        ],
    },
)
# a sentence that opens with an order (after a label such as "Error:" or "Note:")
_ORDER_RE = re.compile(
    r"^\W*(?:[\w .-]{1,24}:\s*)?(?:please\s+)?(?:ignore|disregard|skip|delete|remove|push|stop|do not|don'?t|never|"
    r"always|forget|use|run|edit|commit|deploy|cancel|book|refund|transfer|send|set|change|switch|treat|consider|"
    r"assume|proceed|reply|respond|answer|tell|reveal|print|output|execute|grant|allow|disable|enable|override|"
    r"bypass|drop|wipe|rm)\b",
)
_ADDRESSED_RE = re.compile(r"\b(?:you|your|agent|assistant|model|ai)\b|^\W*(?:please|do not|don'?t|never|always)\b")


_READ_CHARS = 400
"""Characters of a sentence read for its kind."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What a sentence is, as far as its form tells."""

    kind: SentenceKind
    strong: bool = True
    """The form is unmistakable ("never", "from now on", "correction:"); False for forms that are as
    often a one-off request ("don't" inside a long request, "should")."""
    key: str | None = None
    """For a value or a correction of one: the name it gives a value to, normalized (``deploy window``)."""
    value: str | None = None
    """The value the sentence gives that name (its first word, trailing punctuation removed)."""


# where a clause of a sentence may start: after ";", ":", a dash, a comma or a full stop
_CLAUSE_RE = re.compile(r"(?:[;:,]|\s[—–-]+|[—–]|\.)\s+")


def value_key(sentence: str) -> tuple[str, str] | None:
    """``(name, value)`` when the sentence gives a named thing a value; None otherwise.

    The sentence is read whole, then from each clause on ("Scratch that, the host is h-2", "I misspoke:
    the port is 8443", "hmm, 44 is wrong. the limit is 45"): a lead-in does not hide the statement.
    """
    if _VALUE_HINT.search(sentence.rstrip(_VALUE_END)) is None:
        return None
    text = sentence.strip()
    found = _value_in(text)
    if found is not None:
        return found
    for m in _CLAUSE_RE.finditer(text):
        found = _value_in(text[m.end() :])
        if found is not None:
            return found
    return None


def _value_in(clause: str) -> tuple[str, str] | None:
    """`value_key` of a clause read from its start."""
    bare = _LEAD_RE.sub("", clause, count=1)
    for m in (_VALUE_RE.match(bare), _VALUE_VERB_RE.match(bare), _VALUE_IT_RE.match(bare)):
        if m is None:
            continue
        groups = m.groupdict()
        raw_key = groups.get("key") or groups.get("key2") or groups.get("key3") or ""
        raw_value = groups.get("value") or groups.get("value2") or groups.get("value3") or ""
        key = " ".join(raw_key.lower().split()).strip(" -/")
        words = key.split()
        if not words or len(words) > 4 or words[0] in _NOT_VALUE_KEYS or not raw_value.split():
            continue
        value = _exact_value(raw_value.split())
        if value is not None:
            return key, value
    return None


_VALUE_WORDS = 3
"""Words a value may span ("db index 24", "gate B 12"): plain words, then the one that names it exactly."""
_NOT_VALUE_WORDS = frozenset({"not", "no", "never", "also", "still", "the", "a", "an", "in", "at", "on", "to", "for"})


def _exact_value(parts: list[str]) -> str | None:
    """The value a statement gives: its first word when that names something exactly (an id, a code, a
    number, a path, a version), else up to `_VALUE_WORDS` plain words ending in one that does."""
    for n, part in enumerate(parts[:_VALUE_WORDS]):
        word = part.rstrip(_VALUE_END)
        if _VALUE_LIKE.search(word):
            return " ".join([*parts[:n], word])
        if word != part or word.lower() in _NOT_VALUE_WORDS or not word.isalpha():
            return None
    return None


_FAMILIES = (_CORRECTION, _RULE, _WEAK_CORRECTION, _WEAK_RULE, _DECISION)
"""The cue families `read_sentence` asks, in its order."""
_REQUEST = Reading("request")
_DECISION_READING = Reading("decision")
_WEAK_RULE_READING = Reading("rule", False)


def read_sentence(sentence: str) -> Reading:
    """The kind of one sentence (correction before rule before value before decision)."""
    # cues past this point belong to a long request's explanation, not to a rule (and cost time)
    low = sentence[:_READ_CHARS].lower()
    present = words(low)
    return _reading(sentence, *(cue.found(low, present) for cue in _FAMILIES))


def read_sentences(text: str, spans: Sequence[tuple[int, int]]) -> list[Reading]:
    """`read_sentence` of each ``text[a:b]`` of ``spans`` (one message's sentences, in order, apart).

    The message is read once: its words, then each cue family over the sentences where one of
    its anchors occurs (a user's message is read so as it arrives: this is on every turn's path).
    """
    low = text.lower()
    if len(low) != len(text):  # case folding changed the length: offsets no longer match
        return [read_sentence(text[a:b]) for a, b in spans]
    present = words(low)
    starts = [a for a, _ in spans]
    ends = [min(b, a + _READ_CHARS) for a, b in spans]
    found = [cue.scan(low, present, starts, ends) for cue in _FAMILIES]
    return [_reading(text[a:b], *flags) for (a, b), flags in zip(spans, zip(*found, strict=True), strict=True)]


def _reading(
    sentence: str, correction: bool, rule: bool, weak_correction: bool, weak_rule: bool, decision: bool
) -> Reading:
    """The kind of ``sentence`` from the cue families found in it (in `_FAMILIES` order)."""
    named = value_key(sentence)
    key, value = named or (None, None)
    # a long sentence is seldom a rule: its cues more likely belong to a request's explanation
    short = len(sentence) <= 200
    if correction:
        return Reading("correction", short or key is not None, key, value)
    if rule:
        return Reading("rule", short)
    if named is not None:
        return Reading("value", True, key, value)
    if weak_correction:
        return Reading("correction", False, key, value)
    if weak_rule:
        return _WEAK_RULE_READING
    if decision:
        return _DECISION_READING
    return _REQUEST


def reads_as_instruction(sentence: str) -> bool:
    """True when a sentence claims authority or gives the agent a rule, a correction or a new value.

    Used on text from tool outputs: a line that reads so must not leave its tool result.
    """
    low = sentence.lower()
    present = words(low)
    if _AUTHORITY.found(low, present) or _CORRECTION.found(low, present) or _WEAK_CORRECTION.found(low, present):
        return True
    if _STANDING.found(low, present) or _ORDER_RE.match(low):
        return True
    # a rule only when it is addressed to someone: plain program output also says "never" and "must"
    rule = _RULE.found(low, present) or _WEAK_RULE.found(low, present)
    return rule and _ADDRESSED_RE.search(low) is not None
