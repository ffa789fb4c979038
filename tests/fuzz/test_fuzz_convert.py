"""Format detection and conversion: provider messages in any format, read with the format detected
and written back in every format.

`to_messages` (format detected, as the CLI and the proxy do) returns messages or raises a
`ContextWardenError`; whatever it returns converts to each of the four formats without error.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st

from contextwarden.adapters import FORMATS, from_messages, to_messages

from ._harness import Failed, fuzz_settings, probe
from ._messages import anthropic_message, langchain_message, openai_message, responses_item
from ._strategies import hostile_any, mutated

items = st.one_of(
    st.lists(st.one_of(openai_message, responses_item, anthropic_message, langchain_message()), min_size=1, max_size=4),
    st.lists(mutated(st.one_of(openai_message, responses_item, anthropic_message)), min_size=1, max_size=3),
    hostile_any,
)


def test_detect_and_convert_to_every_format() -> None:
    entry = "to_messages (detected) and from_messages"

    @fuzz_settings(150)
    @given(batch=items)
    def run(batch: Any) -> None:
        read = probe.call(entry, to_messages, batch)
        if not read.ok:
            return
        for fmt in FORMATS:
            written = probe.check(entry, from_messages, read.value, format=fmt)
            if not written.ok:
                raise Failed(f"{entry}: messages read from the input cannot be written as {fmt}: {written.error!r}")

    run()
