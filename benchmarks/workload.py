"""The trim workload: a seeded coding-agent session, its token accounting and the checks on a view.

Two sources serve the same `Workload` interface:

- `SharedHarness` wraps the reference harness ``peers_bench.py`` (``--bench-script`` /
  ``--harness``; see the benchmark page of the docs for where to get it). Figures that are compared
  with the references come from it.
- `BuiltinWorkload` is this repository's own generator of the same kind of session, so the trim and
  token benchmarks run from a plain clone: a ~1.5k-token system prompt, then rounds of a user
  message, one or two tool calls, their outputs (50 to 4,000 tokens, log-uniform: code, logs, prose
  and Chinese) and sometimes an assistant answer. Its floor peer keeps the system message and the
  longest suffix of the history that starts at a user message and fits the window, counting each
  message once (prefix sums and a bisection per turn): the least work a correct trimmer can do.

Messages are canonical OpenAI-style dicts: ``{"role", "content", "tool_calls": [{"id", "name",
"arguments"}], "tool_call_id", "name"}``. A message counts 4 tokens plus its content, and 3 plus
the name and the arguments per tool call (cl100k, ``encode_ordinary``); a view adds 3 for the reply.
"""

from __future__ import annotations

import bisect
import importlib.util
import json
import math
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from contextwarden.tokens.tiktoken import load_encoding

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HARNESS = "../shared/bench/peers_bench.py"

Canon = dict[str, Any]
TextMaker = Callable[[random.Random, int], str]


class Peer(Protocol):
    """A trimmer stepped turn by turn (the harness's peer interface)."""

    name: str

    def convert(self, canon: list[Canon]) -> list[tuple[Any, list[int]]]: ...
    def setup(self, window: int, enc: Any) -> None: ...
    def step(self, native_round: list[Any]) -> list[Any]: ...


class Workload(Protocol):
    """What the trim and token benchmarks need from a workload."""

    source: str
    """Where the workload comes from: a harness path or ``builtin``."""
    shared_root: Path | None
    """The shared folder beside the harness (data sets for the heuristic-error samples), if any."""

    def get_encoding(self) -> Any: ...
    def build_conversation(self, n_messages: int, seed: int) -> tuple[list[Canon], list[tuple[int, int]]]: ...
    def message_tokens(self, enc: Any, m: Canon) -> int: ...
    def text_makers(self) -> dict[str, TextMaker]: ...
    def floor_peer(self) -> Peer: ...
    def canonical_view(
        self, out: list[Any], id_map: dict[int, list[int]], canon: list[Canon], enc: Any, memo: dict[Any, int]
    ) -> list[Any] | None: ...
    def check_context(self, idx: list[Any], canon: list[Canon], tokens: list[int], window: int) -> dict[str, Any]: ...
    def fit_exponent(self, xs: list[float], ys: list[float], min_x: float) -> float | None: ...
    def hf_tokenizer_json(self, explicit: str | None) -> str | None: ...


# --- the reference harness ------------------------------------------------------------------------------


@dataclass
class SharedHarness:
    """``peers_bench.py`` loaded from a file."""

    module: ModuleType
    source: str
    shared_root: Path | None

    def get_encoding(self) -> Any:
        self.module.ensure_tiktoken_offline()
        return self.module.get_encoding()

    def build_conversation(self, n_messages: int, seed: int) -> tuple[list[Canon], list[tuple[int, int]]]:
        msgs, rounds = self.module.build_conversation(n_messages, seed)
        return msgs, rounds

    def message_tokens(self, enc: Any, m: Canon) -> int:
        return int(self.module.message_tokens(enc, m))

    def text_makers(self) -> dict[str, TextMaker]:
        mod = self.module
        return {"prose": mod._prose, "code": mod._code, "log": mod._log, "zh": mod._zh}

    def floor_peer(self) -> Peer:
        peer: Peer = self.module.FloorPeer()
        return peer

    def canonical_view(
        self, out: list[Any], id_map: dict[int, list[int]], canon: list[Canon], enc: Any, memo: dict[Any, int]
    ) -> list[Any] | None:
        view: list[Any] | None = self.module.canonical_view(out, id_map, canon, enc, memo)
        return view

    def check_context(self, idx: list[Any], canon: list[Canon], tokens: list[int], window: int) -> dict[str, Any]:
        check: dict[str, Any] = self.module.check_context(idx, canon, tokens, window)
        return check

    def fit_exponent(self, xs: list[float], ys: list[float], min_x: float) -> float | None:
        exponent: float | None = self.module._fit_exponent(xs, ys, min_x)
        return exponent

    def hf_tokenizer_json(self, explicit: str | None) -> str | None:
        found: str | None = self.module.find_hf_tokenizer_json(explicit)
        return found


