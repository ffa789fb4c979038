"""The reactive layer: the emergency compaction's plan, and the cascade it runs."""

from __future__ import annotations

from contextwarden.compaction import reactive
from contextwarden.compaction.config import CompactionConfig
from contextwarden.messages import Message

from ._helpers import check_view, make_text, session, tool_round


def test_the_plan_cuts_deeper_and_keeps_fewer_rounds() -> None:
    config = CompactionConfig(reactive_low_water=0.3, reactive_keep_rounds=1)
    plan = reactive.plan(config)
    assert (plan.trigger, plan.low_water, plan.keep_rounds) == ("reactive", 0.3, 1)
    assert reactive.opens_every_gate("reactive") and not reactive.opens_every_gate("high-water")


def test_a_reactive_compaction_ignores_the_cascade_table_and_lands_under_its_target() -> None:
    closed = {"clear": 2.0, "evict": 2.0, "summarize": 2.0}  # no gate ever opens on its own
    config = CompactionConfig(cascade=closed, reactive_low_water=0.3, reactive_keep_rounds=1)
    s, rec = session(6000, config=config)
    added = [Message.system("You audit."), Message.user("Audit the shards.")]
    s.add(added)
    for i in range(6):
        r = tool_round(f"c{i}", make_text(2000, seed=i))
        s.add(r)
        added += r
    turn = s.status().turn
    mark = rec.mark()
    pv = s.on_context_overflow(format="internal")
    check_view(s, pv, added)
    assert pv.status.used <= 0.3 * pv.status.budget
    assert {e.trigger for e in rec.since(mark, "compaction.started")} == {"reactive"}
    assert pv.status.turn == turn  # the failed call is not a turn
