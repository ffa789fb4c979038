"""What agents' text says about files and commands, read with cheap scans.

Paths named in any text, the files one shell command acts on (and how: edited, created, tested,
ran, read), and the exit code and test summary a command's output reports. The working set
(`contextwarden.workingset`) builds on these; they run on every transcript message it reads, so
each one finds its candidates with C-speed searches and runs a full pattern only around them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "EXIT_RE",
    "PATH_RE",
    "TEST_SUMMARY_RE",
    "exit_code",
    "find_paths",
    "is_path",
    "python_references",
    "shell_references",
    "split_words",
    "test_summary",
]

_CODE_EXT = (
    "py|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|go|rs|java|kt|kts|scala|rb|php|cs|fs|swift|m|mm|c|h|cc|cpp|cxx|hh|hpp|"
    "cu|cuh|s|asm|zig|nim|lua|pl|pm|r|jl|dart|ex|exs|erl|hrl|clj|hs|ml|mli|elm|vue|svelte|pony|sol|"
    "md|rst|txt|tex|bib|adoc|org|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|lock|xml|html|htm|css|scss|less|"
    "sql|sh|bash|zsh|fish|ps1|bat|mk|cmake|gradle|proto|graphql|csv|tsv|log|patch|diff|in|pyx|pxd|tf|nix"
)
_BARE_NAMES = "Makefile|CMakeLists\\.txt|Dockerfile|Gemfile|Rakefile|Procfile|Justfile|BUILD|WORKSPACE|LICENSE"
# A path: optional ./ ../ ~/ or / start, components of word characters, dots, dashes, @ and +;
# either with a slash and a file-like last component, or a bare name with a known extension.
_PATH_END = r"(?![\w/@+-]|\.[A-Za-z0-9])"  # not followed by more of a name or another extension
PATH_RE = re.compile(
    r"(?<![\w./~@+-])"
    r"((?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)*"
    rf"(?:[\w@+-][\w.@+-]*\.(?:{_CODE_EXT})|{_BARE_NAMES}))"
    rf"{_PATH_END}"
)
_EXT_HIT_RE = re.compile(rf"\.(?:{_CODE_EXT}){_PATH_END}")
_BARE_HIT_RE = re.compile(rf"(?:{_BARE_NAMES}){_PATH_END}")
_BARE_NAME_LIST = tuple(name.replace("\\", "") for name in _BARE_NAMES.split("|"))
_PATH_CHAR_RE = re.compile(r"[\w./~@+-]")
_HEREDOC_RE = re.compile(r"(?<!<)<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")  # not a <<< here-string
# Python a command runs inline (a heredoc fed to python, or `python -c CODE`). Agents write files
# through a literal (`open("a.py", "w")`, `Path("a.py").write_text(...)`) or, as often, through a
# name bound to one first (`p = Path("a.py")` ... `p.write_text(...)`), so bindings are read too.
_PY_FLAGS = r"(?:\s+-[WX]\s*\S+|\s+-[A-Za-z]+)*"  # -W and -X take a value
# python reading its program from stdin (`python - <<EOF`, `cat <<EOF | python -`), not a script reading data
_PY_RUNS_HEREDOC_RE = re.compile(
    rf"(?:^|[\s;&|(/])python[\d.]*{_PY_FLAGS}(?:\s+-)?\s*<<|<<.*\|\s*python[\d.]*{_PY_FLAGS}(?:\s+-)?\s*(?:$|[;&|)])",
    re.MULTILINE,
)
# a heredoc that feeds a patch tool, or becomes a .patch/.diff file, carries file headers
_PATCH_FEED_RE = re.compile(r"\bgit\s+apply\b|\bpatch\b|apply_?patch|\.(?:patch|diff)\b")
_PY_FILE_TARGET_RE = re.compile(r""">\s*['"]?([^\s'"]+\.py)\b""")
_PY_INLINE_RE = re.compile(rf"""(?:^|[\s;&|(/])python[\d.]*{_PY_FLAGS}\s+-c\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)')""")
_PY_BIND_RE = re.compile(
    r"""(?:^|;)[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*(?:(?:pathlib\.)?Path\([ \t]*)?[rRuU]?(['"])([^'"\n]+)\2""",
    re.MULTILINE,
)
_PY_OPEN_RE = re.compile(r"(?<![\w.])(?:io\.|os\.fdopen\b)?open\(")
_PY_STRING_RE = re.compile(r"""^[rRbBuU]?(['"])([^'"\n]*)\1$""")
_PY_NAME_RE = re.compile(r"^[A-Za-z_]\w*$")
_PY_PATH_METHOD_RE = re.compile(
    r"""(?:\b([A-Za-z_]\w*)|Path\(\s*(?:[rR]?(['"])([^'"\n]+)\2|([A-Za-z_]\w*))\s*\))"""
    r"""\s*\.(write_text|write_bytes|open)\(\s*(?:mode\s*=\s*)?(?:[rRbB]?(['"])([^'"\n]*)\6)?"""
)
_WRITE_MODE_CHARS = frozenset("wax+")
_PY_FILEINPUT_RE = re.compile(r"fileinput\.(?:input|FileInput)\(")
_PY_INPLACE_RE = re.compile(r"\binplace\s*=\s*(?:True|1)\b")
_PY_ARG_RE = re.compile(r"""[rR]?(['"])([^'"\n]+)\1|\b([A-Za-z_]\w*)\b""")
_CALL_SCAN = 500  # characters of a call's arguments that are read
_MAX_CALLS = 64  # calls of one kind read in one script, and heredocs in one command: bounded work
# in-place flags, alone or in a cluster: sed -i, -Ei, -i.bak, --in-place; perl -i, -pi, -0pi, -i.bak
_SED_IN_PLACE_RE = re.compile(r"-[Ernsuz]*i|--in-place")
_PERL_IN_PLACE_RE = re.compile(r"-[0-9lnpaws]*i")
# file headers of a unified diff (`git apply`, `patch`) and of the `*** Begin Patch` format (apply_patch)
_DIFF_RE = re.compile(
    r"^(?:\+\+\+|---) (?:[ab]/)?(\S+)|^diff --git a/(\S+) b/|^\*\*\* (Update|Add) File: (\S+)", re.MULTILINE
)
# One shell word piece at a time, quotes whole (a `|` or `;` inside quotes separates nothing), or one
# of the separators between commands: && || ; newline and a pipe (not the `>|` redirection).
_SHELL_TOKEN_RE = re.compile(
    r"""'[^']*'?|"(?:[^"\\]|\\.)*"?|\\.|(?P<sep>&&|\|\||\|&|[;\n]|(?<!>)\|)|[^'"\\&|;\n]+|.""", re.DOTALL
)
EXIT_RE = re.compile(
    r"(?:exit(?:ed with)? code|returncode|return code|exit status)\W{0,3}?(-?\d+)|<returncode>(-?\d+)</returncode>",
    re.IGNORECASE,
)
_EXIT_HINTS = ("ode", "ODE", "tatus", "TATUS")  # in every way EXIT_RE's reports are spelled
TEST_SUMMARY_RE = re.compile(r"\b(\d+) (failed|passed|errors?)\b")

