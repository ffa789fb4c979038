"""Synthetic agent histories for the summarizer tests."""

from __future__ import annotations

import json
import random
import re

from contextwarden.messages import Message, ToolCall
from contextwarden.summarize.base import SummaryRequest


def request(messages: list[Message], max_tokens: int = 600, previous: str | None = None) -> SummaryRequest:
    return SummaryRequest(
        previous=previous,
        messages=messages,
        max_tokens=max_tokens,
        span=(messages[0].message_id, messages[-1].message_id),
    )


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=json.dumps(arguments))


def support_history() -> list[Message]:
    """A short support conversation: a request with constraints, lookups, an error and its fix."""
    return [
        Message.user(
            "Please move my order ORD-48213 to the Berlin warehouse. It must arrive before 2024-06-14. "
            "Don't use express shipping, my budget is 40 EUR.",
            message_id="m1",
        ),
        Message.assistant("", tool_calls=[call("c1", "get_order", order_id="ORD-48213")], message_id="m2"),
        Message.tool_result(
            "c1",
            json.dumps({"order_id": "ORD-48213", "status": "packed", "warehouse": "WH_MUNICH_02", "weight_kg": 12.5}),
            name="get_order",
            message_id="m3",
        ),
        Message.assistant(
            "", tool_calls=[call("c2", "transfer_order", order_id="ORD-48213", to="WH_BERLIN_01")], message_id="m4"
        ),
        Message.tool_result(
            "c2",
            "Error: TransferRefused: order ORD-48213 is locked by pick list PL-7781",
            name="transfer_order",
            is_error=True,
            message_id="m5",
        ),
        Message.assistant(
            "",
            tool_calls=[call("c3", "transfer_order", order_id="ORD-48213", to="WH_BERLIN_01", unlock=True)],
            message_id="m6",
        ),
        Message.tool_result(
            "c3", "ok: transfer TR-5521 scheduled for 2024-06-11", name="transfer_order", message_id="m7"
        ),
        Message.assistant(
            "The order ORD-48213 will move to WH_BERLIN_01 with transfer TR-5521 on 2024-06-11. "
            "I will now book standard shipping. Do you want a tracking link by email?",
            message_id="m8",
        ),
    ]


_MODULES = ("app/settings.py", "app/models/user.py", "app/api/routes.py", "app/services/billing.py", "app/db/pool.py")
_FUNCS = ("parse_config", "load_user", "register_routes", "charge_invoice", "acquire_conn", "render_report")


def coding_session(steps: int, *, seed: int = 7) -> tuple[list[Message], dict[str, str]]:
    """A long coding-agent session; returns the messages and the facts planted early that matter later.

    Step 3 hits an import error in a file and a function, step 5 fixes it; the other steps read,
    grep and test files with large, noisy outputs.
    """
    rng = random.Random(seed)
    facts = {
        "error": "ImportError: cannot import name 'parse_config' from 'app.settings' (app/settings.py)",
        "path": "app/settings.py",
        "function": "parse_config",
        "constraint": "Never change the public signature of charge_invoice.",
        "url": "https://ci.example.com/builds/88123",
    }
    msgs: list[Message] = [
        Message.user(
            "Fix the failing CI build at https://ci.example.com/builds/88123. "
            "Never change the public signature of charge_invoice. Keep the diff small.",
            message_id="u0",
        )
    ]
    for step in range(steps):
        cid = f"call_{step}"
        if step == 3:
            tool, args = "run_tests", {"path": "tests/test_settings.py"}
            out = (
                'Traceback (most recent call last):\n  File "tests/test_settings.py", line 4, in <module>\n'
                f"{facts['error']}\nFAILED tests/test_settings.py::test_load - 1 failed"
            )
            err = True
        elif step == 5:
            tool, args = "edit_file", {"path": "app/settings.py", "patch": "+def parse_config(path):\n+    ..."}
            out = "patched app/settings.py (+12 -3)"
            err = False
        else:
            tool = rng.choice(("read_file", "grep", "run_tests"))
            path = rng.choice(_MODULES)
            func = rng.choice(_FUNCS)
            args = {"path": path} if tool != "grep" else {"pattern": func, "path": "app"}
            lines = [f"{path}:{rng.randint(1, 400)}: def {func}_{rng.randint(0, 999)}(x): return x" for _ in range(40)]
            out = "\n".join(lines)
            err = False
        msgs.append(Message.assistant("", tool_calls=[call(cid, tool, **args)], message_id=f"a{step}"))
        msgs.append(Message.tool_result(cid, out, name=tool, is_error=err, message_id=f"t{step}"))
    msgs.append(Message.assistant("All tests pass now. I will open the pull request next.", message_id="done"))
    return msgs, facts


def faithful(prompt: str) -> str:
    """What a careful model writes: our headings, with every identifier and constraint the prompt
    says to keep verbatim, plus the key data of the summaries it is given to merge."""
    ids: list[str] = []
    for line in re.findall(r"(?:Identifiers that must appear verbatim|Key data): (.*)", prompt):
        ids += [i.strip() for i in line.split(" · ") if i.strip() and i.strip() not in ids]
    constraints = re.search(r"User constraints to quote verbatim:\n((?:- .*\n?)+)", prompt)
    lines = ["Task: handle the user's request", "Completed steps:", "- looked up the records"]
    lines.append("Key data: " + (" · ".join(ids) if ids else "none"))
    if constraints:
        lines += ["User constraints:", constraints.group(1).strip()]
    lines.append("Next step: continue")
    return "\n".join(lines)
