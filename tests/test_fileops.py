"""File operations named by tool calls (SPEC §7.1): editor, shell, Python, patches, named tools."""

from __future__ import annotations

import json
from typing import Any

import pytest
from corpus_events import assistant, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext._fileops import (
    FILE_OP_KINDS,
    FileOp,
    embedded_python_ops,
    extract_file_ops,
    file_ops_for_call,
)
from dashr_ext._fileops_code import patch_ops, python_ops
from dashr_ext._fileops_shell import operands, shell_ops, shell_words

# --------------------------------------------------------------------------- the recognised forms


def R(path: str) -> dict[str, str]:
    return {"op": "read", "path": path}


def W(path: str) -> dict[str, str]:
    return {"op": "write", "path": path}


def E(path: str) -> dict[str, str]:
    return {"op": "edit", "path": path}


def C(path: str) -> dict[str, str]:
    return {"op": "create", "path": path}


def D(path: str) -> dict[str, str]:
    return {"op": "delete", "path": path}


def MV(src: str, dst: str) -> dict[str, str]:
    return {"op": "move", "path": dst, "from": src}


def CP(src: str, dst: str) -> dict[str, str]:
    return {"op": "copy", "path": dst, "from": src}


def sh(command: str) -> dict[str, str]:
    return {"command": command}


def py(code: str) -> dict[str, str]:
    return {"code": code}


HEREDOC = "cat <<'EOF' > repro.py\nprint('x') > y.txt\nrm -rf important/\nEOF\npython repro.py 2>&1"