_READERS = frozenset(
    "cat head tail less more nl wc grep egrep rg ag awk diff file stat bat view python-read strings od xxd".split()
)
_RUNNERS = frozenset("python python3 node deno bun ruby go cargo make cmake gcc g++ clang javac java bash sh".split())
_TESTERS = frozenset("pytest tox nox jest vitest mocha ctest".split())
_CREATORS = frozenset(("touch", "mkdir", "cp", "mv", "ln", "install"))
_EDITORS = frozenset(("patch", "ed", "ex", "vi", "vim", "nano", "emacs", "truncate", "dos2unix"))
_PREFIXES = frozenset(("sudo", "time", "timeout", "nohup", "env", "exec", "xargs", "then", "do", "else", "!"))


def is_path(text: str) -> bool:
    """The whole text is one path (a file name with a known extension, or a known bare name)."""
    return PATH_RE.fullmatch(text) is not None


def find_paths(text: str, *, limit: int | None = None) -> list[str]:
    # Every path ends in a known extension or is a known bare name, and a match of PATH_RE can
    # only start where a run of path characters starts (its lookbehind refuses any other place).
    # So the cheap extension search finds the runs, and the full pattern runs once per run
    # instead of being tried at every character of a long output.
    hits = [m.start() for m in _EXT_HIT_RE.finditer(text)]
    if any(name in text for name in _BARE_NAME_LIST):
        hits.extend(m.start() for m in _BARE_HIT_RE.finditer(text))
        hits.sort()
    found: list[str] = []
    seen: set[str] = set()
    runs: set[int] = set()
    prev_hit = prev_start = -1
    for hit in hits:
        start = hit
        while start > 0 and _PATH_CHAR_RE.match(text, start - 1):
            start -= 1
            if start == prev_hit:  # in the previous hit's run: each character is walked once
                start = prev_start
                break
        prev_hit, prev_start = hit, start
        if start in runs:
            continue
        runs.add(start)
        match = PATH_RE.match(text, start)
        if match is None:
            continue
        path = match.group(1).rstrip(".")
        if path in seen or "://" in text[max(0, match.start() - 8) : match.start() + 3]:
            continue
        if path.count(".") > 0 and path.replace(".", "").isdigit():
            continue  # a version number
        seen.add(path)
        found.append(path)
        if limit is not None and len(found) >= limit:
            break
    return found


