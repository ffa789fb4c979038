from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden.messages import Message
from contextwarden.session import AsyncSession, Session
from contextwarden.summarize import (
    AsyncExtractiveSummarizer,
    ExtractiveSummarizer,
    condense,
    constraint_sentences,
    fit_summary,
    message_identifiers,
)
from contextwarden.summarize._sections import parse_summary
from contextwarden.summarize.base import check_summary
from contextwarden.tokens import get_counter

from ._histories import call, coding_session, request, support_history

HEURISTIC = get_counter("heuristic")
CL100K = get_counter("tiktoken:cl100k_base")


def test_sections_and_verbatim_facts() -> None:
    text = ExtractiveSummarizer().summarize(request(support_history(), 600))
    for heading in ("Task:", "Completed steps:", "Current state:", "Errors and fixes:", "Open items:", "Next step:"):
        assert heading in text
    for fact in ("ORD-48213", "WH_BERLIN_01", "TR-5521", "2024-06-11", "PL-7781", "WH_MUNICH_02", "2024-06-14"):
        assert fact in text
    # the user's constraints, verbatim
    assert "It must arrive before 2024-06-14." in text
    assert "Don't use express shipping, my budget is 40 EUR." in text
    # the failure is paired with the retry that fixed it, and the error string is kept whole
    errors = parse_summary(text).errors
    assert len(errors) == 1
    assert "TransferRefused: order ORD-48213 is locked by pick list PL-7781" in errors[0]
    assert "fixed by transfer_order" in errors[0]
    # the assistant's last question is open, its stated intention is the next step
    assert "awaiting user answer: Do you want a tracking link by email?" in text
    assert parse_summary(text).next == ["I will now book standard shipping."]
    assert check_summary(text) is None


def test_unfixed_error_is_an_open_item() -> None:
    msgs = support_history()[:5]  # ends with the failed transfer
    parsed = parse_summary(ExtractiveSummarizer().summarize(request(msgs, 600)))
    assert any(item.startswith("unresolved: transfer_order(") for item in parsed.open)
    assert "fixed by" not in " ".join(parsed.errors)


def test_deterministic() -> None:
    req = request(support_history(), 300)
    first = ExtractiveSummarizer().summarize(req)
    assert ExtractiveSummarizer().summarize(req) == first
    assert ExtractiveSummarizer().summarize(req) == ExtractiveSummarizer().summarize(req)


@pytest.mark.parametrize("counter", [HEURISTIC, CL100K], ids=["heuristic", "cl100k"])
@pytest.mark.parametrize("budget", [0, 1, 5, 20, 60, 150, 400, 2000])
def test_never_over_budget(counter: object, budget: int) -> None:
    msgs, _ = coding_session(60)
    summarizer = ExtractiveSummarizer(counter=counter)  # type: ignore[arg-type]
    text = summarizer.summarize(request(msgs, budget))
    assert summarizer.counter.count_text(text) <= budget
    if budget >= 20:
        assert text


def test_tight_budget_keeps_constraints_and_best_identifiers_first() -> None:
    summarizer = ExtractiveSummarizer(counter=CL100K)
    text = summarizer.summarize(request(support_history(), 70))
    assert "Don't use express shipping, my budget is 40 EUR." in text
    assert "ORD-48213" in text
    assert CL100K.count_text(text) <= 70


def test_running_summary_folds_previous() -> None:
    msgs = support_history()
    summarizer = ExtractiveSummarizer()
    first = summarizer.summarize(request(msgs[:4], 500))
    later = [
        Message.user("Yes please, send the tracking link to ops@example.org.", message_id="m9"),
        Message.assistant("", tool_calls=[call("c9", "send_tracking", email="ops@example.org")], message_id="m10"),
        Message.tool_result("c9", "sent: https://track.example.com/TR-5521", name="send_tracking", message_id="m11"),
    ]
    second = summarizer.summarize(request([*msgs[4:], *later], 500, previous=first))
    parsed = parse_summary(second)
    # the task from the first span stays first, the new request is added after it
    assert parsed.task[0].startswith("Please move my order ORD-48213")
    assert any("ops@example.org" in t for t in parsed.task[1:])
    for fact in ("ORD-48213", "WH_MUNICH_02", "https://track.example.com/TR-5521", "TR-5521"):
        assert fact in second
    assert "Don't use express shipping, my budget is 40 EUR." in second
    # the question answered by the user is no longer open
    assert not any(item.startswith("awaiting user") for item in parsed.open)


