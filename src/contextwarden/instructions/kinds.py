"""What kind of sentence the user wrote: a standing rule, a correction, a named value, a decision.

The kind is read from the form of the sentence, not from a list of known sentences: a rule
forbids, requires or sets a default for the rest of the session ("never …", "always …", "from
now on …", "before you …", "please don't … again", "stop using X", "no print statements …", a
"rule:" or "constraint:" label); a correction replaces something said before ("correction:",
"actually", "instead", "X, not Y", "forget …", "make that …", "no longer …"); a value names
something ("the deploy window is K-442y", "ticket: OPS-1"); a decision settles a choice ("let's
go with option A", "yes, proceed"). Cues in a few other languages (Spanish, French, German,
Portuguese, Italian, Chinese, Japanese) are recognized too.

The same reading serves the provenance rule (`contextwarden.provenance`): a sentence in a tool
output that reads as an instruction is what a forged notice looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Reading", "SentenceKind", "read_sentence", "reads_as_instruction", "value_key"]

SentenceKind = Literal["rule", "correction", "value", "decision", "request"]

_I = re.IGNORECASE
# The cue patterns below are matched against the lower-cased sentence, without IGNORECASE: with that
# flag the engine cannot scan for literals quickly and a long message costs milliseconds per pattern.
# Standing-rule forms: a prohibition, a requirement or a default for the rest of the session.
_RULE_RE = re.compile(
    r"\b(?:never|always|from now on|going forward|henceforth|for the rest of|for all future|every time|each time|"
    r"whenever|at all times|under no circumstances?|by default|must(?:n'?t| not)?|shall not|not allowed|forbidden|"
    r"prohibited|mandatory|(?:house |team |project |standing )?rule(?: \w+| #?\d+)?:|policy:|constraint:|"
    r"please (?:don'?t|do not|never|always|avoid|stop|keep|make sure|remember)|don'?t ever|do not ever|"
    r"before (?:you|any|each|every|running|committing|pushing|merging|making|editing|touching|changing|adding|"
    r"deploying|sending|booking|charging|cancell?ing)|stop \w+ing|no longer|only (?:ever )?(?:use|run|edit|"
    r"touch|change|book|offer|charge)|avoid|refrain|remember to|make sure (?:to|that|you)|i prefer|we prefer|"
    r"prefer \w+ (?:over|to)|keep (?:all|every|each|the|your|it|them|answers|replies|responses|messages|lines|"
    r"output|logs?|code|commits?)\b[^.]*\b(?:under|below|in|to|short|brief|concise|on|off|at))\b"
    r"|^\W*(?:no \w+|don'?t|do not|use|run|ask|write|put|leave|limit|prefix|sign|tag|include|exclude|respond|"
    r"reply|answer|speak|format|follow|wait for|confirm|double-check|name|cite|call|commit|push|stick|stay|prefer|"
    r"target|quote|address|refer)\b"
    # other languages: never / always / do not / must / from now on
    r"|\b(?:nunca|siempre|jamás|no (?:edites|toques|uses|hagas|borres|añadas|cambies)|a partir de ahora|"
    r"de ahora en adelante|jamais|toujours|ne (?:\w+ )?(?:jamais|pas)|désormais|dorénavant|"
    r"à partir de maintenant|niemals|immer|nie|auf keinen fall|ab jetzt|von nun an|bitte kein\w*|sempre|mai|"
    r"non (?:modificare|toccare|usare|aggiungere)|d'ora in poi|d'ora innanzi|a partir de agora|"
    r"não (?:edite|toque|use|adicione)|daqui em diante)\b"
    r"|不要|别|勿|禁止|务必|必须|始终|总是|一律|永远|以后都|从现在起|今后|"
    r"しないで|必ず|絶対|常に|今後|これから",
)
# Weaker forms: as often a one-off request as a standing rule.
_WEAK_RULE_RE = re.compile(
    r"\b(?:don'?t|do not|dont|should(?:n'?t| not)?|ensure|make sure|again|anymore|rule|policy|constraint|"
    r"requirement|guideline|convention|preference|keep)\b",
)
_CORRECTION_RE = re.compile(
    r"^\W*(?:correction|corrected|actually|scratch that|my (?:bad|mistake)|i meant|let me correct|to correct|"
    r"change of plans?|on second thought|to clarify|erratum|update:|en fait|corrección|corrige|korrektur|"
    r"eigentlich|correzione|in realtà|更正|纠正|其实|訂正|実は)\b"
    r"|\binstead\b|\brather than\b|,\s*not\s+\S|\bnot\s+\S+\s*,\s*but\b|\bforget (?:about )?|\bdisregard\b|"
    r"\bignore (?:what|my|the (?:earlier|previous|last|old))|\bno longer\b|\bmake (?:that|it) \S|"
    r"\bchange (?:it|that|this) to\b|\bi was wrong\b|\bstop using\b|\bnot anymore\b|\b(?:is|are) now\b|"
    r"\bcambia|\ben lugar de\b|\bau lieu de\b|\bstatt\b|\binvece di\b|\bem vez de\b|而不是|改为|改成|ではなく",
)
_WEAK_CORRECTION_RE = re.compile(
    r"^\W*(?:wait|sorry|oops|no[,.!:]|nope|update|rather)\b|\bswitch(?:ed)? (?:to|over)\b|"
    r"\breplace[sd]? (?:by|with)\b|\bnow use\b",
)
_DECISION_RE = re.compile(
    r"\b(?:let'?s (?:go with|use|do|pick|take|stick with)|go with|go ahead|proceed|decided|decision|"
    r"we(?:'ll| will) (?:use|go|do)|i(?:'ll| will) take|option [a-z0-9]\b|agreed|approved|sounds good|"
    r"that works|yes,? (?:please|do|go|let'?s))",
)
# "the deploy window is K-442y", "my user id is x", "ticket: OPS-1", "the region = eu-west-1"
_VALUE_RE = re.compile(
    r"^(?:(?:the|our|my|your|this|that)\s+)?(?P<key>[^\W\d][\w\-/ ]{1,48}?)\s*"
    r"(?:\b(?:is|are|was|will be|should be)\b|=|:|＝|：)\s*(?:now\s+)?(?P<value>\S.*)$",
    _I,
)
# what comes before the name in "Correction: the ticket is …", "For this task, the branch is …"
_LEAD_RE = re.compile(
    r"^(?:\W*(?:for (?:this|the) (?:task|project|session|job|run|trip|booking)|note(?: for [\w ]+)?|correction|"
    r"corrected|actually|also|one more thing|so|and|by the way|fyi|update|updated|sorry|oops|wait|ok(?:ay)?|"
    r"sure|yes|no|hi|hello|please note|just so you know|remember|reminder)\b[,.:!;]?\s*)+",
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
# who a forged notice claims to speak for
_AUTHORITY_RE = re.compile(
    r"\[\s*(?:notice|note|message|update|instruction|important|urgent|system|admin|operator|user|assistant|"
    r"developer|security|policy)[^\]]{0,40}\]|\b(?:notice|message|instruction|note|update) from (?:the )?"
    r"(?:user|system|operator|admin|developer|owner|team|maintainers?)\b|\b(?:the )?(?:user|operator|admin|"
    r"administrator|system|owner|developer) (?:says|said|wants|grants|allows|permits|has (?:approved|authori[sz]ed|"
    r"granted|asked|decided|changed)|now (?:allows|wants|says))|\bignore (?:all |any )?(?:previous|prior|earlier|"
    r"above|the) (?:instructions|rules)|\byou (?:may|can|are (?:now )?allowed to|are permitted to|must|should|"
    r"have permission)\b|\bpermission to\b|\b(?:is|are) (?:now )?(?:cancel(?:l)?ed|withdrawn|revoked|lifted|"
    r"void|suspended|overridden|no longer in effect)\b|\bnew (?:rule|policy|instruction)s?\b|\bsystem prompt\b",
)


# orders for the rest of the session, or about rules themselves: program output does not say these
_STANDING_RE = re.compile(
    r"\b(?:from now on|going forward|henceforth|for the rest of (?:the|this)|from this point|under no circumstances?|"
    r"at all times|until (?:i|the user|further notice)|(?:is|are|has been|have been) (?:now )?(?:cancell?ed|withdrawn|"
    r"revoked|lifted|void|suspended|overridden|waived|rescinded)|no longer (?:applies|apply|in effect|required|"
    r"needed)|permission|authori[sz]ed|allowed to|permitted to|new (?:rule|policy|instructions?)|"
    r"(?:rule|policy|instruction)s? (?:\w+ )?(?:is|are) (?:now )?(?:changed|updated|replaced))\b",
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


class _Cues:
    """A cue pattern behind a quick test: the pattern runs only when one of its words occurs.

    Python's regex engine tries every branch of a long alternation at every position (a long
    message costs milliseconds per pattern); ``str.__contains__`` scans for a word at C speed.
    ``needles`` must include a substring of every text the pattern can match.
    """

    __slots__ = ("needles", "pattern")

    def __init__(self, pattern: re.Pattern[str], needles: tuple[str, ...]) -> None:
        self.pattern = pattern
        self.needles = needles

    def search(self, low: str) -> bool:
        # match() tries the start only: the patterns' sentence-opening branches need no word test
        if self.pattern.match(low) is not None:
            return True
        return any(n in low for n in self.needles) and self.pattern.search(low) is not None


_FOREIGN = (
    "nunca", "siempre", "jamás", "no ", "a partir", "ahora", "jamais", "toujours", "ne ", "désormais", "dorénavant",
    "maintenant", "niemals", "immer", "nie", "auf keinen", "ab jetzt", "von nun", "bitte", "sempre", "mai", "non ",
    "d'ora", "agora", "não ", "daqui", "不要", "别", "勿", "禁止", "务必", "必须", "始终", "总是", "一律", "永远",
    "以后", "从现在起", "今后", "しないで", "必ず", "絶対", "常に", "今後", "これから",
)  # fmt: skip
_RULE_CUES = _Cues(
    _RULE_RE,
    (
        "never", "always", "from now on", "going forward", "henceforth", "rest of", "all future", "every time",
        "each time", "whenever", "all times", "circumstance", "by default", "must", "shall not", "not allowed",
        "forbidden", "prohibited", "mandatory", "rule", "policy:", "constraint:", "please", "ever", "before ",
        "stop ", "no longer", "only ", "avoid", "refrain", "remember to", "make sure", "prefer", "keep ", *_FOREIGN,
    ),
)  # fmt: skip
_CORRECTION_CUES = _Cues(
    _CORRECTION_RE,
    (
        "correct", "actually", "scratch", "my bad", "my mistake", "i meant", "change of plan", "second thought",
        "clarify", "erratum", "update:", "en fait", "corrig", "korrektur", "eigentlich", "correzione", "realtà",
        "更正", "纠正", "其实", "訂正", "実は", "instead", "rather", "not", "forget", "disregard", "ignore",
        "no longer", "make that", "make it", "change it", "change that", "change this", "wrong", "stop using",
        " now", "cambia", "en lugar", "au lieu", "statt", "invece", "em vez", "而不是", "改为", "改成", "ではなく",
    ),
)  # fmt: skip
_WEAK_CORRECTION_CUES = _Cues(
    _WEAK_CORRECTION_RE, ("wait", "sorry", "oops", "no", "update", "rather", "switch", "replace", "now use")
)
_STANDING_CUES = _Cues(
    _STANDING_RE,
    (
        "from now on", "going forward", "henceforth", "rest of", "from this point", "circumstance", "all times",
        "until ", "cancel", "withdrawn", "revoked", "lifted", "void", "suspended", "overridden", "waived",
        "rescinded", "no longer", "permission", "authori", "allowed to", "permitted to", "rule", "polic",
        "instruction",
    ),
)  # fmt: skip
_AUTHORITY_CUES = _Cues(
    _AUTHORITY_RE,
    (
        "[", "notice", "message", "instruction", "note", "update", "user", "operator", "admin", "system", "owner",
        "developer", "ignore", "you ", "permission", "cancel", "withdrawn", "revoked", "lifted", "void",
        "suspended", "overridden", "no longer", "new rule", "new polic",
    ),
)  # fmt: skip


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


def value_key(sentence: str) -> tuple[str, str] | None:
    """``(name, value)`` when the sentence gives a named thing a value; None otherwise."""
    m = _VALUE_RE.match(_LEAD_RE.sub("", sentence.strip(), count=1))
    if m is None:
        return None
    key = " ".join(m.group("key").lower().split()).strip(" -/")
    words = key.split()
    if not words or len(words) > 4 or words[0] in _NOT_VALUE_KEYS:
        return None
    value = m.group("value").split()[0].rstrip(".,;:!?)]\"'")
    # a value is something one can name exactly: an id, a code, a number, a path, a version
    if not _VALUE_LIKE.search(value):
        return None
    return key, value


def read_sentence(sentence: str) -> Reading:
    """The kind of one sentence (correction before rule before value before decision)."""
    named = value_key(sentence)
    # cues past this point belong to a long request's explanation, not to a rule (and cost time)
    low = sentence[:_READ_CHARS].lower()
    key, value = named or (None, None)
    # a long sentence is seldom a rule: its cues more likely belong to a request's explanation
    short = len(sentence) <= 200
    if _CORRECTION_CUES.search(low):
        return Reading("correction", short or key is not None, key, value)
    if _RULE_CUES.search(low):
        return Reading("rule", short)
    if named is not None:
        return Reading("value", True, key, value)
    if _WEAK_CORRECTION_CUES.search(low):
        return Reading("correction", False, key, value)
    if _WEAK_RULE_RE.search(low):
        return Reading("rule", False)
    if _DECISION_RE.search(low):
        return Reading("decision")
    return Reading("request")


def reads_as_instruction(sentence: str) -> bool:
    """True when a sentence claims authority or gives the agent a rule, a correction or a new value.

    Used on text from tool outputs: a line that reads so must not leave its tool result.
    """
    low = sentence.lower()
    if _AUTHORITY_CUES.search(low) or _CORRECTION_CUES.search(low) or _WEAK_CORRECTION_CUES.search(low):
        return True
    if _STANDING_CUES.search(low) or _ORDER_RE.match(low):
        return True
    # a rule only when it is addressed to someone: plain program output also says "never" and "must"
    return bool(_RULE_CUES.search(low) or _WEAK_RULE_RE.search(low)) and bool(_ADDRESSED_RE.search(low))