def _hits(text: str, needles: Iterable[str]) -> list[int]:
    """Positions of every occurrence of the needles in ``text``, in order (str.find is fast)."""
    found: list[int] = []
    for needle in needles:
        at = text.find(needle)
        while at >= 0:
            found.append(at)
            at = text.find(needle, at + 1)
    found.sort()
    return found


def exit_code(text: str) -> int | None:
    """The first exit code the text reports (``exit code 1``, ``<returncode>0</returncode>``, …).

    Every report names "code" or "status", so the (case-insensitive, slow) pattern only runs
    around those words; the first report in the text wins.
    """
    for at in _hits(text, _EXIT_HINTS):
        match = EXIT_RE.search(text, max(0, at - 16), at + 24)
        if match:
            match = EXIT_RE.match(text, match.start()) or match  # the window may have cut its digits
            return int(match.group(1) or match.group(2))
    return None


def test_summary(text: str) -> dict[str, int]:
    """Counts a test runner's summary reports (``3 failed``, ``10 passed``, ``1 error``), the last of each kind."""
    summary: dict[str, int] = {}
    for at in _hits(text, (" failed", " passed", " error")):
        start = at
        while start > 0 and text[start - 1].isdecimal():  # the count before the word, however long
            start -= 1
        match = TEST_SUMMARY_RE.match(text, start)
        if match is not None and match.start(2) == at + 1:
            summary[match.group(2).rstrip("s")] = int(match.group(1))
    return summary


def shell_references(command: str) -> list[tuple[str, str]]:
    """The files one shell command acts on, each with what it does to it.

    Reads redirections, editors (``sed -i``, ``perl -pi``, ``patch``), heredoc writes
    (``cat > f <<EOF``), inline Python (a heredoc fed to python, ``python -c CODE``: see
    `python_references`), diff headers in a heredoc (``git apply``), test runners
    (``pytest path::test``) and readers (``cat``, ``nl``, ``grep``).
    """
    refs: list[tuple[str, str]] = []
    head, bodies = _cut_heredocs(command)
    for feed, body in bodies:
        target = _PY_FILE_TARGET_RE.search(feed)
        if _PY_RUNS_HEREDOC_RE.search(feed) or (
            target is not None and re.search(rf"python[\d.]*{_PY_FLAGS}\s+{re.escape(target.group(1))}\b", head)
        ):  # python reads the body, now or from the .py file it becomes
            refs.extend(python_references(body))
        if _PATCH_FEED_RE.search(feed):
            for m in _DIFF_RE.finditer(body):
                if m.group(1) != "/dev/null":
                    refs.append(
                        (m.group(1) or m.group(2) or m.group(4), "created" if m.group(3) == "Add" else "edited")
                    )
    if "-c" in head:
        pieces: list[str] = []
        at = 0
        for inline in _PY_INLINE_RE.finditer(head):
            code_at = 1 if inline.group(1) is not None else 2
            code = inline.group(code_at)
            if code_at == 1:  # inside double quotes the shell unescapes \" \\ \$ and \`
                code = re.sub(r"""\\(["\\$`])""", r"\1", code)
            refs.extend(python_references(code))
            # the code is not shell: it is cut out before the command is split into segments
            pieces.append(head[at : inline.start(code_at)])
            at = inline.end(code_at)
        head = "".join(pieces) + head[at:] if pieces else head
    for segment in _split_commands(head):
        refs.extend(_segment_references(segment))
    # whatever path the command names that the segment rules did not place was still named by it
    placed = {p for p, _ in refs}
    refs.extend((p, "read") for p in find_paths(head) if p not in placed)
    return list(dict.fromkeys(refs))  # one command names a file once per action, however it spells it


