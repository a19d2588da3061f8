"""The names a span's work touched, and the names block a checkpoint carries."""

from __future__ import annotations

import json
import time
from typing import Any

from corpus_events import assistant, make_event, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext._events import Event
from dashr_ext._meter import estimate_chars_tokens
from dashr_ext._names import (
    WorkName,
    collect_names,
    merge_names,
    names_from_data,
    names_to_data,
    occurs,
    render_names,
)


def _by_name(names: list[WorkName]) -> dict[tuple[str, str], WorkName]:
    return {(n.kind, n.name): n for n in names}


def _bash(seq: int, command: str, call_id: str | None = None) -> Event:
    return assistant(seq, "", [(call_id or f"c{seq}", "bash", {"command": command})])


def _editor(seq: int, call_id: str, **args: Any) -> Event:
    return assistant(seq, "", [(call_id, "str_replace_editor", args)])


def _checkpoint(seq: int, text: str) -> Event:
    message = {
        "id": f"m{seq}",
        "role": "user",
        "source": {"kind": "compact-checkpoint", "checkpoint": "c1"},
        "content": [{"type": "text", "text": text}],
    }
    return make_event(seq, "user/message", message)


# --------------------------------------------------------------------------- collecting


def test_a_script_created_then_run_is_one_file_with_both_ops() -> None:
    events = [
        _bash(0, "cat <<'EOF' > reproduce.py\nimport sys\nprint(1)\nEOF"),
        tool(1, "c0", ""),
        _bash(2, "cd /testbed && python reproduce.py"),
        tool(3, "c2", "Traceback (most recent call last):\nTypeError: bad operand"),
        _bash(4, "python3 reproduce.py 2>&1 | tail -5"),
    ]
    names = _by_name(collect_names(events))
    script = names[("file", "reproduce.py")]
    assert script.ops == ("created", "ran")
    assert script.count == 3
    assert script.last_seq == 4
    assert names[("error", "TypeError")].last_seq == 3


def test_a_heredoc_body_is_not_read_as_commands() -> None:
    events = [_bash(0, "cat > run.sh <<EOF\npython inner.py\nEOF\nbash run.sh")]
    names = _by_name(collect_names(events))
    assert ("file", "inner.py") not in names
    assert names[("file", "run.sh")].ops == ("created", "ran")


def test_test_runners_name_the_test_files_they_run() -> None:
    events = [
        _bash(0, "python -m pytest tests/test_query.py::test_union -x -k union"),
        _bash(1, "pytest -q tests/queries/"),
        _bash(2, "python -c 'import x'"),
        _bash(3, "timeout 60 ./runtests.sh"),
    ]
    names = _by_name(collect_names(events))
    assert names[("file", "tests/test_query.py")].ops == ("ran",)
    assert names[("file", "tests/queries/")].ops == ("ran",)
    assert names[("file", "./runtests.sh")].ops == ("ran",)
    assert not [n for n in names.values() if n.name in ("x", "union", "60")]


def test_editor_calls_give_files_and_the_code_they_define_or_change() -> None:
    path = "/workspace/repo/query.py"
    source = (
        "class QuerySet:\n"
        "    def _filter_or_exclude(self, negate, args):\n"
        "        clone = self._chain()\n"
        "        return clone\n"
    )
    view = "Here's the result of running `cat -n`:\n" + "".join(
        f"{i:6}\t{line}\n" for i, line in enumerate(source.splitlines(), 1)
    )
    events = [
        _editor(0, "v", command="view", path=path),
        tool(1, "v", view, name="str_replace_editor"),
        _editor(
            2,
            "e",
            command="str_replace",
            path=path,
            old_str="        clone = self._chain()",
            new_str="        clone = self._chain()\n        clone.query.clear_ordering()",
        ),
        _editor(
            3,
            "n",
            command="create",
            path="/workspace/repo/test_x.py",
            file_text="def test_union_ordering():\n    pass\n\nclass Helper:\n    pass\n",
        ),
    ]
    names = _by_name(collect_names(events))
    assert names[("file", path)].ops == ("read", "edited")
    assert names[("symbol", "QuerySet._filter_or_exclude")].ops == ("changed",)
    assert names[("symbol", "test_union_ordering")].ops == ("defined",)  # not also "used"
    assert names[("symbol", "Helper")].ops == ("defined",)
    assert names[("file", "/workspace/repo/test_x.py")].ops == ("created",)


