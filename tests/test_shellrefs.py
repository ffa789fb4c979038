"""Reading agents' text: paths, the files a shell command acts on, exit codes and test summaries."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from contextkeeper import shellrefs
from contextkeeper.shellrefs import shell_references


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