def _cut_heredocs(command: str) -> tuple[str, list[tuple[str, str]]]:
    """The command without its heredoc bodies, and each body with the line that feeds it.

    A body ends at the line that holds only its word (after tabs, for ``<<-``); what follows is
    shell again.
    """
    if "<<" not in command:
        return command, []
    shell: list[str] = []
    bodies: list[tuple[str, str]] = []
    at = 0
    for n, heredoc in enumerate(_HEREDOC_RE.finditer(command)):
        if heredoc.start() < at:
            continue  # inside a body already cut
        if n >= _MAX_CALLS:
            break
        line_end = command.find("\n", heredoc.end())
        if line_end < 0:
            break
        indent = "\t*" if heredoc.group(1) else ""
        end = re.compile(rf"^{indent}{re.escape(heredoc.group(3))}[ \t]*$", re.MULTILINE).search(command, line_end + 1)
        body_end, resume = (end.start(), end.end()) if end else (len(command), len(command))
        feed_start = command.rfind("\n", 0, heredoc.start()) + 1
        shell.append(command[at : line_end + 1])
        bodies.append((command[feed_start:line_end], command[line_end + 1 : body_end]))
        at = resume
    shell.append(command[at:])
    return "".join(shell), bodies


def _call_args(code: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` ends just before `start` (at most `_CALL_SCAN` characters)."""
    args: list[str] = []
    depth = 0
    quote = ""
    current = start
    for i in range(start, min(len(code), start + _CALL_SCAN)):
        char = code[i]
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                args.append(code[current:i].strip())
                return [a for a in args if a]
            depth -= 1
        elif char == "," and depth == 0:
            args.append(code[current:i].strip())
            current = i + 1
    return []  # not closed within the scan: not read


def _file_of(arg: str, bound: Mapping[str, str]) -> str | None:
    """The path an argument names: a string literal that is a path, or a name bound to one."""
    literal = _PY_STRING_RE.match(arg)
    if literal is not None:
        path = literal.group(2)
        return path if is_path(path) and not path.startswith("/dev/") else None
    return bound.get(arg) if _PY_NAME_RE.match(arg) else None


def python_references(code: str) -> list[tuple[str, str]]:
    """The files a Python script acts on: those it writes are edited, the other paths it names are read.

    A write goes through ``open(f, mode)`` with ``w``, ``a``, ``x`` or ``+`` in the mode, through
    ``write_text``, ``write_bytes`` or ``open(mode)`` of a ``Path``, or through
    ``fileinput.input(f, inplace=True)``; ``f`` is a literal or a name the script bound to one
    (``p = "a.py"``, ``p = Path("a.py")``).
    """
    bound: dict[str, str] = {}
    for match in _PY_BIND_RE.finditer(code):
        if is_path(match.group(3)):
            bound[match.group(1)] = match.group(3)
    written: dict[str, None] = {}
    for match in itertools.islice(_PY_OPEN_RE.finditer(code), _MAX_CALLS):
        args = _call_args(code, match.end())
        positional = [a for a in args if not re.match(r"[A-Za-z_]\w*\s*=(?!=)", a)]
        keywords = dict(a.split("=", 1) for a in args if a not in positional)
        keywords = {k.strip(): v.strip() for k, v in keywords.items()}
        file_arg = positional[0] if positional else keywords.get("file", "")
        mode_arg = positional[1] if len(positional) > 1 else keywords.get("mode", "")
        mode = _PY_STRING_RE.match(mode_arg)
        path = _file_of(file_arg, bound)
        if path and mode is not None and not _WRITE_MODE_CHARS.isdisjoint(mode.group(2)):
            written[path] = None
    for match in _PY_PATH_METHOD_RE.finditer(code):
        path = match.group(3) or bound.get(match.group(1) or match.group(4) or "")
        if path and path.startswith("/dev/"):
            continue
        if path and (match.group(5) != "open" or not _WRITE_MODE_CHARS.isdisjoint(match.group(7) or "")):
            written[path] = None
    for match in itertools.islice(_PY_FILEINPUT_RE.finditer(code), _MAX_CALLS):  # inplace=True rewrites f
        args = _call_args(code, match.end())
        if not any(_PY_INPLACE_RE.match(a) for a in args):
            continue
        for arg in args:
            if _PY_INPLACE_RE.match(arg):
                continue
            for part in _PY_ARG_RE.finditer(arg.split("=", 1)[1] if arg.startswith("files") else arg):
                path = _file_of(part.group(0), bound)
                if path:
                    written[path] = None
    refs = [(path, "edited") for path in written]
    refs.extend((path, "read") for path in find_paths(code) if path not in written)
    return refs


def _split_commands(text: str) -> list[str]:
    """The simple commands of a shell line, split at separators outside quotes."""
    if "'" not in text and '"' not in text and "\\" not in text:
        return re.split(r"&&|\|\||\|&|;|\n|(?<!>)\|", text)  # nothing quoted: one C-speed split
    segments: list[str] = []
    current: list[str] = []
    for match in _SHELL_TOKEN_RE.finditer(text):
        if match.lastgroup == "sep":
            segments.append("".join(current))
            current = []
        else:
            current.append(match.group())
    segments.append("".join(current))
    return segments


# shlex splits at these four characters only (not at other Unicode spaces)
_WORD_PIECE_RE = re.compile(r"""[^ \t\r\n'"\\]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.|[ \t\r\n]+""", re.S)
_QUOTED_ESCAPE_RE = re.compile(r'\\(["\\])')


def split_words(text: str) -> list[str]:
    """The words of a shell command, as ``shlex.split(text, posix=True)`` gives them, in linear time.

    ``shlex`` grows each word one character at a time, which costs the square of a long word's
    length (a 256 KB token took seconds). Quotes and backslashes follow POSIX: single quotes keep
    everything; within double quotes a backslash escapes only ``"`` and itself.

    Raises:
        ValueError: A quote is not closed, or the text ends in a lone backslash.
    """
    words: list[str] = []
    current: list[str] = []
    in_word = False
    at = 0
    while at < len(text):
        match = _WORD_PIECE_RE.match(text, at)
        if match is None:
            raise ValueError(f"no closing quotation or escaped character at index {at}")
        piece, at = match.group(), match.end()
        first = piece[0]
        if first in " \t\r\n":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            continue
        in_word = True
        if first == "'":
            current.append(piece[1:-1])
        elif first == '"':
            current.append(_QUOTED_ESCAPE_RE.sub(r"\1", piece[1:-1]))
        elif first == "\\":
            current.append(piece[1])
        else:
            current.append(piece)
    if in_word:
        words.append("".join(current))
    return words


def _segment_references(segment: str) -> Iterable[tuple[str, str]]:
    text = segment.strip()
    if not text:
        return []
    try:
        words = split_words(text)
    except ValueError:
        words = text.split()
    refs: list[tuple[str, str]] = []
    # redirections: `> file`, `>> file` write a file; the operator and its target are not arguments
    plain: list[str] = []
    skip_next = False
    for i, word in enumerate(words):
        if skip_next:
            skip_next = False
            continue
        target = None
        if word in (">", ">>", "1>", "&>", "2>", "<", "<<", "<<<") and i + 1 < len(words):
            skip_next = True
            target = words[i + 1] if word not in ("<", "<<", "<<<", "2>") else None
        elif word.startswith((">", "1>", "&>")) and not word.startswith(">&"):
            target = word.lstrip("1&>")
        elif word.startswith(("<", "2>")):
            continue
        else:
            plain.append(word)
        if target and is_path(target) and not target.startswith("/dev/"):
            refs.append((target, "edited"))
    words = plain
    while words and (words[0] in _PREFIXES or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])):
        words = words[2:] if words[0] == "timeout" and len(words) > 1 else words[1:]
    if not words:
        return refs
    program = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    files = [a for a in args if not a.startswith("-")]
    if program in ("sed", "perl"):
        in_place_re = _SED_IN_PLACE_RE if program == "sed" else _PERL_IN_PLACE_RE
        in_place = any(in_place_re.match(a) for a in args)
        # the first plain argument of sed is its script unless -e/-f gave one
        script_given = any(a.startswith(("-e", "-f", "--expression", "--file")) for a in args)
        targets = files if script_given else files[1:]
        refs.extend((f, "edited" if in_place else "read") for f in targets if is_path(f))
    elif program == "tee":
        refs.extend((f, "edited") for f in files if is_path(f))
    elif program in _EDITORS or program in _CREATORS:
        action = "created" if program in ("touch", "cp", "mv", "install") else "edited"
        targets = files[-1:] if program in ("cp", "mv", "install") else files
        refs.extend((f, action) for f in targets if is_path(f))
        refs.extend((f, "read") for f in files[:-1] if program in ("cp", "mv") and is_path(f))
    elif program == "git" and args and args[0] in ("add", "diff", "checkout", "restore", "show", "log"):
        refs.extend((f, "read") for f in files[1:] if is_path(f))
    elif program in _TESTERS or (program.startswith("python") and args[:2] == ["-m", "pytest"]):
        for f in files:
            path = f.split("::", 1)[0]
            if path != "pytest" and is_path(path):
                refs.append((path, "tested"))
    elif program in _RUNNERS or program.startswith("python"):
        for f in files[:1] if program.startswith("python") else files:
            if is_path(f):
                refs.append((f, "ran"))
    elif program in _READERS:
        pattern_first = program in ("grep", "egrep", "rg", "ag", "awk") and not any(a in ("-e", "-f") for a in args)
        targets = files[1:] if pattern_first else files
        refs.extend((f, "read") for f in targets if is_path(f))
    return refs