def _import_harness(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers_bench", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules["peers_bench"] = module
    spec.loader.exec_module(module)
    return module


def load_workload(harness: str | None) -> Workload:
    """The harness at ``harness`` (relative to the cwd, else to the repository root), or the built-in one.

    ``None`` means: the reference harness at its usual place beside the repository if it is there,
    else the built-in workload. A path that was given and does not exist is an error.
    """
    wanted = harness if harness is not None else DEFAULT_HARNESS
    for candidate in (Path(wanted), ROOT / wanted):
        if candidate.is_file():
            path = candidate.resolve()
            return SharedHarness(module=_import_harness(path), source=str(path), shared_root=path.parents[1])
    if harness is not None and harness != "builtin":
        raise SystemExit(
            f"peers_bench.py not found at {harness!r}: pass its path, or 'builtin' for the built-in workload"
        )
    return BuiltinWorkload()


# --- the built-in workload -------------------------------------------------------------------------------

_VOCAB = (
    "buffer cache request handler session token budget window message round ledger snapshot index query "
    "parser schema record commit branch merge review failure retry timeout latency worker queue upstream "
    "client server config option default value result error trace module package import export status "
    "metric counter gauge alert policy tenant store backend migration table column update insert delete "
    "stream event chunk reply prompt summary history context pressure limit offset cursor page batch"
).split()
_NAMES = (
    "load save parse fetch build render apply merge split count scan flush drain route sync check emit "
    "compact evict clear recall prune order group score rank"
).split()
_HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种"
    "面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本"
    "去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比"
    "或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做"
    "必战先回则任取据处理府研质"
)
_TOOLS = ("read_file", "grep", "run_tests", "list_dir", "apply_patch", "shell", "search_code", "git_log")
_CHARS_PER_TOKEN = {"prose": 5.3, "code": 3.7, "log": 2.8, "zh": 0.95}
"""Characters per cl100k token of each maker's output, measured once; used only to size texts."""


def make_prose(rng: random.Random, tokens: int) -> str:
    """Sentences of a technical vocabulary, about ``tokens`` cl100k tokens long."""
    want = int(tokens * _CHARS_PER_TOKEN["prose"])
    sentences: list[str] = []
    size = 0
    while size < want:
        words = [rng.choice(_VOCAB) for _ in range(rng.randint(6, 20))]
        sentence = " ".join(words).capitalize() + rng.choice((".", ".", ".", "?", "!", ";"))
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)


def make_code(rng: random.Random, tokens: int) -> str:
    """Python-looking functions, about ``tokens`` cl100k tokens long."""
    want = int(tokens * _CHARS_PER_TOKEN["code"])
    blocks: list[str] = []
    size = 0
    while size < want:
        verb, noun, arg = rng.choice(_NAMES), rng.choice(_VOCAB), rng.choice(_VOCAB)
        bound = rng.randint(2, 512)
        block = "\n".join(
            (
                f"def {verb}_{noun}({arg}: dict, limit: int = {bound}) -> list:",
                f'    """{make_prose(rng, 8)}"""',
                "    found = []",
                f"    for key, item in {arg}.items():",
                f"        if len(found) >= limit or key.startswith('{rng.choice(_VOCAB)}'):",
                "            break",
                f"        found.append(self.{rng.choice(_NAMES)}(item, {rng.randint(0, 99)}))",
                "    return found",
                "",
                "",
            )
        )
        blocks.append(block)
        size += len(block)
    return "".join(blocks)