FILE_OP_ROWS = [
    # --- tools named after what they do, with a path argument
    ("read_file", {"path": "src/a.py"}, [R("src/a.py")]),
    ("view", {"file_path": "a.md"}, [R("a.md")]),
    ("open_file", {"filename": "notes.txt"}, [R("notes.txt")]),
    ("cat", {"filepath": "x.txt"}, [R("x.txt")]),
    ("ReadFile", {"path": "R.md"}, [R("R.md")]),
    ("write_file", {"path": "o.txt", "content": "open('not-me.txt')"}, [W("o.txt")]),
    ("save", {"file_path": "s.json"}, [W("s.json")]),
    ("create_file", {"path": "n.py"}, [C("n.py")]),
    ("edit_file", {"path": "e.py", "old": "a", "new": "b"}, [E("e.py")]),
    ("replace_in_file", {"file_path": "r.py"}, [E("r.py")]),
    ("patch", {"path": "p.py"}, [E("p.py")]),
    ("delete_file", {"path": "d.txt"}, [D("d.txt")]),
    ("remove", {"paths": ["a.txt", "b.txt"]}, [D("a.txt"), D("b.txt")]),
    ("rm", {"path": "c.txt"}, [D("c.txt")]),
    ("move_file", {"source": "a", "destination": "b"}, [MV("a", "b")]),
    ("copy_file", {"src": "a", "dst": "b"}, [CP("a", "b")]),
    # --- OpenHands str_replace_editor
    ("str_replace_editor", {"command": "view", "path": "/w/a.py"}, [R("/w/a.py")]),
    (
        "str_replace_editor",
        {"command": "create", "path": "/w/b.py", "file_text": "x"},
        [C("/w/b.py")],
    ),
    ("str_replace_editor", {"command": "str_replace", "path": "/w/c.py"}, [E("/w/c.py")]),
    ("str_replace_editor", {"command": "insert", "path": "/w/d.py"}, [E("/w/d.py")]),
    ("str_replace_editor", {"command": "undo_edit", "path": "/w/e.py"}, [E("/w/e.py")]),
    # --- shell commands
    ("bash", sh("cat foo.py"), [R("foo.py")]),
    ("bash", sh("cat a.txt b.txt > c.txt"), [R("a.txt"), R("b.txt"), W("c.txt")]),
    ("bash", sh("head -n 20 a.py && tail -5 b.py"), [R("a.py"), R("b.py")]),
    ("bash", sh("sed -n '1,10p' c.py | grep x"), [R("c.py")]),
    ("bash", sh("sed -i 's/a/b/' d.py e.py"), [E("d.py"), E("e.py")]),
    ("bash", sh("sed -i.bak -e 's/a/b/' f.py"), [E("f.py")]),
    ("bash", sh("echo hi | tee out.log"), [W("out.log")]),
    ("bash", sh("echo hi | tee -a log.txt"), [W("log.txt")]),
    ("bash", sh("echo x > new.txt; echo y >> new.txt"), [W("new.txt")]),
    ("bash", sh("pytest -q > out.txt 2>&1"), [W("out.txt")]),
    ("bash", sh("make &> build.log"), [W("build.log")]),
    ("bash", sh("python run.py < input.txt"), [R("input.txt")]),
    ("bash", sh(HEREDOC), [W("repro.py")]),
    ("bash", sh("cat > conf.py <<EOF\nx = 1\nEOF"), [W("conf.py")]),
    ("bash", sh("cat <<-EOF >> log.md\n\tline > not-a-file\n\tEOF"), [W("log.md")]),
    ("bash", sh("rm -rf build dist/ && rm -f a.pyc"), [D("build"), D("dist/"), D("a.pyc")]),
    ("bash", sh("mv a.py b.py"), [MV("a.py", "b.py")]),
    ("bash", sh("mv a.py b.py pkg/"), [MV("a.py", "pkg/"), MV("b.py", "pkg/")]),
    ("bash", sh("cp -r src backup"), [CP("src", "backup")]),
    ("bash", sh("touch empty.txt"), [C("empty.txt")]),
    ("bash", sh("cd /repo && cat setup.py"), [R("setup.py")]),
    ("bash", sh("test -f a || cat b; cat c\ncat d"), [R("b"), R("c"), R("d")]),
    ("bash", sh('cat "my file.txt"'), [R("my file.txt")]),
    ("bash", sh("cat it's.txt"), [R("it's.txt")]),
    ("bash", sh("nl -ba pkg/mod.py | sed -n '5,9p'"), [R("pkg/mod.py")]),
    ("bash", sh("bash -lc 'cat q.txt > r.txt'"), [R("q.txt"), W("r.txt")]),
    ("bash", sh("python -c \"open('p.txt', 'w').write('x')\""), [W("p.txt")]),
    ("bash", sh("python3 - <<'EOF'\nprint(open('q.txt').read())\nEOF"), [R("q.txt")]),
    (
        "bash",
        sh("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\nEOF"),
        [E("a.py")],
    ),
    ("bash", sh("sudo -u root tail -f /var/log/app.log"), [R("/var/log/app.log")]),
    ("bash", sh("FOO=1 timeout 30 cat slow.txt"), [R("slow.txt")]),
    ("execute_bash", sh("cd /workspace && git diff > fix.diff"), [W("fix.diff")]),
    ("shell", {"cmd": "cat x.cfg"}, [R("x.cfg")]),
    ("terminal", {"script": "rm old.log"}, [D("old.log")]),
    ("shell", {"command": ["bash", "-lc", "cat z.txt"]}, [R("z.txt")]),
    (
        "apply_patch",
        {"input": "*** Begin Patch\n*** Add File: n.py\n+x\n*** Delete File: o.py\n*** End Patch"},
        [C("n.py"), D("o.py")],
    ),
    (
        "apply_patch",
        {"input": "*** Begin Patch\n*** Update File: old.py\n*** Move to: new.py\n*** End Patch"},
        [E("old.py"), MV("old.py", "new.py")],
    ),
    # --- Python in run_cell
    ("run_cell", py("with open('data.csv') as f:\n    rows = f.read()"), [R("data.csv")]),
    (
        "run_cell",
        py("open('a.txt', 'w'); open('b.txt', 'x'); open('c.txt', 'a')"),
        [W("a.txt"), W("b.txt"), W("c.txt")],
    ),
    ("run_cell", py("open(file='k.bin', mode='rb')"), [R("k.bin")]),
    ("run_cell", py("open('m.txt', 'r+')"), [E("m.txt")]),
    (
        "run_cell",
        py("Path('p.md').read_text()\nPath('q.md').write_text('x')"),
        [R("p.md"), W("q.md")],
    ),
    ("run_cell", py("with Path('log.txt').open('a') as f:\n    pass"), [W("log.txt")]),
    (
        "run_cell",
        py("import os, shutil\nos.remove('t.tmp')\nshutil.copy('a', 'b')"),
        [D("t.tmp"), CP("a", "b")],
    ),
    (
        "run_cell",
        py("df = pd.read_csv('in.csv')\ndf.to_csv('out.csv')"),
        [R("in.csv"), W("out.csv")],
    ),
    ("run_cell", py("%%writefile script.py\nopen('inside.txt', 'w')"), [W("script.py")]),
    (
        "run_cell",
        py("%matplotlib inline\nx = open('a.txt').read()\n!cat notes.txt"),
        [R("a.txt"), R("notes.txt")],
    ),
    ("run_cell", py("%%bash\nrm scratch.txt"), [D("scratch.txt")]),
    ("run_cell", py("this is not python; open('broken.txt', 'w')"), [W("broken.txt")]),
    ("execute_code", py("print(open('e.txt').read())"), [R("e.txt")]),
    ("python", py("open('f.txt', 'wb')"), [W("f.txt")]),
    # --- negatives: no false positives
    ("bash", sh('echo "see src/foo.py for details"'), []),
    ("bash", sh("grep -rn 'open(x.py)' src/ 2>/dev/null"), []),
    ("bash", sh("python x.py > /dev/null 2>&1; python y.py >/dev/null"), []),
    ("bash", sh("make 1>&2; make >&2; make 2>&1 | tail -3"), []),
    ("bash", sh("python reproduce.py"), []),
    ("bash", sh("for f in a b; do cat $f; done"), []),
    ("bash", sh("# cat commented.txt"), []),
    ("bash", sh('cat "$(ls -t | head -1)" > "$OUT"'), []),
    ("bash", {"path": "a.txt"}, []),
    ("bash", "not json {", []),
    ("bash", "[1, 2]", []),
    ("read_file", {"query": "no path here"}, []),
    ("list_dir", {"path": "src"}, []),
    ("search_files", {"path": "src", "pattern": "TODO"}, []),
    ("run_cell", py("print('see src/foo.py')\nname = 'x.txt'\nopen(name)"), []),
    ("finish", {"message": "I edited src/a.py and wrote out.txt"}, []),
]


