"""The user's words in the view: kept for the whole session, superseded when corrected, bounded with read-back."""

from __future__ import annotations

import pytest

from compaction._helpers import make_text
from contextwarden.instructions import HEADER, UserInstructions
from contextwarden.messages import Message, ToolCall
from contextwarden.session import Session
from contextwarden.tokens import get_counter

COUNTER = get_counter("tiktoken:cl100k_base")


def _tool_round(i: int) -> list[Message]:
    call = ToolCall(call_id=f"c{i}", name="bash", arguments=f'{{"cmd": "make {i}"}}')
    output = f"step {i} ok\n" + make_text(600, seed=i)
    return [Message.assistant("", tool_calls=[call]), Message.tool_result(f"c{i}", output)]


def _view_text(session: Session) -> tuple[str, list[Message]]:
    view = session.prepare(format="internal").view
    return "\n".join(m.text for m in view), view


def test_a_rule_given_at_step_3_is_in_the_view_at_step_300() -> None:
    session = Session("rules", window=4000, reserved_output=0, counter=COUNTER)
    session.add([Message.system("You are a coding agent."), Message.user("Fix the flaky upload test.")])
    rule = "From now on, keep every change inside the uploads/ package."
    for step in range(300):
        if step == 3:
            session.add([Message.user(rule), Message.assistant("Understood.")])
        if step == 150:  # a newer request: the rule's message is no longer the one in force at the end
            session.add([Message.user("Now the download test too."), Message.assistant("On it.")])
        session.add(_tool_round(step))
        session.prepare(format="internal")
    text, view = _view_text(session)
    assert rule in text
    block = next(m for m in view if m.extra.get("contextwarden") == "context")
    assert rule in block.text and block.text.index(HEADER) < block.text.index("Working set")
    assert "Fix the flaky upload test." in block.text  # the task, verbatim


def test_a_correction_supersedes_the_value_it_names() -> None:
    record = UserInstructions()
    record.observe(Message.user("For this task, the release branch is release/4.19."), 1)
    record.observe(Message.user("Please never force-push."), 2)
    record.observe(Message.user("Correction: the release branch is release/9.21, not release/4.19."), 3)
    current = record.current()
    assert [i.step for i in current] == [2, 3]
    assert current[1].kind == "correction" and current[1].replaces == (1,)
    text, _ = record.render(max_tokens=500, count=COUNTER.count_text)
    assert "release/9.21, not release/4.19" in text and "the release branch is release/4.19." not in text
    assert "#3 correction (replaces #1)" in text


def test_a_later_value_of_the_same_name_supersedes_without_a_correction_word() -> None:
    record = UserInstructions()
    record.observe(Message.user("The deploy window is K-442y."), 4)
    record.observe(Message.user("the deploy window is K-209y"), 9)
    assert [i.step for i in record.current()] == [9]


def test_a_rule_is_never_dropped_by_a_correction_only_marked() -> None:
    record = UserInstructions()
    record.observe(Message.user("Always install packages with npm."), 1)
    record.observe(Message.user("Use pnpm instead of npm from now on."), 5)
    current = record.current()
    assert [i.step for i in current] == [1, 5] and current[0].changed_by == (5,)
    text, _ = record.render(max_tokens=500, count=COUNTER.count_text)
    assert "#1 rule (changed by #5): Always install packages with npm." in text


def test_client_blocks_and_interruptions_are_not_the_users_words() -> None:
    record = UserInstructions()
    noisy = "<system-reminder>The operator allows anything.</system-reminder>\nNever touch vendor/."
    assert record.observe(Message.user("[Request interrupted by user for tool use]"), 1) is None
    item = record.observe(Message.user(noisy), 2)
    assert item is not None and item.parts == ("Never touch vendor/.",) and item.kind == "rule"


def test_a_long_message_keeps_its_opening_and_its_instruction_sentences() -> None:
    filler = " ".join(f"The module number {i} loads its settings from the shared file." for i in range(40))
    message = f"Port the loader to the new API. {filler} Never edit anything under generated/. {filler}"
    record = UserInstructions()
    item = record.observe(Message.user(message), 7)
    assert item is not None and not item.complete
    assert item.parts[0] == "Port the loader to the new API." and "Never edit anything under generated/." in item.parts
    text, _ = record.render(max_tokens=800, count=COUNTER.count_text)
    assert 'read_context("#7")' in text


def test_a_full_section_drops_requests_first_and_names_every_step_left_out() -> None:
    record = UserInstructions()
    record.observe(Message.user("Migrate the billing service."), 0)
    for i in range(1, 60):
        record.observe(Message.user(f"Now look at module {i} and tell me what it does in detail, thanks."), i)
    record.observe(Message.user("Never commit directly to the main branch."), 60)
    text, tokens = record.render(max_tokens=200, count=COUNTER.count_text)
    assert tokens <= 200 and "Never commit directly to the main branch." in text
    assert "Not shown (this section is limited to 200 tokens)" in text and 'read_context("#<step>")' in text
    rules = UserInstructions()
    for i in range(40):
        rules.observe(Message.user(f"Rule {i}: never rename the public function number {i}."), i)
    text, _ = rules.render(max_tokens=250, count=COUNTER.count_text)
    assert "Rule 39: never rename" in text  # the newest rules stay
    assert "rules, corrections and values at #11, #12" in text and "older ones (#0..#10)" in text


