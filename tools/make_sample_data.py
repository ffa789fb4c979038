"""Write the small synthetic sample data shipped in ``contextwarden/benchmarks/data/``.

    python tools/make_sample_data.py

Deterministic (a fixed seed): running it again writes the same files. The samples show that the
benchmark and transcript commands work from a plain install; they are too small to rank anything.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from contextwarden.adapters import from_messages  # noqa: E402
from contextwarden.messages import Message, ToolCall  # noqa: E402

OUT = ROOT / "src" / "contextwarden" / "benchmarks" / "data"
CITIES = ["Lisbon", "Osaka", "Denver", "Nairobi", "Oslo", "Lima", "Perth", "Quito"]
NAMES = ["Ada Moreau", "Bilal Kaya", "Chen Wei", "Dora Silva", "Emeka Obi", "Freya Lund"]


def _filler(rng: random.Random, lines: int) -> str:
    rows = []
    for _ in range(lines):
        code = rng.randrange(100, 999)
        rows.append(f"{rng.choice(CITIES)} -> {rng.choice(CITIES)}  fare class {rng.choice('YBMHQ')}  seat map v{code}")
    return "\n".join(rows)


def airline_trace(n: int, rng: random.Random) -> dict[str, Any]:
    """A tool-using support conversation; the probes are the identifiers its last turn needs."""
    name = NAMES[n % len(NAMES)]
    reservation = f"RES-{rng.randrange(10000, 99999)}"
    ticket = f"TKT-{rng.randrange(100000, 999999)}"
    amount = f"${rng.randrange(120, 980)}.{rng.randrange(10, 99)}"
    date = f"2026-0{rng.randrange(1, 9)}-{rng.randrange(10, 28)}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an airline support agent. Use the tools; never guess ids."},
        {"role": "user", "content": f"Hi, I am {name}. I need to change my flight on {date}."},
    ]
    calls = [
        ("get_user", {"name": name}, f"user {name}: reservations [{reservation}], member since 2019"),
        ("get_reservation", {"id": reservation}, f"{reservation}: {date} Lisbon -> Osaka, {ticket}, paid {amount}"),
    ]
    for k in range(8):
        city = rng.choice(CITIES)
        calls.append(("search_flights", {"to": city, "date": date}, _filler(rng, 40)))
        if k == 3:
            calls.append(("get_fare_rules", {"ticket": ticket}, "changes allowed with a fee; " + _filler(rng, 20)))
    for i, (tool, args, output) in enumerate(calls):
        call_id = f"call_{n}_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        if i % 3 == 2:
            messages.append({"role": "assistant", "content": "Still looking; one moment."})
            messages.append({"role": "user", "content": "Thanks, please keep the same cabin."})
    messages.append({"role": "user", "content": "Go ahead with the change and refund the difference."})
    return {"id": f"sample-airline-{n}", "messages": messages, "probes": [reservation, ticket, amount, date]}


def locomo_sample(rng: random.Random) -> list[dict[str, Any]]:
    """Two short conversations in LoCoMo's layout, with questions whose evidence is one turn."""
    samples = []
    topics = [
        ("adopted a cat named {x}", "What is the name of {a}'s cat?", ["Miso", "Pixel", "Juniper"]),
        ("started learning the {x}", "Which instrument is {a} learning?", ["cello", "oboe", "banjo"]),
        ("moved to {x} for work", "Where did {a} move for work?", ["Tallinn", "Recife", "Hobart"]),
        ("ran a {x} marathon", "Which marathon did {a} run?", ["Berlin", "Chicago", "Tokyo"]),
    ]
    for c in range(2):
        a, b = NAMES[2 * c], NAMES[2 * c + 1]
        conv: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
        qa = []
        for s in range(1, 4):
            conv[f"session_{s}_date_time"] = f"1:{10 + s}0 pm on {s + 5} May, 2023"
            turns = []
            for t in range(1, 9):
                speaker = a if t % 2 else b
                if t == 3:
                    template, question, values = topics[(c + s) % len(topics)]
                    value = rng.choice(values)
                    text = f"Guess what, I {template.format(x=value)} last week!"
                    qa.append(
                        {
                            "question": question.format(a=speaker),
                            "answer": value,
                            "evidence": [f"D{s}:{t}"],
                            "category": 4,
                        }
                    )
                else:
                    text = rng.choice(
                        [
                            "That sounds great, tell me more.",
                            "I have been busy with the garden lately.",
                            "We should meet for coffee soon.",
                            "Work has been calm this month.",
                            "I read a good book about rivers.",
                        ]
                    )
                turns.append({"speaker": speaker, "dia_id": f"D{s}:{t}", "text": text})
            conv[f"session_{s}"] = turns
        samples.append({"sample_id": f"sample-{c}", "conversation": conv, "qa": qa})
    return samples


def coding_session(rng: random.Random) -> list[Message]:
    """A coding-agent session: reads, a failing test run, an edit, a passing run."""
    messages = [
        Message.system("You are a coding agent working in a Python repository."),
        Message.user("The test tests/test_parser.py::test_dates fails; fix it."),
    ]
    steps = [
        ("read_file", {"path": "src/parser.py"}, "def parse_date(text):\n" + "    # parse\n" * 60),
        ("run_tests", {"path": "tests/test_parser.py"}, "FAILED test_parser.py::test_dates - ValueError: month 13"),
        ("read_file", {"path": "tests/test_parser.py"}, "def test_dates():\n" + "    assert parse_date('x')\n" * 40),
        ("edit_file", {"path": "src/parser.py", "find": "month", "replace": "month - 1"}, "edited src/parser.py"),
        ("run_tests", {"path": "tests/test_parser.py"}, "1 passed in 0.04s"),
    ]
    for i, (tool, args, output) in enumerate(steps * 4):
        call_id = f"call_{i}"
        call = ToolCall(call_id=call_id, name=tool, arguments=json.dumps(args))
        messages.append(Message.assistant(tool_calls=[call]))
        messages.append(Message.tool_result(call_id, output, name=tool))
    messages.append(Message.assistant("Fixed: parse_date used a 1-based month index; the test passes."))
    return messages


def main() -> int:
    rng = random.Random(20261204)
    OUT.mkdir(parents=True, exist_ok=True)
    traces = [airline_trace(n, rng) for n in range(6)]
    (OUT / "probe-traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    (OUT / "locomo-sample.json").write_text(json.dumps(locomo_sample(rng), indent=1) + "\n", encoding="utf-8")
    session = coding_session(rng)
    for fmt in ("openai", "responses", "anthropic"):
        data = from_messages(session, format=fmt)
        (OUT / f"transcript.{fmt}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