@pytest.mark.parametrize(("name", "arguments", "expected"), FILE_OP_ROWS)
def test_file_ops_are_extracted_mechanically_from_tool_calls(
    name: str, arguments: dict[str, Any] | str, expected: list[dict[str, str]]
) -> None:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    assert file_ops_for_call(name, raw) == expected


def test_file_ops_carry_the_seq_and_only_tool_calls_are_scanned() -> None:
    span = [
        user(1, "please cat secret.txt > out.txt"),
        assistant(2, "I will run: rm -rf / > x.txt", reasoning="maybe cat notes.md"),
        assistant(
            3,
            calls=[
                ("a", "bash", sh("cat a.py; cat a.py")),
                ("b", "read_file", {"path": "a.py"}),
                ("c", "bash", sh("echo x > b.txt")),
            ],
        ),
        tool(4, "a", "cat: > c.txt"),
        assistant(5, calls=[("d", "bash", sh("cat a.py"))]),
    ]
    assert extract_file_ops(span) == [
        {"seq": 3, "op": "read", "path": "a.py"},
        {"seq": 3, "op": "write", "path": "b.txt"},
        {"seq": 5, "op": "read", "path": "a.py"},
    ]


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(
        ["bash", "execute_bash", "run_cell", "python", "write_file", "apply_patch"]
    ),
    key=st.sampled_from(["command", "code", "path", "input"]),
    value=st.text(alphabet=st.sampled_from(list("ab./ \n'\"\\$(){}<>|&;#!%-=*`EOF")), max_size=60),
)
def test_file_op_extraction_never_fails_on_arbitrary_arguments(
    name: str, key: str, value: str
) -> None:
    for op in file_ops_for_call(name, json.dumps({key: value})):
        assert op["op"] in FILE_OP_KINDS
        assert isinstance(op["path"], str) and op["path"]


# --------------------------------------------------------------------------- shell reading


