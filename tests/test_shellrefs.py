"""Reading agents' text: paths, the files a shell command acts on, exit codes and test summaries."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from contextwarden import shellrefs
from contextwarden.shellrefs import shell_references


def _refs(command: str) -> dict[str, str]:
    return dict(shell_references(command))


def test_sed_in_place_edits_and_sed_n_reads_and_the_script_is_no_path() -> None:
    refs = _refs("cd /testbed && sed -i 's/a\\/b/c/' django/db/models/query.py && sed -n '1,50p' setup.cfg")
    assert refs["django/db/models/query.py"] == "edited"
    assert refs["setup.cfg"] == "read"
    assert not any(p.startswith("s/") for p in refs)


def test_heredoc_writes_python_scripts_and_patches_are_edits() -> None:
    assert _refs("cat <<'EOF' > /testbed/src/new_mod.py\nprint('hi')\nEOF")["/testbed/src/new_mod.py"] == "edited"
    script = "python - <<'EOF'\nimport re\nwith open('pkg/core.py', 'w') as f:\n    f.write(s)\nEOF"
    assert _refs(script)["pkg/core.py"] == "edited"
    patch = "git apply <<'EOF'\ndiff --git a/lib/x.c b/lib/x.c\n--- a/lib/x.c\n+++ b/lib/x.c\n@@ -1 +1 @@\nEOF"
    assert _refs(patch)["lib/x.c"] == "edited"


def test_inline_python_writes_through_a_bound_name_are_edits() -> None:
    heredoc = (
        "cd /testbed\npython - <<'PY'\nfrom pathlib import Path\np = Path('lib/core/x.py')\n"
        "text = p.read_text()\np.write_text(text.replace('a', 'b'))\nprint(open('docs/a.rst').read())\nPY"
    )
    assert _refs(heredoc) == {"lib/core/x.py": "edited", "docs/a.rst": "read"}
    plain_name = (
        'python3 <<EOF\npath = "src/pkg/util.py"\nwith open(path, "r+", encoding="utf-8") as fh:\n    fh.write(s)\nEOF'
    )
    assert _refs(plain_name) == {"src/pkg/util.py": "edited"}
    one_liner = "cd /testbed && python -c \"import re;p='requests/models.py';s=open(p).read();open(p,'w').write(s)\""
    assert _refs(one_liner) == {"requests/models.py": "edited"}
    assert _refs("python -c 'print(open(\"a/b.py\").read())' && cat c/d.py") == {"a/b.py": "read", "c/d.py": "read"}
    assert _refs("python - <<'PY'\nfrom pathlib import Path\nPath('x/y.py').open('a').write('z')\nPY") == {
        "x/y.py": "edited"
    }


def test_a_heredoc_that_only_becomes_a_file_acts_on_that_file_alone() -> None:
    # the body is the new file's text: the paths it mentions are not acted on by the command
    body = "with open('out/log.txt', 'w') as f:\n    f.write(open('in/data.csv').read())\n"
    command = f"cat > src/pkg/new.py <<'EOF'\n{body}EOF"
    assert shell_references(command) == [("src/pkg/new.py", "edited")]
    # nor is the data a script reads from stdin
    assert _refs(f"python3 tools/convert.py <<'EOF'\n{body}EOF") == {"tools/convert.py": "ran"}
    assert _refs(f"python3 -u - <<'EOF'\n{body}EOF")["out/log.txt"] == "edited"


def test_one_command_names_a_file_once_per_action() -> None:
    patch = "git apply <<'EOF'\ndiff --git a/lib/x.c b/lib/x.c\n--- a/lib/x.c\n+++ b/lib/x.c\n@@ -1 +1 @@\nEOF"
    assert shell_references(patch) == [("lib/x.c", "edited")]
    assert shell_references("sed -i 's/a/b/' m.py && cat m.py && cat m.py") == [("m.py", "edited"), ("m.py", "read")]


@pytest.mark.parametrize(
    ("command", "path"),
    [
        ("perl -0pi -e 's/a/b/' f.py", "f.py"),
        ("perl -0777 -i -pe 's/a/b/g' g.py", "g.py"),
        ("perl -i.bak -pe 's/a/b/' h.py", "h.py"),
        ("sed -Ei 's/a/b/' i.py", "i.py"),
        ("sed --in-place=.bak 's/a/b/' k.py", "k.py"),
        ("sed -i 's/foo\\|bar/baz/' l.py", "l.py"),  # an alternation's | is inside the quoted script
        ("ex -sc '%s/a/b/g|x' n.py", "n.py"),
        (
            "python - <<'PY'\nimport fileinput\nfor line in fileinput.input(files=('q.py',), inplace=1):\n    pass\nPY",
            "q.py",
        ),
        ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: q/r.py\n@@\n-a\n+b\n*** End Patch\nEOF", "q/r.py"),
    ],
)
def test_in_place_edits_in_their_other_spellings(command: str, path: str) -> None:
    assert _refs(command)[path] == "edited"


def test_review_cases_of_heredocs_python_and_patches() -> None:
    add = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: q/new.py\n+x\n*** End Patch\nEOF"
    assert _refs(add) == {"q/new.py": "created"}
    # a heredoc body ends at its word: the commands after it are shell again
    after = "cat > reproduce.py <<'EOF'\nimport a\nEOF\npython reproduce.py && sed -i 's/x/y/' src/a.py"
    assert _refs(after) == {"reproduce.py": "ran", "src/a.py": "edited"}
    tested = "python - <<'PY'\nprint(1)\nPY\npython -m pytest tests/test_a.py"
    assert _refs(tested) == {"tests/test_a.py": "tested"}
    # python reads the body through a pipe, or from the .py file the body becomes
    assert _refs("cat <<'EOF' | python -\nopen('src/foo/bar.py', 'w').write('')\nEOF")["src/foo/bar.py"] == "edited"
    run_later = "cat > /tmp/fix.py <<'EOF'\nopen('src/foo/bar.py', 'w').write('')\nEOF\npython /tmp/fix.py"
    assert _refs(run_later)["src/foo/bar.py"] == "edited"
    # fileinput rewrites only its own arguments; other paths on the line are read
    line = (
        "python -c \"import fileinput,sys; [sys.stdout.write(l) for l in fileinput.input('src/x.py', inplace=True)];"
        " print(open('README.md').read())\""
    )
    assert _refs(line) == {"src/x.py": "edited", "README.md": "read"}
    files_kw = "python - <<'PY'\nimport fileinput\nfor l in fileinput.input(files=('q.py',), inplace=1):\n    pass\nPY"
    assert _refs(files_kw) == {"q.py": "edited"}
    # open() read by its arguments: keyword mode, keyword file; /dev/ is no file
    assert _refs("python - <<'PY'\nopen('src/a.py', encoding='utf-8', mode='w')\nPY") == {"src/a.py": "edited"}
    assert _refs("python - <<'PY'\nopen(file='src/b.py', mode='a')\nPY") == {"src/b.py": "edited"}
    assert "/dev/null" not in _refs("python - <<'PY'\nopen('/dev/null', 'w')\nPY")
    assert _refs("python -W ignore -c \"open('src/c.py','w')\"") == {"src/c.py": "edited"}
    # a patch header counts only where a heredoc feeds a patch tool or becomes a patch file
    notes = 'cat > test_notes.py <<\'EOF\'\nPATCH = """\n*** Update File: src/a.py\n"""\nEOF'
    assert _refs(notes) == {"test_notes.py": "edited"}
    assert _refs("cat > fix.patch <<'EOF'\n--- a/src/d.py\n+++ b/src/d.py\nEOF")["src/d.py"] == "edited"
    # a here-string is no heredoc; |& is a pipe; sed's script given as -e'...'
    assert _refs("grep foo <<< \"x\"\nsed -i 's/a/b/' src/e.py")["src/e.py"] == "edited"
    assert _refs("make 2>&1 |& tee build.log")["build.log"] == "edited"
    assert _refs("sed -i -e's/a/b/' src/f.py") == {"src/f.py": "edited"}


@pytest.mark.parametrize("command", ["perl -pe 's/a/b/' y.py", "sed -n 's/a/b/p' y.py", "perl -I lib -e 'x' y.py"])
def test_filters_that_print_do_not_edit(command: str) -> None:
    assert _refs(command)["y.py"] == "read"


_WORDS = st.sampled_from(["sed", "-i", "a.py", "x", "'s/a|b/c/'", "'a;b'", '"p && q"', "'|'", ">|", "o.txt", "\\;"])


@given(st.lists(st.lists(_WORDS, min_size=1, max_size=4), min_size=1, max_size=4), st.data())
def test_commands_split_at_separators_outside_quotes_only(commands: list[list[str]], data: st.DataObject) -> None:
    texts = [" ".join(words) for words in commands]
    separators = [data.draw(st.sampled_from([" && ", " || ", "; ", "\n", " | "])) for _ in texts[1:]]
    line = texts[0] + "".join(sep + text for sep, text in zip(separators, texts[1:], strict=True))
    assert [segment.strip() for segment in shellrefs._split_commands(line)] == texts


_SCRIPT_PATHS = ["pkg/a.py", "pkg/b.py", "src/c.rs", "docs/d.md", "e.cfg", "tests/test_f.py"]


@st.composite
def _scripts(draw: st.DrawFn) -> tuple[list[str], set[str], set[str]]:
    """Python statements that write some paths and read others, with what they write and name."""
    statements: list[str] = []
    written: set[str] = set()
    named: set[str] = set()
    for i, path in enumerate(draw(st.lists(st.sampled_from(_SCRIPT_PATHS), unique=True, min_size=1))):
        named.add(path)
        bind = draw(st.sampled_from(["literal", "str", "Path"]))
        if bind == "literal":
            target = f"'{path}'"
        else:
            statements.append(f"v{i} = '{path}'" if bind == "str" else f"v{i} = Path('{path}')")
            target = f"v{i}"
        call = draw(st.sampled_from(["open-w", "open-a", "open-r+", "open-r", "open", "write_text", "read_text"]))
        if call in ("write_text", "read_text"):
            if bind in ("literal", "str"):  # a str has no write_text: wrap it
                target = f"Path({target})"
            statements.append(f"{target}.{call}('x')" if call == "write_text" else f"s{i} = {target}.{call}()")
            writes = call == "write_text"
        elif call == "open":
            statements.append(f"s{i} = open({target}).read()")
            writes = False
        else:
            mode = call.split("-", 1)[1]
            statements.append(f"f{i} = open({target}, '{mode}')")
            writes = mode != "r"
        if writes:
            written.add(path)
    return statements, written, named


@given(_scripts(), st.sampled_from(["heredoc", "inline"]))
@settings(max_examples=300)
def test_inline_python_edits_what_it_writes_and_reads_what_else_it_names(
    script: tuple[list[str], set[str], set[str]], form: str
) -> None:
    statements, written, named = script
    if form == "heredoc":
        command = "cd /repo && python3 - <<'PY'\nfrom pathlib import Path\n" + "\n".join(statements) + "\nPY"
    else:
        command = 'python -c "from pathlib import Path;' + ";".join(statements) + '"'
    refs = shell_references(command)
    assert len(refs) == len(set(refs))
    assert {p for p, action in refs if action == "edited"} == written
    assert {p for p, action in refs if action == "read"} == named - written


def test_tests_runs_reads_and_copies() -> None:
    refs = _refs("python -m pytest tests/test_query.py::test_union -x && grep -n union_all src/query.py | head")
    assert refs["tests/test_query.py"] == "tested"
    assert refs["src/query.py"] == "read"
    assert "union_all" not in refs  # grep's pattern is not a file
    assert _refs("cp a/conf.yaml b/conf.yaml")["b/conf.yaml"] == "created"
    assert _refs("echo x | tee out/log.txt")["out/log.txt"] == "edited"
    assert _refs("python reproduce.py")["reproduce.py"] == "ran"


# --- the fast scans agree with the full patterns they stand in for ------------------------------
def _paths_by_full_scan(text: str) -> list[str]:
    """What trying PATH_RE at every position finds (the definition the fast scan must keep)."""
    found: list[str] = []
    for match in shellrefs.PATH_RE.finditer(text):
        path = match.group(1).rstrip(".")
        if path in found or "://" in text[max(0, match.start() - 8) : match.start() + 3]:
            continue
        if path.count(".") > 0 and path.replace(".", "").isdigit():
            continue
        found.append(path)
    return found


_PATHISH = st.lists(
    st.sampled_from(
        [
            "src/",
            "a.py",
            "./x/",
            "~/",
            "../",
            "Makefile",
            "REBUILD",
            "v1.2.3",
            "http://h/a.py",
            " ",
            "\n",
            ".",
            "-",
            "~",
            "@",
            "+",
            "x",
            "é",
            "中",
            "foo.pyc",
            ".tar.gz",
            "CMakeLists.txt",
            "/",
            "b.rs",
            "c.py.bak",
            "::",
        ]
    ),
    max_size=30,
).map("".join)


@given(st.one_of(_PATHISH, st.text(max_size=80)))
@settings(max_examples=400)
def test_fast_path_scan_finds_what_the_full_pattern_finds(text: str) -> None:
    assert shellrefs.find_paths(text) == _paths_by_full_scan(text)


@given(_PATHISH, st.integers(min_value=1, max_value=4))
def test_path_scan_limit_keeps_the_first_paths(text: str, limit: int) -> None:
    assert shellrefs.find_paths(text, limit=limit) == _paths_by_full_scan(text)[:limit]


def _exit_code_by_full_scan(text: str) -> int | None:
    match = shellrefs.EXIT_RE.search(text)
    return int(match.group(1) or match.group(2)) if match else None


_OUTPUTS = st.lists(
    st.sampled_from(
        [
            "exit code",
            "Exit Code",
            "EXIT STATUS",
            "exited with code",
            "returncode",
            "<returncode>",
            "</returncode>",
            "return code",
            "status",
            "code",
            ": ",
            " ",
            "\n",
            "0",
            "1",
            "-9",
            "42",
            "passed",
            "failed",
            "errors",
            "error",
            " 3 ",
            "x",
            "中",
        ]
    ),
    max_size=25,
).map("".join)


@given(_OUTPUTS)
@settings(max_examples=400)
@example("exit code<returncode>-9</returncode>")  # the window cut the tag the full scan finds first
def test_exit_code_is_the_first_report_the_full_pattern_finds(text: str) -> None:
    assert shellrefs.exit_code(text) == _exit_code_by_full_scan(text)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("exit code -9", -9),
        ("Process exited with code: -15", -15),
        ("returncode=-2", -2),
        ("exit status 3", 3),
        ("<returncode>-9</returncode>", -9),
    ],
)
def test_a_negative_exit_code_keeps_its_sign(text: str, code: int) -> None:
    assert shellrefs.exit_code(text) == code


@given(_OUTPUTS)
@settings(max_examples=400)
def test_test_summary_counts_what_the_full_pattern_counts(text: str) -> None:
    expected = {m.group(2).rstrip("s"): int(m.group(1)) for m in shellrefs.TEST_SUMMARY_RE.finditer(text)}
    assert shellrefs.test_summary(text) == expected