def test_previous_summary_in_prose_keeps_its_identifiers() -> None:
    previous = "We agreed to deploy build b-7731 to eu-west-1 on 2024-07-02; the config is at /etc/app/prod.yaml."
    text = ExtractiveSummarizer().summarize(request(support_history()[:3], 400, previous=previous))
    for fact in ("b-7731", "eu-west-1", "2024-07-02", "/etc/app/prod.yaml"):
        assert fact in text


def test_long_coding_session_keeps_early_facts_hundreds_of_steps_later() -> None:
    msgs, facts = coding_session(300)
    summarizer = ExtractiveSummarizer(counter=CL100K)
    summary: str | None = None
    for k in range(0, len(msgs), 20):  # evicted 20 messages at a time, as a session does
        summary = summarizer.summarize(request(msgs[k : k + 20], 800, previous=summary))
        assert CL100K.count_text(summary) <= 800
    assert summary is not None
    for name, fact in facts.items():
        assert fact in summary, name
    parsed = parse_summary(summary)
    assert any("ImportError: cannot import name 'parse_config'" in e for e in parsed.errors)
    assert parsed.earlier_steps > 250  # the steps that no longer fit are counted, not forgotten


def test_identifier_extraction_per_role() -> None:
    user = Message.user("My name is Ada Lovelace, booking ABC123, flying 2024-05-20.")
    assert {"ABC123", "2024-05-20", "Lovelace"} <= set(message_identifiers(user))
    tool = Message.tool_result("c1", json.dumps({"id": "res_991", "price": 1234, "cabin": "economy"}))
    assert {"res_991", "1234", "economy"} <= set(message_identifiers(tool))
    md = Message.assistant("Your reservation **JG7FMM** is confirmed.")
    assert "JG7FMM" in message_identifiers(md)
    args = Message.assistant("", tool_calls=[call("c1", "read_file", path="src/app/main.py")])
    assert "src/app/main.py" in message_identifiers(args)


def test_constraint_sentences() -> None:
    text = "Hi there. I need the report by Friday. It must not exceed 2 pages! Thanks a lot."
    assert constraint_sentences(text) == ["I need the report by Friday.", "It must not exceed 2 pages!"]
    assert constraint_sentences("Hello. How are you?") == []


def test_condense() -> None:
    paras = [f"Paragraph {i} talks about item_{i} at length. " * 3 for i in range(30)]
    paras[12] = "Error: KeyError 'region' in deploy.py line 88"
    text = "\n\n".join(paras)
    out = condense(text, 200, counter=CL100K)
    assert CL100K.count_text(out) <= 200
    assert out.startswith("Paragraph 0")
    assert "Paragraph 29" in out  # the conclusion
    assert "KeyError 'region' in deploy.py line 88" in out
    assert "[…]" in out
    assert condense("short", 50) == "short"
    assert condense(text, 0) == ""


def test_sessions_use_it_as_the_summary_layer() -> None:
    msgs, facts = coding_session(40)
    session = Session(window=3000, counter=CL100K, reserved_output=0, summarizer=ExtractiveSummarizer(counter=CL100K))
    session.add(msgs)
    view = session.prepare(format="internal")
    assert view.status.compactions.get("summarize") == 1
    context = next(m for m in view.view if m.extra.get("contextwarden") == "context")
    assert "Summary of messages" in context.text
    summary = session.engine.summary
    assert summary is not None and facts["error"] in summary
    assert CL100K.count_text(summary) <= session.config.summary_max_tokens


@pytest.mark.anyio
async def test_async_twin_gives_the_same_summary_and_drives_async_sessions() -> None:
    req = request(support_history(), 300)
    assert await AsyncExtractiveSummarizer().summarize(req) == ExtractiveSummarizer().summarize(req)
    msgs, facts = coding_session(40)
    session = AsyncSession(
        window=3000, counter=CL100K, reserved_output=0, summarizer=AsyncExtractiveSummarizer(counter=CL100K)
    )
    session.add(msgs)
    view = await session.prepare(format="internal")
    assert view.status.compactions.get("summarize") == 1
    assert session.engine.summary is not None and facts["error"] in session.engine.summary