SHELL_ROWS = [
    # A quoted operator is a word, not a redirection or a separator.
    ("grep -c '>' seqs.fa", []),
    ("cat ';'", [R(";")]),
    ("tr '<' '>' < in.txt > out.txt", [R("in.txt"), W("out.txt")]),
    # "#" starts a comment only at the start of a word.
    ("sed -i s#a#b# f.txt", [E("f.txt")]),
    ("echo a#b > f.txt", [W("f.txt")]),
    ('echo "# Title" > README.md', [W("README.md")]),
    ("cat a.txt # > not-written.txt", [R("a.txt")]),
    # An fd number glued to a redirection is not a word; a separate one is.
    ("cat a.txt 2>/dev/null", [R("a.txt")]),
    ("echo 2 > two.txt", [W("two.txt")]),
    # Quotes, escapes and continuations are read as a shell reads them.
    ("cat x\\ y.txt", [R("x y.txt")]),
    ("cat a.txt \\\n  b.txt", [R("a.txt"), R("b.txt")]),
    ('cat "\\$HOME"', []),
    ("rm $(find . -name '*.pyc') && cat `which tool`", []),
    ("python -c \"\nimport os\nos.remove('r.txt')\n\"", [D("r.txt")]),
    ("cat <<EOF > w.txt\n$(rm x.txt)\nEOF", [W("w.txt")]),
]


@pytest.mark.parametrize(("command", "expected"), SHELL_ROWS)
def test_shell_commands_are_read_as_a_shell_reads_them(
    command: str, expected: list[dict[str, str]]
) -> None:
    assert file_ops_for_call("bash", json.dumps(sh(command))) == expected


def test_shell_words_dequote_and_drop_operators() -> None:
    assert shell_words("-a 'my notes.md' > x") == ["-a", "my notes.md", "x"]


def test_operands_skip_options_and_their_values() -> None:
    assert operands(["-n", "20", "-q", "a.py", "--", "-b.py"], frozenset({"-n"})) == [
        "a.py",
        "-b.py",
    ]


def test_a_long_multi_line_quoted_script_is_read_whole() -> None:
    script = 'python -c "\n' + "x = 1\n" * 20_000 + "open('out.txt', 'w')\n\"" + " > log.txt"
    assert shell_ops(script) == [FileOp("write", "out.txt"), FileOp("write", "log.txt")]


# --------------------------------------------------------------------------- Python and patches


def test_python_ops_are_in_source_order() -> None:
    code = "Path('b.txt').write_text('x')\nwith open('a.txt') as f:\n    os.remove('c.txt')"
    assert python_ops(code) == [
        FileOp("write", "b.txt"),
        FileOp("read", "a.txt"),
        FileOp("delete", "c.txt"),
    ]


def test_embedded_python_is_found_in_a_heredoc_and_a_printf_script() -> None:
    heredoc = "cat <<'EOF' > fix.py\nsrc = open('pkg/mod.py').read()\nopen('pkg/mod.py', 'w')\nEOF"
    assert embedded_python_ops(heredoc) == [
        FileOp("read", "pkg/mod.py"),
        FileOp("write", "pkg/mod.py"),
    ]
    printf = "printf \"x = open('a.py').read()\\nopen('a.py', 'w').write(x)\" > p.py"
    assert embedded_python_ops(printf) == [FileOp("read", "a.py"), FileOp("write", "a.py")]
    assert embedded_python_ops("img = Image.open('a.png'); reopen('b.txt')") == []


def test_patch_ops_follow_the_envelope_headers() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: new.py\n+x\n*** Update File: old.py\n"
        "*** Move to: moved.py\n@@\n-a\n+b\n*** Delete File: gone.py\n*** End Patch"
    )
    assert patch_ops(patch) == [
        FileOp("create", "new.py"),
        FileOp("edit", "old.py"),
        FileOp("move", "moved.py", "old.py"),
        FileOp("delete", "gone.py"),
    ]


def test_parsing_an_agents_python_never_warns() -> None:
    import warnings

    code = 'import re\nre.sub("\\!", "", open("notes.txt").read())\n'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops = python_ops(code)
    assert [str(w.message) for w in caught] == []
    assert [op.path for op in ops] == ["notes.txt"]
