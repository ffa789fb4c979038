"""A scripted coding agent behind a real local HTTP server, and a recording tap in front of a proxy.

`ScriptedAgent` is the model: it reads the tools each request offers and answers with one tool call
per step that makes the client list, read, grep, run a command or write in a scratch git
repository, checking each step's result when the next request brings it back. Requests without
the client's shell tool (title generation, the client's own compaction, quota probes) are side
requests: answered with text, counted apart. When a request offers ``read_context``, the agent
reads back a step's result that reached it as a stand-in (and checks the full text), and reads
back once whatever else the view refers to. Thinking blocks (Anthropic) and
encrypted reasoning items (Responses) it emits carry signatures it verifies when they come back.

`Tap` forwards every request unchanged to a target (the proxy) and records what the client sent.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, Self

from ._dialects import ROUTES, Call, Reply, Request, answer, parse

STEPS = 40
SHELL_TOOLS = ("Bash", "bash", "run_shell_command", "shell", "shell_command", "exec_command")
_READ_REF = re.compile(r'read_context\("((?:snap_|#[0-9]|msg_)[^"\\]{0,200})"\)')  # not the header's placeholder
_LEDGER_STEP = re.compile(r"^#(\d+) [^\w\s] (.*)$", re.M)  # "#12 ✓ Read(...)": a step of the progress ledger
_SIDE_TEXT = "Working in the scratch repository."


def _probe_ref(text: str) -> str | None:
    """What to read back from a view: a file read that the progress ledger lists (``#N``), else a
    snapshot the view refers to, else any step of the ledger."""
    steps = list(_LEDGER_STEP.finditer(text))
    for line in steps:
        if any(word in line.group(2) for word in ("Read", "read", "cat ")):
            return f"#{line.group(1)}"
    found = _READ_REF.search(text)
    if found is not None:
        return found.group(1)
    return f"#{steps[0].group(1)}" if steps else None


def sign(text: str) -> str:
    """The signature the agent gives a thinking block or reasoning item (checked when it returns)."""
    return hashlib.sha256(b"scripted-agent:" + text.encode()).hexdigest()


def make_repo(root: Path, *, files: int = 8, lines: int = 220) -> Path:
    """A scratch git repository: ``src/module_NN.py`` files of ~``lines`` lines, each with its marker."""
    import subprocess

    (root / "src").mkdir(parents=True)
    for k in range(files):
        body = [f"# module {k:02d}: MARKER_{k:02d}_{sign(str(k))[:8]}"]
        body += [f"def function_{k:02d}_{i:03d}(value):\n    return value * {i} + {k}  # row {i}" for i in range(lines)]
        (root / "src" / f"module_{k:02d}.py").write_text("\n".join(body) + "\n")
    (root / "README.md").write_text("# scratch\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "initial"]):
        subprocess.run(["git", *args], cwd=root, check=True, env={**env, "PATH": "/usr/bin:/bin"})
    return root


@dataclass(frozen=True)
class Step:
    """One planned step: what the call asks for and how its result is checked."""

    index: int
    action: str
    check: Callable[[str], bool]


@dataclass(frozen=True)
class _Issued:
    """A call the agent made: a step, the read-back of a step's shortened result, or a read-back
    of whatever the view referred to (``probe``), after which the agent does step ``step``."""

    step: int
    kind: Literal["step", "read", "probe"]


@dataclass
class Record:
    """One request the agent answered."""

    request: Request
    headers: Mapping[str, str]
    kind: str  # "agent", "read_context" or "side"
    reply: Reply


@dataclass
class Outcome:
    """What a run established, for the assertions."""

    steps_ok: list[int] = field(default_factory=list)
    steps_failed: dict[int, str] = field(default_factory=dict)
    unknown_results: list[str] = field(default_factory=list)
    missing_tools: set[str] = field(default_factory=set)
    finished: bool = False
    read_context_calls: int = 0
    read_context_answers: list[str] = field(default_factory=list)
    signatures_checked: int = 0
    signature_problems: list[str] = field(default_factory=list)


class ScriptedAgent:
    """The decision logic, one instance per client run."""

    def __init__(self, repo: Path, *, steps: int = STEPS) -> None:
        self.repo = repo
        self.plan = [self._step(k) for k in range(steps)]
        self.outcome = Outcome()
        self.records: list[Record] = []
        self._issued: dict[str, _Issued] = {}
        self._lock = threading.Lock()

    def _step(self, k: int) -> Step:
        kind = ("list", "read", "grep", "run", "write")[k % 5]
        module = k % 8
        if kind == "list":
            return Step(k, "list", lambda text: f"module_{(module + 1) % 8:02d}.py" in text)
        if kind == "read":
            marker = f"MARKER_{module:02d}_{sign(str(module))[:8]}"
            return Step(k, "read", lambda text: marker in text)
        if kind == "grep":
            return Step(k, "grep", lambda text: f"module_{module:02d}.py" in text)
        if kind == "run":
            return Step(k, "run", lambda text: f"ran {17 * k}" in text)
        target = self.repo / "notes" / f"step_{k:02d}.txt"
        return Step(k, "write", lambda text: target.exists() and f"written at step {k}" in target.read_text())

    # --- answering ----------------------------------------------------------------------------
    def respond(self, request: Request, headers: Mapping[str, str]) -> Reply:
        with self._lock:
            kind, reply = self._decide(request)
            self.records.append(Record(request, headers, kind, reply))
            return reply

    def _decide(self, request: Request) -> tuple[str, Reply]:
        self._check_signatures(request)
        if not any(name in request.tools for name in SHELL_TOOLS):
            return "side", Reply(text=_SIDE_TEXT)
        next_step = 0
        read_back: tuple[int, str] | None = None  # a step whose result came as a stand-in: read it back
        for result in request.results:
            issued = self._issued.get(result.call_id)
            if issued is None:
                self.outcome.unknown_results.append(result.call_id)
                continue
            if issued.kind != "step":
                self.outcome.read_context_answers.append(result.text)
            if issued.kind == "probe":  # continue with the step it came before
                next_step = issued.step
                continue
            step = self.plan[issued.step]
            found = _READ_REF.search(result.text)
            if step.check(result.text):
                if issued.step not in self.outcome.steps_ok:
                    self.outcome.steps_ok.append(issued.step)
                self.outcome.steps_failed.pop(issued.step, None)
            elif issued.kind == "step" and found is not None and "read_context" in request.tools:
                read_back = (issued.step, found.group(1))
            elif issued.step not in self.outcome.steps_ok:
                self.outcome.steps_failed[issued.step] = result.text[:400]
            next_step = issued.step + 1
        if read_back is not None:
            return "read_context", self._read(request, read_back[1], _Issued(read_back[0], "read"))
        if "read_context" in request.tools and self.outcome.read_context_calls == 0:
            ref = _probe_ref(request.text)
            if ref is not None:
                return "read_context", self._read(request, ref, _Issued(next_step, "probe"))
        if next_step >= len(self.plan):
            self.outcome.finished = True
            return "agent", self._with_reasoning(request, f"All {len(self.plan)} steps done.", None)
        call = self._call(request, self.plan[next_step])
        if call is None:
            return "agent", Reply(text=f"Cannot do step {next_step}: no tool for it.")
        self._issued[call.call_id] = _Issued(next_step, "step")
        return "agent", self._with_reasoning(request, f"Step {next_step}: {self.plan[next_step].action}.", call)

    def _read(self, request: Request, ref: str, issued: _Issued) -> Reply:
        self.outcome.read_context_calls += 1
        call = Call(f"call_{uuid.uuid4().hex[:20]}", "read_context", {"ref": ref})
        self._issued[call.call_id] = issued
        return self._with_reasoning(request, f"Read back {ref}.", call)

    def _with_reasoning(self, request: Request, text: str, call: Call | None) -> Reply:
        thought = f"Thinking about: {text} ({uuid.uuid4().hex[:8]})"
        if request.dialect == "messages":
            return Reply(text=text, thinking=thought, signature=sign(thought), call=call)
        if request.dialect == "responses":
            return Reply(text=text, encrypted=f"enc.{thought}.{sign(thought)}", call=call)
        return Reply(text=text, call=call)

    def _check_signatures(self, request: Request) -> None:
        for thought, signature in request.thinking:
            self.outcome.signatures_checked += 1
            if signature != sign(thought):
                self.outcome.signature_problems.append(f"thinking {thought[:60]!r}: signature {signature[:20]!r}")
        for blob in request.encrypted:
            self.outcome.signatures_checked += 1
            thought, _, signature = blob.removeprefix("enc.").rpartition(".")
            if not blob.startswith("enc.") or signature != sign(thought):
                self.outcome.signature_problems.append(f"reasoning {blob[:60]!r}")

    # --- tool calls from the offered schemas ----------------------------------------------------
    def _call(self, request: Request, step: Step) -> Call | None:
        k = step.index
        module = self.repo / "src" / f"module_{k % 8:02d}.py"
        shell = {
            "list": f"ls {self.repo / 'src'}",
            "read": f"cat {module}",
            "grep": f"grep -rln MARKER_{k % 8:02d}_ {self.repo / 'src'}",
            "run": f"python3 -c \"print('ran', 17 * {k})\"",
            "write": f"mkdir -p notes && printf 'written at step {k}\\n' > notes/step_{k:02d}.txt",
        }[step.action]
        wanted: dict[str, tuple[str, ...]] = {
            "list": ("LS", "list", "list_directory"),
            "read": ("Read", "read", "read_file"),
            "grep": ("Grep", "grep", "grep_search", "search_file_content"),
            "write": ("Write", "write", "write_file"),
        }
        values = {
            "list": {"path": str(self.repo / "src")},
            "read": {"path": str(module)},
            "grep": {"path": str(self.repo / "src"), "pattern": f"MARKER_{k % 8:02d}_"},
            "write": {"path": str(self.repo / "notes" / f"step_{k:02d}.txt"), "content": f"written at step {k}\n"},
        }.get(step.action, {})
        for name in wanted.get(step.action, ()):
            if name in request.tools:
                arguments = _fill(request.tools[name], values, k)
                if arguments is not None:
                    return Call(f"call_{uuid.uuid4().hex[:20]}", name, arguments)
        for name in SHELL_TOOLS:
            if name in request.tools:
                arguments = _fill(request.tools[name], {"command": shell}, k, workdir=str(self.repo))
                if arguments is not None:
                    return Call(f"call_{uuid.uuid4().hex[:20]}", name, arguments)
        self.outcome.missing_tools.add(step.action)
        return None


_PATH_NAMES = ("file_path", "filePath", "absolute_path", "path", "dir_path", "directory")


def _fill(schema: Mapping[str, Any], values: Mapping[str, str], k: int, *, workdir: str = "") -> dict[str, Any] | None:
    """Arguments for a tool from its JSON schema; None when a required property cannot be filled."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if name in _PATH_NAMES and "path" in values:
            arguments[name] = values["path"]
        elif name in ("content", "pattern") and name in values:
            arguments[name] = values[name]
        elif name in ("command", "cmd") and "command" in values:
            arguments[name] = ["bash", "-lc", values["command"]] if kind == "array" else values["command"]
        elif name == "description":
            arguments[name] = f"step {k}"
        elif name in ("workdir", "cwd", "directory") and workdir:
            arguments[name] = workdir
    required = schema.get("required") or []
    return arguments if all(name in arguments for name in required) else None


# --- the HTTP servers ------------------------------------------------------------------------------


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        data = b""
        while True:
            size = int(handler.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                handler.rfile.readline()
                break
            data += handler.rfile.read(size)
            handler.rfile.readline()
    else:
        data = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    if handler.headers.get("Content-Encoding", "").lower() == "gzip":
        data = gzip.decompress(data)
    return data


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Quiet(BaseHTTPRequestHandler):
    """HTTP/1.1 (kept-alive connections, as the clients use them), no access log."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Background:
    """An HTTP server on ``127.0.0.1:<free port>`` in a thread, for the length of a ``with`` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _write_chunked(handler: BaseHTTPRequestHandler, chunks: Iterable[bytes]) -> None:
    """Send ``chunks`` as a chunked body, each as soon as it is there."""
    for chunk in chunks:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


class AgentServer(_Background):
    """`ScriptedAgent` on ``127.0.0.1:<free port>``: the three dialects, ``/v1/models``, side requests."""

    def __init__(self, agent: ScriptedAgent, *, model: str = "scripted-agent") -> None:
        self.agent = agent
        self.model = model
        self.other: list[tuple[str, str]] = []  # (method, path) of requests to other routes
        owner = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                owner.other.append(("GET", self.path))
                if self.path.split("?")[0].rstrip("/").endswith("/models"):
                    model = {"id": owner.model, "object": "model", "created": 0, "owned_by": "scripted"}
                    self._json(200, {"object": "list", "data": [model]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:
                raw = _read_body(self)
                path = self.path.split("?")[0]
                if path.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": len(raw) // 4})
                    return
                dialect = next((d for route, d in ROUTES.items() if path.endswith(route)), None)
                if dialect is None:
                    owner.other.append(("POST", self.path))
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                request = parse(dialect, json.loads(raw))
                reply = owner.agent.respond(request, dict(self.headers.items()))
                body, media = answer(request, reply, prompt_tokens=len(raw) // 4)
                if isinstance(body, bytes):
                    self._send(200, body, media)
                else:
                    self._stream(body)

            def _json(self, status: int, payload: Any) -> None:
                self._send(status, json.dumps(payload).encode(), "application/json")

            def _send(self, status: int, body: bytes, media: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, frames: Iterator[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                _write_chunked(self, frames)

        super().__init__(Handler)


_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}


@dataclass
class Sent:
    """A request the client sent, as the tap saw it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    status: int = 0


class Tap(_Background):
    """Forwards everything to ``target`` unchanged (streams chunk by chunk) and records the requests."""

    def __init__(self, target: str) -> None:
        self.sent: list[Sent] = []
        host, _, port = target.removeprefix("http://").rstrip("/").partition(":")
        owner = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                self._forward(_read_body(self))

            def do_DELETE(self) -> None:
                self._forward(b"")

            def _forward(self, body: bytes) -> None:
                dropped = {*_HOP, "content-length", "content-encoding"}  # the body is forwarded decoded, whole
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                headers["Content-Length"] = str(len(body))
                sent = Sent(self.command, self.path, headers, body)
                owner.sent.append(sent)
                connection = http.client.HTTPConnection(host, int(port), timeout=600)
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                sent.status = response.status
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                _write_chunked(self, iter(lambda: response.read1(65536), b""))
                connection.close()

        super().__init__(Handler)