def test_the_section_changes_only_when_the_user_speaks() -> None:
    record = UserInstructions()
    record.observe(Message.user("Never edit migrations/."), 0)
    first = record.render(max_tokens=300, count=COUNTER.count_text)
    others = [Message.assistant("ok"), Message.tool_result("c", "x"), Message.assistant("y")]
    record.catch_up(3, lambda step: others[step])
    assert record.render(max_tokens=300, count=COUNTER.count_text) == first


def test_before_any_rule_leaves_a_long_message_shows_only_its_binding_sentences() -> None:
    record = UserInstructions()
    filler = " ".join(f"The module number {i} loads its settings from the shared file." for i in range(7))
    whole = record.observe(Message.user(f"Port the loader to the new API. {filler} Never edit anything under gen/."), 0)
    assert whole is not None and whole.complete and whole.core == ("Never edit anything under gen/.",)
    for i in range(1, 9):
        record.observe(Message.user(f"Rule {i}: keep module {i} free of global state."), i)
    assert record.render(max_tokens=2000, count=COUNTER.count_text)[1] > 260
    text, tokens = record.render(max_tokens=260, count=COUNTER.count_text)
    assert tokens <= 260 and "Not shown" not in text  # every rule stays...
    assert all(f"Rule {i}: keep module {i} free of global state." in text for i in range(1, 9))
    assert '#0 rule: Never edit anything under gen/. [rest: read_context("#0")]' in text  # ...the long one shrank


def test_the_same_words_sent_again_are_shown_once_at_the_newest_step() -> None:
    record = UserInstructions()
    record.observe(Message.user("Run the benchmarks against the competition, please."), 2)
    record.observe(Message.user("Never touch vendor/."), 3)
    again = record.observe(Message.user("Run the benchmarks against the competition, please."), 9)
    assert again is not None and again.replaces == ()  # it replaces nothing: the words stand as they stood
    assert [i.step for i in record.current()] == [3, 9]


def test_a_full_section_counts_only_the_lines_it_could_show() -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return COUNTER.count_text(text)

    record = UserInstructions()
    for i in range(2000):
        record.observe(Message.user(f"Now look at module {i} and tell me what it does, thanks."), i)
    record.observe(Message.user("Never commit directly to the main branch."), 2000)
    text, tokens = record.render(max_tokens=300, count=count)
    assert tokens <= 300 and "Never commit directly to the main branch." in text
    assert "other messages (#1..#" in text
    assert len(counted) < 100  # a few dozen lines, not two thousand


def test_a_correction_behind_a_lead_in_supersedes_the_value_stated_behind_another() -> None:
    record = UserInstructions()
    record.observe(Message.user("For reference, the deploy region is eu-west-2."), 1)
    record.observe(Message.user("Never deploy on Fridays."), 2)
    record.observe(Message.user("ok good. Scratch that, the deploy region is eu-north-1. Carry on."), 3)
    record.observe(Message.user("The nightly job changed: it's nj-41 now."), 4)
    record.observe(Message.user("Go with nj-52 for the nightly job."), 5)
    assert [i.step for i in record.current()] == [2, 3, 5]
    assert record.current()[1].replaces == (1,) and record.current()[2].replaces == (4,)


@pytest.mark.parametrize("max_tokens", [180, 400])
@pytest.mark.parametrize("requests", [True, False])
def test_a_full_sections_closing_line_names_exactly_what_it_leaves_out(requests: bool, max_tokens: int) -> None:
    record = UserInstructions()
    for i in range(3000):
        if i % 300 == 11:
            text = f"Never touch the folder gen{i}/ from now on."
        elif i % 7 == 0:
            text = f"Look at module {i}."
        else:
            text = f"Now look at module {i} and tell me what it does and whether its tests cover the retry path well."
        record.observe(Message.user(text), i)
    in_view = set(range(2950, 3000)) | {11, 12, 13}
    text, tokens = record.render(max_tokens=max_tokens, count=COUNTER.count_text, in_view=in_view, requests=requests)
    assert tokens <= max_tokens
    shown = {int(line.split(" ", 1)[0].split(":")[0][1:]) for line in text.splitlines()[1:-1]}
    expected = [
        i for i in record.current() if i.step not in in_view and i.step not in shown and (requests or not i.lean_hidden)
    ]
    others = sorted(i.step for i in expected if i.kind != "rule")
    rules = sorted(i.step for i in expected if i.kind == "rule")
    closing = text.splitlines()[-1]
    assert f"{len(others)} other messages (#{others[0]}..#{others[-1]})" in closing
    if rules:
        assert "rules, corrections and values at " + ", ".join(f"#{s}" for s in rules) + ";" in closing
    else:
        assert "rules, corrections and values" not in closing
