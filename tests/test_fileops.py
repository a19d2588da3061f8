"""File operations named by tool calls (SPEC §7.1): editor, shell, Python, patches, named tools."""

from __future__ import annotations

import json
from typing import Any

import pytest
from corpus_events import assistant, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext.fileops import FILE_OP_KINDS, extract_file_ops, file_ops_for_call

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