# --- properties ---------------------------------------------------------------------------
_IDS = st.one_of(
    st.integers(1000, 99999).map(lambda n: f"ORD-{n}"),
    st.integers(1, 999).map(lambda n: f"src/pkg/mod_{n}.py"),
    st.integers(1, 999).map(lambda n: f"handle_event_{n}"),
    st.dates().map(lambda d: d.isoformat()),
    st.text("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=6, max_size=6).filter(lambda s: any(c.isdigit() for c in s)),
)
_CONSTRAINTS = st.sampled_from(
    ["", "It must ship before 2024-09-01.", "Never touch the payments table.", "Only use the staging database."]
)


@st.composite
def _histories(draw: st.DrawFn) -> list[Message]:
    msgs = [Message.user("Please handle the ticket. " + draw(_CONSTRAINTS))]
    for k in range(draw(st.integers(0, 6))):
        ids = draw(st.lists(_IDS, max_size=8, unique=True))
        noise = draw(st.text(max_size=60))
        msgs.append(Message.assistant("", tool_calls=[call(f"c{k}", "lookup", query=f"q{k}")]))
        msgs.append(Message.tool_result(f"c{k}", " ".join(ids) + " " + noise, is_error=draw(st.booleans())))
        if draw(st.booleans()):
            msgs.append(Message.assistant(draw(st.text(max_size=80))))
    return msgs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=_histories(), budget=st.integers(0, 700), previous=st.none() | st.text(max_size=300))
def test_property_never_over_budget(msgs: list[Message], budget: int, previous: str | None) -> None:
    summarizer = ExtractiveSummarizer()
    text = summarizer.summarize(request(msgs, budget, previous=previous))
    assert HEURISTIC.count_text(text) <= budget


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=_histories(), budget=st.integers(20, 700))
def test_property_keeps_every_identifier_that_fits(msgs: list[Message], budget: int) -> None:
    summarizer = ExtractiveSummarizer()
    req = request(msgs, budget)
    ids = summarizer.identifiers(req)
    text = summarizer.summarize(req)
    task = " ".join(msgs[0].text.split())
    constraints = constraint_sentences(msgs[0].text)
    need = (
        HEURISTIC.count_text("Key data: " + " · ".join(ids))
        + sum(HEURISTIC.count_text(f'- "{c}"') + 1 for c in constraints)
        + HEURISTIC.count_text("User constraints:\nCompleted steps:\n- (99 earlier steps not listed)")
        + HEURISTIC.count_text("Task: " + task)
        + 12
    )
    if need <= budget * 0.97:
        missing = [i for i in ids if i not in text]
        assert not missing, (missing, text)
    elif ids and budget >= 200:
        assert ids[0] in text  # what does not all fit is kept best first


def test_fit_summary_shrinks_by_sections() -> None:
    text = ExtractiveSummarizer(counter=CL100K).summarize(request(support_history(), 2000))
    assert fit_summary(text, 5000, counter=CL100K) == text
    small = fit_summary(text, 80, counter=CL100K)
    assert CL100K.count_text(small) <= 80
    assert "ORD-48213" in small and "Don't use express shipping, my budget is 40 EUR." in small


def test_record_names_and_ids_rank_above_other_output_values() -> None:
    record = {
        "reservation_id": "QX81ZP",
        "origin": "SEA",
        "destination": "JFK",
        "price": 1234,
        "passengers": [{"first_name": "Ines", "last_name": "Okafor"}],
        "cabin": "economy",
    }
    msgs = [
        Message.user("Check my booking please."),
        Message.assistant("", tool_calls=[call("c1", "get_reservation", code="QX81ZP")]),
        Message.tool_result("c1", json.dumps(record)),
    ]
    ids = ExtractiveSummarizer().identifiers(request(msgs))
    assert ids.index("Okafor") < ids.index("SEA") < ids.index("1234")
    assert ids.index("Ines") < ids.index("JFK")
