from __future__ import annotations

from contextwarden.messages import Message
from contextwarden.summarize import ExtractiveSummarizer, fidelity_report, open_items
from contextwarden.tokens import get_counter

from ._histories import call, request, support_history


def test_reports_what_was_lost_by_kind() -> None:
    before = support_history()
    after = [Message.user("Summary: order ORD-48213 moved with TR-5521. It must arrive before 2024-06-14.")]
    report = fidelity_report(before, after)
    assert "ORD-48213" in report.identifiers and "ORD-48213" not in report.lost_identifiers
    assert {"WH_BERLIN_01", "PL-7781", "2024-06-11"} <= set(report.lost_identifiers)
    assert report.constraints == (
        "It must arrive before 2024-06-14.",
        "Don't use express shipping, my budget is 40 EUR.",
    )
    # case and line breaks do not matter for sentences
    assert "It must arrive before 2024-06-14." not in report.lost_constraints
    assert "Don't use express shipping, my budget is 40 EUR." in report.lost_constraints
    assert report.open_items == ("I will now book standard shipping.", "Do you want a tracking link by email?")
    assert report.lost_open_items == report.open_items
    assert 0 < report.share_kept < 1 and not report.ok
    assert report.to_dict()["lost_identifiers"] == list(report.lost_identifiers)


def test_nothing_lost_when_the_text_survives() -> None:
    before = support_history()
    report = fidelity_report(before, before)
    assert report.ok and report.share_kept == 1.0 and report.identifiers_kept == 1.0
    assert fidelity_report([], []).share_kept == 1.0


def test_an_extractive_summary_with_room_keeps_everything() -> None:
    before = support_history()
    counter = get_counter("tiktoken:cl100k_base")
    summary = ExtractiveSummarizer(counter=counter).summarize(request(before, 1200))
    report = fidelity_report(before, [Message.user(summary)])
    assert report.ok, report.to_dict()


def test_open_items_unresolved_errors_and_todos() -> None:
    msgs = [
        Message.user("Deploy it."),
        Message.assistant("", tool_calls=[call("c1", "deploy", env="prod")]),
        Message.tool_result("c1", "Error: QuotaExceeded in eu-west-1", name="deploy", is_error=True),
        Message.assistant("TODO: ask for a quota raise. Deployment is blocked."),
        Message.user("ok"),
    ]
    items = open_items(msgs)
    assert "TODO: ask for a quota raise." in items
    assert "Error: QuotaExceeded in eu-west-1" in items
    # a retry that worked settles the error
    msgs += [
        Message.assistant("", tool_calls=[call("c2", "deploy", env="prod")]),
        Message.tool_result("c2", "deployed", name="deploy"),
    ]
    assert "Error: QuotaExceeded in eu-west-1" not in open_items(msgs)
    # an item restated with all its identifiers counts as kept
    report = fidelity_report(msgs[:3], [Message.user("deploy failed: QuotaExceeded, region eu-west-1")])
    assert report.lost_open_items == ()
