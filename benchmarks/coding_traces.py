"""Probe traces of shell-driven coding agents, built from OpenHands runs (SWE-bench style).

The coding dev set (Claude Code) edits through `Edit`/`Write` tools. Agents such as
mini-swe-agent or OpenHands' CodeAct edit through a shell: `sed -i`, `cat > file <<EOF`,
`python - <<EOF`, `git apply`. This script turns the OpenHands Multi-SWE-bench runs in
../shared/datasets/coding-sessions into probe traces of that kind, in two styles:

* ``tools``: one `execute_bash` tool (the editor's actions rewritten as shell commands);
* ``text``: mini-swe-agent's protocol, the command in a fenced ``bash`` block of the reply and
  the observation sent back as a user message (``<returncode>…</returncode><output>…``).

Probes are the paths of the files the run's final patch changes that occur in the history so
far (the held-out SWE-bench definition). A run is cut after every `--every` actions.

    .venv/bin/python -m benchmarks.coding_traces \
        --data ../shared/datasets/coding-sessions/openhands-multi-swe-bench-example/output.jsonl \
        --out bench-out/openhands-shell.jsonl
    .venv/bin/python -m contextwarden bench probes --data bench-out/openhands-shell.jsonl --budgets 4000,8000
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_PATCH_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


def _args(event: dict[str, Any]) -> dict[str, Any]:
    args = event.get("args")
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            value = ast.literal_eval(args)
        except (ValueError, SyntaxError):
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _shell_for(event: dict[str, Any]) -> str | None:
    """The shell command an action amounts to (editor actions rewritten the way shell agents write them)."""
    args = _args(event)
    action = event.get("action")
    path = args.get("path")
    if action == "run":
        return str(args.get("command", "")) or None
    if action == "read" and path:
        return f"cat -n {path}"
    if action == "edit" and path:
        sub = args.get("command")
        if sub == "create" or args.get("file_text"):
            body = str(args.get("file_text") or "")[:400]
            return f"cat <<'EOF' > {path}\n{body}\nEOF"
        old = str(args.get("old_str") or "x").splitlines()[0][:40].replace("/", r"\/").replace("'", "")
        new = str(args.get("new_str") or "y").splitlines()[0][:40].replace("/", r"\/").replace("'", "")
        return f"sed -i 's/{old}/{new}/' {path}"
    return None


def _observation(event: dict[str, Any]) -> tuple[str, int]:
    content = str(event.get("content", event.get("message", "")))[:6000]
    extras = event.get("extras")
    code = 0
    if isinstance(extras, str):
        match = re.search(r"'exit_code': (-?\d+)", extras)
        code = int(match.group(1)) if match else 0
    return content, code


def traces(run: dict[str, Any], *, style: str, every: int) -> Iterator[dict[str, Any]]:
    patch = str((run.get("test_result") or {}).get("git_patch", ""))
    targets = sorted(set(_PATCH_FILE.findall(patch)))
    history = run["history"]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Run one shell command per reply."}
    ]
    first_user = next((e for e in history if e.get("source") == "user" and e.get("action") == "message"), None)
    if first_user is None:
        return
    messages.append({"role": "user", "content": str(first_user.get("message", ""))[:4000]})
    actions = 0
    pending: str | None = None
    for event in history:
        if "action" in event and event.get("source") == "agent":
            command = _shell_for(event)
            if command is None:
                continue
            thought = str(_args(event).get("thought", ""))[:600]
            actions += 1
            call_id = f"call_{actions}"
            if style == "tools":
                messages.append(
                    {
                        "role": "assistant",
                        "content": thought or None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "execute_bash", "arguments": json.dumps({"command": command})},
                            }
                        ],
                    }
                )
            else:
                messages.append({"role": "assistant", "content": f"THOUGHT: {thought}\n\n```bash\n{command}\n```"})
            pending = call_id
        elif "observation" in event and pending is not None:
            content, code = _observation(event)
            if style == "tools":
                messages.append({"role": "tool", "tool_call_id": pending, "content": content})
            else:
                messages.append(
                    {"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n{content}\n</output>"}
                )
            pending = None
            if actions % every == 0:
                text = json.dumps(messages)
                probes = [t for t in targets if t in text]
                if probes:
                    yield {
                        "id": f"{run['instance_id']}-{style}-{actions}",
                        "source": "OpenHands Multi-SWE-bench run (see coding-sessions README)",
                        "messages": list(messages),
                        "probes": probes,
                    }
    text = json.dumps(messages)
    probes = [t for t in targets if t in text]
    if probes and actions % every:
        yield {
            "id": f"{run['instance_id']}-{style}-{actions}",
            "source": "OpenHands Multi-SWE-bench run (see coding-sessions README)",
            "messages": list(messages),
            "probes": probes,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="OpenHands output.jsonl")
    parser.add_argument("--out", required=True, help="probe-trace JSONL to write")
    parser.add_argument("--every", type=int, default=10, help="cut a run after every N actions")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w") as fh:
        for line in Path(args.data).read_text().splitlines():
            run = json.loads(line)
            for style in ("tools", "text"):
                for trace in traces(run, style=style, every=args.every):
                    fh.write(json.dumps(trace) + "\n")
                    n += 1
    print(f"wrote {n} traces to {out}")


if __name__ == "__main__":
    main()