def make_log(rng: random.Random, tokens: int) -> str:
    """Service log lines with timestamps, levels, ids and latencies, about ``tokens`` tokens long."""
    want = int(tokens * _CHARS_PER_TOKEN["log"])
    lines: list[str] = []
    size = 0
    while size < want:
        line = (
            f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d} "
            f"{rng.choice(('INFO', 'INFO', 'DEBUG', 'WARN', 'ERROR'))} {rng.choice(_NAMES)}-{rng.choice(_VOCAB)} "
            f"id={rng.getrandbits(40):010x} took={rng.randint(1, 9000)}ms code={rng.choice((200, 201, 404, 500))} "
            f"{' '.join(rng.choice(_VOCAB) for _ in range(rng.randint(2, 7)))}"
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def make_zh(rng: random.Random, tokens: int) -> str:
    """Chinese-looking text of frequent characters, about ``tokens`` tokens long."""
    want = int(tokens * _CHARS_PER_TOKEN["zh"])
    parts: list[str] = []
    size = 0
    while size < want:
        clause = "".join(rng.choice(_HAN) for _ in range(rng.randint(5, 16))) + rng.choice("，。；？！")
        parts.append(clause)
        size += len(clause)
    return "".join(parts)


_MAKERS: dict[str, TextMaker] = {"prose": make_prose, "code": make_code, "log": make_log, "zh": make_zh}


def _tool_output_tokens(rng: random.Random) -> int:
    """50 to 4,000 tokens, uniform in log scale: most outputs small, a few large."""
    return round(math.exp(rng.uniform(math.log(50), math.log(4000))))


def build_conversation(n_messages: int, seed: int) -> tuple[list[Canon], list[tuple[int, int]]]:
    """At least ``n_messages`` messages and the (start, end) of each round; round 0 is the system message.

    The same seed gives the same prefix at every size.
    """
    rng = random.Random(seed)
    tool_lines = "\n".join(f"- {tool}: {make_prose(rng, 50)}" for tool in _TOOLS)
    rule_lines = "\n".join(f"{n}. {make_prose(rng, 22)}" for n in range(1, 9))
    system = f"You are a software agent in a large code base. {make_prose(rng, 1000)}\n\nTools:\n{tool_lines}\n\n"
    system += f"Rules:\n{rule_lines}"
    msgs: list[Canon] = [{"role": "system", "content": system}]
    rounds = [(0, 1)]
    calls_made = 0
    while len(msgs) < n_messages:
        start = len(msgs)
        chinese = rng.random() < 0.2
        ask = make_zh(rng, rng.randint(20, 240)) if chinese else make_prose(rng, rng.randint(20, 300))
        msgs.append({"role": "user", "content": ask})
        calls = []
        for _ in range(2 if rng.random() < 0.15 else 1):
            calls_made += 1
            arguments = {
                "path": "/".join(rng.choice(_VOCAB) for _ in range(3)) + ".py",
                "pattern": " ".join(rng.choice(_VOCAB) for _ in range(rng.randint(1, 25))),
                "max_results": rng.randint(1, 400),
            }
            calls.append(
                {"id": f"call_{calls_made:06d}", "name": rng.choice(_TOOLS), "arguments": json.dumps(arguments)}
            )
        msgs.append({"role": "assistant", "content": make_prose(rng, rng.randint(0, 80)), "tool_calls": calls})
        for call in calls:
            kind = rng.choices(("code", "log", "prose", "zh"), weights=(3, 3, 2, 2))[0]
            output = _MAKERS[kind](rng, _tool_output_tokens(rng))
            msgs.append({"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": output})
        if rng.random() < 0.5:
            answer = make_zh(rng, rng.randint(30, 300)) if chinese else make_prose(rng, rng.randint(30, 400))
            msgs.append({"role": "assistant", "content": answer})
        rounds.append((start, len(msgs)))
    return msgs, rounds


def message_tokens(enc: Any, m: Canon) -> int:
    """OpenAI-style count: 4 per message, the content, and per tool call 3 plus its name and arguments."""
    encode = enc.encode_ordinary
    total = 4 + len(encode(m.get("content") or ""))
    for call in m.get("tool_calls") or ():
        total += 3 + len(encode(call["name"])) + len(encode(call["arguments"]))
    return total