def test_a_function_whose_definition_an_edit_rewrites_is_changed() -> None:
    events = [
        _editor(
            0,
            "e",
            command="str_replace",
            path="m.py",
            old_str="def area(r):\n    return r",
            new_str="def area(r):\n    return 3.14 * r * r\n\ndef perimeter(r):\n    return r",
        )
    ]
    names = _by_name(collect_names(events))
    assert names[("symbol", "area")].ops == ("changed",)
    assert names[("symbol", "perimeter")].ops == ("defined",)


def test_exceptions_are_kept_as_written_in_the_task_results_and_what_the_agent_writes() -> None:
    events = [
        user(0, "Fix the ValueError raised by parse()"),
        assistant(1, "This looks like a django.core.exceptions.FieldError.", [("a", "bash", {})]),
        tool(2, "a", "KeyboardInterrupt\nDeprecationWarning: x\nErrorHandler is fine"),
        _bash(3, "python -c 'raise LookupError'"),
    ]
    names = {n.name for n in collect_names(events) if n.kind == "error"}
    assert names == {
        "ValueError",
        "django.core.exceptions.FieldError",
        "KeyboardInterrupt",
        "DeprecationWarning",
        "LookupError",
    }
    symbols = [n.name for n in collect_names(events) if n.kind == "symbol"]
    assert symbols == ["ErrorHandler"]  # an exception is never also a code name


def test_the_code_and_commands_of_tool_calls_give_the_identifiers_they_use() -> None:
    script = (
        "import django\nfrom django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['app'])\ndjango.setup()\n"
        "with connection.schema_editor() as schema_editor:\n    schema_editor.create_model(M)\n"
    )
    events = [
        _bash(0, f"cat <<'EOF' > repro.py\n{script}EOF\npython repro.py"),
        assistant(1, "", [("r", "run_cell", {"code": "df = load_frame(path)\ndf.groupby('k')"})]),
        _editor(2, "e", command="str_replace", path="m.py", old_str="x = 1", new_str="x = get_x()"),
    ]
    names = _by_name(collect_names(events))
    for used in (
        "settings.configure",
        "INSTALLED_APPS",
        "django.setup",
        "connection.schema_editor",
        "schema_editor",
        "schema_editor.create_model",
        "load_frame",
        "df.groupby",
        "get_x",
    ):
        assert names[("symbol", used)].ops == ("used",), used
    assert ("symbol", "str_replace") not in names  # the editor's subcommand, not code
    assert ("symbol", "repro.py") not in names and ("file", "repro.py") in names


def test_only_distinctive_identifiers_are_code_names() -> None:
    text = (
        "for item in items: print(len(item)); x_ = os.path.join(a, b); ok = is_ok and "
        "e.g. QuerySet and URLs, APIs, HTTPResponse, THOUGHT, Django, ab, a_b, _meta, "
        "__main__, __name__, None, setup.py, TypeError, self.x, path/to_dir/file"
    )
    names = {n.name for n in collect_names([_bash(0, text)]) if n.kind == "symbol"}
    assert names == {
        "os.path.join",
        "is_ok",
        "QuerySet",
        "HTTPResponse",
        "a_b",
        "_meta",
        "__main__",
    }


