"""The user's words: standing rules, corrections, values and decisions, kept verbatim for the whole session.

`UserInstructions` reads the user's messages from the transcript and renders the first section
of the context block (`contextwarden.compaction.context_block`); `read_sentence` tells what kind
of sentence a user wrote; `reads_as_instruction` is the same reading used on tool output by the
provenance rule (`contextwarden.provenance`).
"""

from __future__ import annotations

from .kinds import Reading, SentenceKind, read_sentence, reads_as_instruction, value_key
from .record import HEADER, Instruction, InstructionKind, UserInstructions
from .sentences import Span, split_sentences, user_spans

__all__ = [
    "HEADER",
    "Instruction",
    "InstructionKind",
    "Reading",
    "SentenceKind",
    "Span",
    "UserInstructions",
    "read_sentence",
    "reads_as_instruction",
    "split_sentences",
    "user_spans",
    "value_key",
]