class FloorPeer:
    """The least work a correct trimmer does: each message counted once, prefix sums, one bisection a turn."""

    name = "floor"

    def convert(self, canon: list[Canon]) -> list[tuple[Any, list[int]]]:
        return [(m, [i]) for i, m in enumerate(canon)]

    def setup(self, window: int, enc: Any) -> None:
        self.enc, self.window = enc, window
        self.msgs: list[Canon] = []
        self.before: list[int] = [0]
        """before[i]: tokens of msgs[:i]."""
        self.user_starts: list[int] = []

    def step(self, native_round: list[Any]) -> list[Any]:
        for m in native_round:
            if m["role"] == "user":
                self.user_starts.append(len(self.msgs))
            self.msgs.append(m)
            self.before.append(self.before[-1] + message_tokens(self.enc, m))
        system = self.before[1] if self.msgs[0]["role"] == "system" else 0
        excess = self.before[-1] - (self.window - system - 3)
        if excess <= 0:
            return list(self.msgs)
        # the first user message from which the rest fits: before[start] >= excess
        at = bisect.bisect_left(self.user_starts, excess, key=lambda i: self.before[i])
        if at == len(self.user_starts):
            return self.msgs[:1]
        return self.msgs[:1] + self.msgs[self.user_starts[at] :]


def _canonical_key(m: Canon) -> tuple[Any, ...]:
    calls = tuple((c["id"], c["name"], c["arguments"]) for c in m.get("tool_calls") or ())
    return (m["role"], m.get("content") or "", m.get("tool_call_id"), calls)


class BuiltinWorkload:
    """This repository's trim workload (see the module docstring)."""

    source = "builtin"
    shared_root: Path | None = None

    def get_encoding(self) -> Any:
        return load_encoding("cl100k_base")

    def build_conversation(self, n_messages: int, seed: int) -> tuple[list[Canon], list[tuple[int, int]]]:
        return build_conversation(n_messages, seed)

    def message_tokens(self, enc: Any, m: Canon) -> int:
        return message_tokens(enc, m)

    def text_makers(self) -> dict[str, TextMaker]:
        return dict(_MAKERS)

    def floor_peer(self) -> Peer:
        return FloorPeer()

    def canonical_view(
        self, out: list[Any], id_map: dict[int, list[int]], canon: list[Canon], enc: Any, memo: dict[Any, int]
    ) -> list[Any] | None:
        """Each item as a canonical index, or ``("new", dict, tokens, key)`` for a message the peer made."""
        items: list[Any] = []
        for x in out:
            known = id_map.get(id(x))
            if known is not None:
                items.extend(known)
                continue
            if not isinstance(x, dict) or "role" not in x:
                return None
            key = _canonical_key(x)
            if key not in memo:
                memo[key] = message_tokens(enc, x)
            items.append(("new", x, memo[key], key))
        return items

    def check_context(self, idx: list[Any], canon: list[Canon], tokens: list[int], window: int) -> dict[str, Any]:
        """System kept first, every tool call answered before the next message, and the view fits."""
        first = idx[0] if idx else None
        if isinstance(first, tuple):
            made = first[1]
            system_kept = made["role"] == "system" and (made.get("content") or "").startswith(canon[0]["content"])
        else:
            system_kept = first == 0
        pairs_ok = True
        waiting: set[str] = set()
        total = 3
        for item in idx:
            m, n = (item[1], item[2]) if isinstance(item, tuple) else (canon[item], tokens[item])
            total += n
            if m["role"] == "tool":
                pairs_ok &= m["tool_call_id"] in waiting
                waiting.discard(m["tool_call_id"])
                continue
            pairs_ok &= not waiting
            waiting = {c["id"] for c in m.get("tool_calls") or ()}
        pairs_ok &= not waiting
        return {
            "system_kept": system_kept,
            "pairs_ok": pairs_ok,
            "tokens": total,
            "fits": total <= window,
            "messages": len(idx),
            "synthesized": sum(isinstance(item, tuple) for item in idx),
        }

    def fit_exponent(self, xs: list[float], ys: list[float], min_x: float) -> float | None:
        """Slope of log latency over log history, on the turns whose history is past ``min_x``."""
        points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > min_x and y > 0]
        if len(points) < 8:
            return None
        try:
            slope, _ = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
        except statistics.StatisticsError:  # every x equal
            return None
        return slope

    def hf_tokenizer_json(self, explicit: str | None) -> str | None:
        return explicit if explicit and Path(explicit).is_file() else None
