"""Deterministic fidelity probes: a summary that drops an identifier, a constraint, a decision or an
open item is caught; properties over generated message lists."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from contextwarden import Message, ToolCall
from contextwarden.health import extract_probes, probe_fidelity
from contextwarden.summarize import ExtractiveSummarizer
from contextwarden.summarize.base import SummaryRequest

HISTORY = [
    Message.system("You are a support agent."),
    Message.user("Refund order ORD-48213 for customer CUS-9917. The refund must not exceed 250 EUR."),
    Message.assistant(
        "Looking up ORD-48213.",
        tool_calls=[ToolCall(call_id="c1", name="get_order", arguments='{"order_id": "ORD-48213"}')],
    ),
    Message.tool_result("c1", '{"order_id": "ORD-48213", "total": "312.40", "status": "delivered"}'),
    Message.assistant("I decided to refund 250 EUR to the original card instead of store credit for ORD-48213."),
    Message.assistant(
        "Issuing it.",
        tool_calls=[ToolCall(call_id="c2", name="refund", arguments='{"order_id": "ORD-48213", "amount": 250}')],
    ),
    Message.tool_result("c2", "Error: payment gateway timeout (code GW-504)"),
]


def _summary(text: str) -> list[Message]:
    return [Message.system("You are a support agent."), Message.user(text)]


def test_probes_cover_identifiers_constraints_decisions_and_open_items() -> None:
    kinds = {p.kind for p in extract_probes(HISTORY)}
    assert kinds == {"identifier", "constraint", "open-item"}  # decisions are probed against an output
    report = probe_fidelity(HISTORY, HISTORY)
    assert report.score == 1.0 and report.lost == ()
    assert set(report.by_kind()) == {"identifier", "constraint", "decision", "open-item"}
    texts = {p.text for p in report.probes}
    assert {"ORD-48213", "CUS-9917"} <= texts


def test_a_summary_that_drops_an_identifier_is_caught() -> None:
    faithful = probe_fidelity(HISTORY, HISTORY)
    kept_all = " ".join(p.text for p in faithful.probes)
    dropped = probe_fidelity(HISTORY, _summary(kept_all.replace("CUS-9917", "the customer")))
    assert [p.text for p in dropped.lost if p.kind == "identifier"] == ["CUS-9917"]
    assert dropped.score < 1.0
    assert dropped.to_dict()["lost"] == [{"kind": "identifier", "text": "CUS-9917"}]


def test_a_summary_that_drops_the_decision_and_the_constraint_is_caught() -> None:
    report = probe_fidelity(HISTORY, _summary("Refund ORD-48213 for CUS-9917; gateway error GW-504 pending."))
    lost_kinds = {p.kind for p in report.lost}
    assert {"decision", "constraint"} <= lost_kinds
    assert report.by_kind()["decision"] == (0, 1)


def test_the_extractive_summary_keeps_what_the_probes_ask_for() -> None:
    request = SummaryRequest(previous=None, messages=HISTORY[1:], max_tokens=400, span=("a", "b"))
    summary = ExtractiveSummarizer().summarize(request)
    report = probe_fidelity(HISTORY[1:], [Message.user(summary)])
    identifiers = [p for p in report.probes if p.kind == "identifier"]
    assert identifiers and not [p for p in report.lost if p.kind == "identifier"]


_words = st.sampled_from(["alpha", "ORD-1234", "src/app.py", "must stay under 5 MB", "TODO fix retry", "the", "ok"])
_text = st.lists(_words, min_size=1, max_size=8).map(" ".join)
_message = st.one_of(_text.map(Message.user), _text.map(Message.assistant))


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=12))
def test_a_view_equal_to_its_input_keeps_every_probe(messages: list[Message]) -> None:
    report = probe_fidelity(messages, messages)
    assert report.score == 1.0 and report.lost == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=12), st.data())
def test_dropping_messages_never_raises_the_score(messages: list[Message], data: st.DataObject) -> None:
    kept = [m for m in messages if data.draw(st.booleans())]
    full = probe_fidelity(messages, messages)
    part = probe_fidelity(messages, kept)
    assert 0.0 <= part.score <= full.score == 1.0
    assert {p.text for p in part.lost} <= {p.text for p in part.probes}
    assert probe_fidelity(messages, []).score == (0.0 if part.probes else 1.0)