def test_the_task_names_the_commands_and_code_it_asks_for() -> None:
    task = (
        "The cycle_data command fails in QuerySet.delete; cycle_data calls it per chunk.\n"
        "When done, run:\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\n```"
    )
    names = _by_name(collect_names([user(0, task)]))
    command = names[("symbol", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    assert command.ops == ("task", "task code") and command.count == 1
    assert names[("symbol", "QuerySet.delete")].ops == ("task",)
    assert names[("symbol", "cycle_data")].count == 2  # how often the task writes it
    # A name the task writes as code ranks as if written last; its prose names do not.
    recent = [WorkName("symbol", f"recent_{i}", 1, 50 + i, ("mentioned",)) for i in range(20)]
    block = render_names(
        [*names.values(), *recent], budget_tokens=40, count_tokens=estimate_chars_tokens
    )
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in block and "cycle_data" not in block


def test_the_agents_text_names_code_and_paths_and_a_cd_names_its_directory() -> None:
    events = [
        assistant(
            0,
            "The bug is in `Collector.can_fast_delete` of django/db/models/deletion.py, not in "
            "/usr/lib/python3.9/site-packages/x/y.py; see /testbed/docs/conf.py in `/srv`.",
            [("c", "bash", {"command": "cd /testbed && ls && cd tests/queries"})],
        ),
        assistant(1, "", [("w", "bash", {"command": "echo x > django/db/models/deletion.py"})]),
    ]
    names = _by_name(collect_names(events))
    assert names[("symbol", "Collector.can_fast_delete")].ops == ("mentioned",)
    assert names[("file", "/testbed/docs/conf.py")].ops == ("mentioned",)
    assert names[("file", "/srv")].ops == ("mentioned",)
    assert not [n for n in names.values() if "site-packages" in n.name]  # a library file
    assert names[("file", "/testbed")].ops == ("cd",)
    assert names[("file", "tests/queries")].ops == ("cd",)
    # Written after being only mentioned: a new file, not an edit of a known one.
    assert names[("file", "django/db/models/deletion.py")].ops == ("mentioned", "created")


def test_tracebacks_and_failure_lines_name_code_and_the_rest_of_a_result_is_seen() -> None:
    result = (
        "def helper_fn(): pass\n"
        "Traceback (most recent call last):\n"
        '  File "/testbed/repro.py", line 9, in run_check\n'
        "    qs.order_by_field(related_name)\n"
        "AttributeError: 'QuerySet' object has no attribute 'order_by_field'\n"
        "FAILED tests/test_q.py::TestQ::test_union_order - assert 1 == 2\n"
    )
    names = _by_name(collect_names([_bash(0, "python repro.py", "c"), tool(1, "c", result)]))
    for failing in ("run_check", "qs.order_by_field", "related_name", "test_union_order"):
        assert names[("symbol", failing)].ops == ("traceback",), failing
    assert names[("symbol", "helper_fn")].ops == ("seen",)
    assert names[("error", "AttributeError")].last_seq == 1


def test_the_packages_own_markers_are_not_names() -> None:
    text = 'originals: history_read("c4") or dashr_compaction_archive["c4"]'
    assert collect_names([assistant(0, text)]) == []


def test_a_checkpoint_in_the_span_is_not_read_again() -> None:
    events = [
        _checkpoint(0, "## Names\nFiles: old_script.py (created)\nErrors: KeyError"),
        _bash(1, "python new_script.py"),
    ]
    assert [n.name for n in collect_names(events)] == ["new_script.py"]


def test_names_from_a_corpus_style_bash_session() -> None:
    command = "sed -i 's/a/b/' django/db/models/query.py && python reproduce_issue.py"
    events = [_bash(0, "nl -ba django/db/models/query.py | sed -n '1,20p'"), _bash(1, command)]
    names = _by_name(collect_names(events))
    assert names[("file", "django/db/models/query.py")].ops == ("read", "edited")
    assert names[("file", "reproduce_issue.py")].ops == ("ran",)


def test_a_megabyte_span_is_collected() -> None:
    chunk = "x = 1\n" * 2000
    events: list[Event] = []
    for i in range(0, 100, 2):
        events.append(_bash(i, f"cat <<'EOF' > s{i}.py\ndef f{i}():\n{chunk}EOF\npython s{i}.py"))
        events.append(tool(i + 1, f"c{i}", "Traceback\nAttributeError: no\n" + chunk))
    start = time.perf_counter()
    names = collect_names(events)
    elapsed = time.perf_counter() - start
    assert sum(len(e.message.text) for e in events) > 500_000
    assert {n.name for n in names if n.kind == "error"} == {"AttributeError"}
    assert len([n for n in names if n.kind == "file"]) == 50
    print(f"1 MB span: {elapsed:.3f}s")  # shown with -s; never asserted


# --------------------------------------------------------------------------- merging, data


def test_merge_adds_counts_keeps_the_latest_seq_and_joins_ops() -> None:
    old = [WorkName("file", "a.py", 2, 10, ("created", "ran")), WorkName("error", "KeyError", 1, 3)]
    new = [WorkName("file", "a.py", 1, 20, ("edited", "ran")), WorkName("symbol", "f", 1, 21)]
    merged = _by_name(merge_names(old, new))
    assert merged[("file", "a.py")] == WorkName("file", "a.py", 3, 20, ("created", "ran", "edited"))
    assert merged[("error", "KeyError")] == old[1]
    assert [n.name for n in merge_names(old, new)] == ["a.py", "KeyError", "f"]


def test_names_round_trip_through_json() -> None:
    names = [
        WorkName("file", "a.py", 2, 10, ("created", "ran")),
        WorkName("error", "E1Error", 1, 3),
    ]
    data = json.loads(json.dumps(names_to_data(names)))
    assert names_from_data(data) == names


def test_a_checkpoint_stores_only_the_best_ranked_names_in_their_order() -> None:
    many = [WorkName("symbol", f"name_{i}", 1, i, ("used",)) for i in range(600)]
    data = names_to_data(many)
    assert 100 <= len(data) < 600
    kept = [d["name"] for d in data]
    assert kept == [f"name_{i}" for i in range(600 - len(data), 600)]  # the latest, in order


def test_malformed_names_from_a_foreign_log_are_skipped() -> None:
    good = {"kind": "file", "name": "a.py", "count": 1, "lastSeq": 4, "ops": ["read"]}
    bad: list[Any] = [
        None,
        "a.py",
        {"kind": "dir", "name": "a", "count": 1, "lastSeq": 1},
        {"kind": "file", "name": 3, "count": 1, "lastSeq": 1},
        {"kind": "file", "name": "b.py", "count": True, "lastSeq": 1},
        {"kind": "file", "name": "b.py", "count": 0, "lastSeq": 1},
        {"kind": "file", "name": "b.py", "count": 1, "lastSeq": -1},
        {"kind": "file", "name": "b.py", "count": 1, "lastSeq": 1, "ops": "read"},
        {"kind": "file", "name": "two\nlines", "count": 1, "lastSeq": 1},
    ]
    assert names_from_data([*bad, good]) == [WorkName("file", "a.py", 1, 4, ("read",))]
    assert names_from_data({"names": [good]}) == []
    assert names_from_data(None) == []


# --------------------------------------------------------------------------- rendering


def _names() -> list[WorkName]:
    return [
        WorkName("file", "reproduce_issue.py", 4, 30, ("created", "ran")),
        WorkName("file", "django/db/models/query.py", 3, 28, ("read", "edited")),
        WorkName("file", "docs/old.txt", 1, 2, ("read",)),
        WorkName("error", "TypeError", 2, 29),
        WorkName("symbol", "QuerySet._filter_or_exclude", 1, 28, ("changed",)),
    ]


def test_the_block_lists_files_errors_and_code_as_written() -> None:
    block = render_names(_names(), budget_tokens=500, count_tokens=estimate_chars_tokens)
    assert block.splitlines() == [
        "## Names",
        "Files: reproduce_issue.py (created, ran) ×4; django/db/models/query.py (read, edited) ×3;"
        " docs/old.txt (read)",
        "Errors: TypeError",
        "Code changed: QuerySet._filter_or_exclude",
    ]


def test_code_names_go_on_one_dense_line_per_op_and_files_show_only_work() -> None:
    names = [
        WorkName("symbol", "settings.configure", 3, 10, ("mentioned", "used")),
        WorkName("symbol", "INSTALLED_APPS", 1, 10, ("used",)),
        WorkName("symbol", "area", 1, 10, ("defined", "used")),
        WorkName("symbol", "COMPLETE_TASK_AND_SUBMIT", 1, 0, ("task",)),
        WorkName("symbol", "run_check", 1, 10, ("traceback",)),
        WorkName("symbol", "helper_fn", 1, 10, ("seen",)),
        WorkName("symbol", "is_summary", 1, 10, ("mentioned",)),
        WorkName("file", "docs/conf.py", 1, 10, ("mentioned", "task")),
        WorkName("file", "/testbed", 2, 10, ("cd",)),
    ]
    block = render_names(names, budget_tokens=500, count_tokens=estimate_chars_tokens)
    assert block.splitlines()[1:] == [
        "Files: /testbed (cd) ×2; docs/conf.py",
        "Code defined: area",
        "Code used: settings.configure, INSTALLED_APPS",  # touched more: first
        "Code in the task: COMPLETE_TASK_AND_SUBMIT",
        "Code in tracebacks: run_check",
        "Code mentioned: is_summary",
        "Code seen in results: helper_fn",
    ]


def test_a_name_within_a_listed_longer_name_is_not_listed_again() -> None:
    names = [
        WorkName("symbol", "connection.schema_editor", 2, 10, ("used",)),
        WorkName("symbol", "schema_editor", 1, 9, ("used",)),
        WorkName("symbol", "editor_state", 1, 9, ("used",)),
        WorkName("file", "/testbed/reproduce.py", 2, 10, ("ran",)),
        WorkName("file", "reproduce.py", 1, 9, ("ran",)),
    ]
    block = render_names(names, budget_tokens=500, count_tokens=estimate_chars_tokens)
    lines = dict(line.split(": ", 1) for line in block.splitlines()[1:])
    assert lines["Code used"].split(", ") == ["connection.schema_editor", "editor_state"]
    assert lines["Files"] == "/testbed/reproduce.py (ran) ×2"


def test_what_was_done_to_a_name_outranks_seeing_it_and_the_task_stays_ranked() -> None:
    names = [
        WorkName("symbol", "seen_name", 1, 100, ("seen",)),
        WorkName("symbol", "traced_name", 1, 100, ("traceback",)),
        WorkName("symbol", "used_name", 1, 100, ("used",)),
        WorkName("symbol", "old_used", 1, 0, ("used",)),
        WorkName("symbol", "TASK_COMMAND", 1, 0, ("task",)),
        WorkName("symbol", "OLD_MENTION", 1, 0, ("mentioned",)),
        *(WorkName("symbol", f"filler_{i}", 1, i, ("mentioned",)) for i in range(1, 41)),
        *(WorkName("symbol", f"result_{i}", 1, i, ("seen",)) for i in range(41, 100)),
    ]
    block = render_names(names, budget_tokens=40, count_tokens=estimate_chars_tokens)
    assert "used_name" in block and "TASK_COMMAND" in block  # the task: as if mid-span
    assert "filler_40" in block and "result_99" not in block
    assert "seen_name" not in block and "old_used" not in block and "OLD_MENTION" not in block


def test_names_already_visible_are_left_out() -> None:
    visible = "$ python reproduce_issue.py\nTypeError: bad\n"
    block = render_names(
        _names(), budget_tokens=500, count_tokens=estimate_chars_tokens, visible_text=visible
    )
    assert "reproduce_issue.py" not in block and "TypeError" not in block
    assert "django/db/models/query.py" in block
    # Only whole names count: a longer name that contains one does not hide it.
    block = render_names(
        _names(),
        budget_tokens=500,
        count_tokens=estimate_chars_tokens,
        visible_text="my_reproduce_issue.py MyTypeError",
    )
    assert "reproduce_issue.py (created" in block and "TypeError" in block


def test_a_small_budget_drops_the_lowest_ranked_names_first() -> None:
    full = render_names(_names(), budget_tokens=500, count_tokens=estimate_chars_tokens)
    small = render_names(
        _names(), budget_tokens=estimate_chars_tokens(full) - 5, count_tokens=estimate_chars_tokens
    )
    assert small and estimate_chars_tokens(small) <= estimate_chars_tokens(full) - 5
    assert "docs/old.txt" not in small  # old and read once: ranked last
    assert "reproduce_issue.py" in small


def test_nothing_to_say_or_no_room_is_empty() -> None:
    assert render_names([], budget_tokens=500, count_tokens=estimate_chars_tokens) == ""
    assert render_names(_names(), budget_tokens=3, count_tokens=estimate_chars_tokens) == ""
    assert render_names(_names(), budget_tokens=0, count_tokens=estimate_chars_tokens) == ""
    everything = " ".join(n.name for n in _names())
    assert (
        render_names(
            _names(),
            budget_tokens=500,
            count_tokens=estimate_chars_tokens,
            visible_text=everything,
        )
        == ""
    )


def test_occurs_needs_a_whole_name() -> None:
    assert occurs("a.py", "run a.py now") and occurs("a.py", "/x/a.py")
    assert not occurs("a.py", "ba.py") and not occurs("a.py", "a.pyc")
    assert occurs("f", "xf f") and not occurs("f", "")


# --------------------------------------------------------------------------- properties

_NAME_TEXT = st.from_regex(r"[a-z][a-z0-9_./]{0,20}", fullmatch=True)
_WORK_NAMES = st.lists(
    st.builds(
        WorkName,
        kind=st.sampled_from(["file", "error", "symbol"]),
        name=_NAME_TEXT,
        count=st.integers(1, 50),
        last_seq=st.integers(0, 1000),
        ops=st.lists(st.sampled_from(["read", "created", "edited", "ran"]), unique=True).map(tuple),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(names=_WORK_NAMES, budget=st.integers(0, 400), visible=st.text(max_size=200))
def test_the_block_always_fits_never_repeats_visible_names_and_is_deterministic(
    names: list[WorkName], budget: int, visible: str
) -> None:
    block = render_names(
        names, budget_tokens=budget, count_tokens=estimate_chars_tokens, visible_text=visible
    )
    assert estimate_chars_tokens(block) <= budget or block == ""
    listed = block.split("\n", 1)[1] if block else ""
    for n in names:
        if occurs(n.name, visible):
            parts = listed.replace(": ", "; ").replace(", ", "; ").split("; ")
            entries = [e.split(" (")[0].split(" ×")[0] for e in parts]
            assert n.name not in entries
    again = render_names(
        list(names), budget_tokens=budget, count_tokens=estimate_chars_tokens, visible_text=visible
    )
    assert again == block


@settings(max_examples=100, deadline=None)
@given(a=_WORK_NAMES, b=_WORK_NAMES)
def test_merge_keeps_every_name_once_and_sums_counts(a: list[WorkName], b: list[WorkName]) -> None:
    merged = merge_names(a, b)
    keys = [(n.kind, n.name) for n in merged]
    assert len(keys) == len(set(keys)) == len({(n.kind, n.name) for n in [*a, *b]})
    total = {k: 0 for k in keys}
    for n in [*a, *b]:
        total[(n.kind, n.name)] += n.count
    assert all(n.count == total[(n.kind, n.name)] for n in merged)
    assert names_from_data(names_to_data(merged)) == merged
