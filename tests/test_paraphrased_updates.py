"""Updates said in other words, content-free status lines and repeated values (SPEC §5.2).

Each test plants one statement and its update (or its trap) in a short span and reads the
extractive summary: the superseded statement is gone, the current one stays, a distinct
item that merely looks alike stays too.
"""

from __future__ import annotations

from collections.abc import Sequence

from corpus_events import assistant, tool, user

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._events import Event
from dashr_ext._meter import TokenMeter
from dashr_ext._summarizers import ExtractiveSummarizer
from dashr_ext._summarizers.base import SummaryRequest

METER = TokenMeter()


def run(span: Sequence[Event], previous: str | None = None, budget: int = 4096) -> str:
    request = SummaryRequest(span, previous, budget, [], METER.count_text)
    return ExtractiveSummarizer().summarize(request).text


def chat(*turns: tuple[str, str]) -> list[Event]:
    """Events of (role, text) turns, seqs from 1."""
    make = {"user": user, "assistant": assistant}
    return [make[role](seq, text) for seq, (role, text) in enumerate(turns, start=1)]


def test_an_explicit_change_of_plan_renames_the_one_value_of_the_same_head_and_shape() -> None:
    text = run(
        chat(
            ("user", "The database timeout is 82 s."),
            ("assistant", "Noted."),
            ("user", "And the API timeout is 230 ms."),
            ("assistant", "Noted."),
            ("user", "Scratch that, the query timeout is 84 s."),
            ("assistant", "Got it."),
        )
    )
    assert "84 s" in text and "82 s" not in text
    assert "230 ms" in text  # another unit: another timeout


def test_a_new_label_without_a_change_of_plan_is_a_new_item() -> None:
    text = run(
        chat(
            ("user", "The project budget is $800."),
            ("assistant", "Noted."),
            ("user", "The travel budget is $450."),
            ("assistant", "Noted."),
        )
    )
    assert "$800" in text and "$450" in text


def test_the_rule_about_a_subject_replaces_that_rule_only() -> None:
    text = run(
        chat(
            ("user", "Always ask before deleting a branch."),
            ("assistant", "Sure."),
            ("user", "Quick update: the QA sign-off deadline changed to 2027-07-22."),
            ("assistant", "Noted."),
            ("user", "Change of plan on the rule about a branch: never push straight to main."),
            ("assistant", "Understood."),
        )
    )
    assert "never push straight to main" in text
    assert "deleting a branch" not in text
    assert "2027-07-22" in text  # a rule-like update about something else stays


def test_a_rule_about_a_subject_no_rule_is_about_replaces_nothing() -> None:
    text = run(
        chat(
            ("user", "Never deploy on Fridays."),
            ("assistant", "Sure."),
            ("user", "Change of plan on the rule about invoices: always attach the PDF."),
            ("assistant", "Understood."),
        )
    )
    assert "Never deploy on Fridays" in text and "always attach the PDF" in text


def test_instead_of_names_what_it_replaces() -> None:
    text = run(
        chat(
            ("user", "Please fix the flaky test."),
            ("assistant", "Noting your preference for pytest over unittest."),
            ("user", "Actually, instead of over unittest, let's switch to type hints everywhere."),
            ("assistant", "Will do."),
        )
    )
    assert "type hints everywhere" in text and "pytest over unittest" not in text


def test_a_task_switch_replaces_the_task_not_a_rule_or_a_value() -> None:
    text = run(
        chat(
            ("user", "Do not edit anything under vendor/, please."),
            ("assistant", "GOAL STATE: Harden the CSV importer."),
            ("user", "Use $9,525 as the project budget."),
            ("assistant", "Let's instead split the thumbnail worker."),
            ("user", "ok"),
            ("assistant", "On it."),
        )
    )
    assert "split the thumbnail worker" in text
    assert "Harden the CSV importer" not in text
    assert "vendor/" in text and "$9,525" in text


def test_a_change_of_plan_by_the_assistant_does_not_replace_the_users_decision() -> None:
    text = run(
        chat(
            ("user", "Change of plan: forget the earlier task, we split the invoice exporter."),
            ("assistant", "Change of plan on the rule about a branch: tag the on-call engineer."),
            ("user", "ok"),
            ("assistant", "Sure."),
        )
    )
    assert "split the invoice exporter" in text


def test_time_words_are_not_a_shared_subject() -> None:
    text = run(
        chat(
            (
                "user",
                "Ops rewrote the rule this morning: never deploy after 14:00 UTC on a Thursday.",
            ),
            ("assistant", "Noted."),
            ("user", "Infra decision from this morning: we move the deployment to eu-central-1."),
            ("assistant", "Noted."),
        )
    )
    assert "never deploy after 14:00 UTC on a Thursday" in text and "eu-central-1" in text


def test_a_status_that_says_only_that_a_part_is_done_takes_no_slot() -> None:
    text = run(
        chat(
            ("user", "Clean up the legacy endpoints."),
            ("assistant", "That part is done."),
            ("user", "ok"),
            ("assistant", "That part is finished, I deleted the legacy endpoints."),
            ("user", "ok"),
            ("assistant", "Sure."),
        )
    )
    assert "I deleted the legacy endpoints" in text
    assert "Assistant (seq 2)" not in text


def test_a_constraint_the_assistant_found_outlives_its_record_of_work() -> None:
    found = "Reading the callers, there is a hard constraint here: settle() stays unchanged."
    span = [user(1, "Speed up the billing job."), assistant(2, found)]
    for n in range(3, 40, 2):
        span.append(
            assistant(n, f"Checked step {n}.", [(f"c{n}", "bash", {"command": f"ls d{n}"})])
        )
        span.append(tool(n + 1, f"c{n}", f"file_{n}.py"))
    first = run(span, budget=200)
    assert "settle() stays unchanged" in first
    again = run([user(50, "ok"), assistant(51, "Sure.")], previous=first, budget=200)
    assert "settle() stays unchanged" in again  # carried at the rank it was kept at


def test_a_value_a_kept_statement_shows_is_not_repeated_in_the_values_line() -> None:
    text = run(chat(("user", "Update: the cap is now $450."), ("assistant", "Understood.")))
    assert text.count("$450") == 1


def test_an_update_replaces_the_one_carried_anchor_of_its_shape() -> None:
    previous = "## Critical Context\n- Keywords — values: `702 MB`, `$40`\n"
    text = run(
        [user(1, "ok"), assistant(2, "Switch the upload cap to 858 MB."), user(3, "ok")],
        previous=previous,
    )
    assert "858 MB" in text and "702 MB" not in text and "$40" in text


def test_a_checkpoint_holds_to_its_spans_characters_per_token() -> None:
    """A dense span (ids, hosts) gives its prose checkpoint fewer characters per token."""
    messages: list[dict[str, object]] = []
    for n in range(60):
        messages.append(
            {"role": "user", "content": f"Note {n}: host ro-{n}.x{n}q.internal, id 9f{n}e2a7c."}
        )
        messages.append({"role": "assistant", "content": f"Recorded ro-{n}.x{n}q.internal."})
    with Dashr.create(config=CompactionConfig(auto=False), in_memory=True) as d:
        d.record_openai(messages)
        d.config = CompactionConfig(auto=False, retain_tokens=40, max_summary_tokens=300)
        assert d.compact() is not None
        [node] = [m for m in d.request_messages() if "checkpoint c" in str(m.get("content"))]
        text = str(node["content"])
        assert d.meter.count_text(text) <= 300
        assert len(text) * 0.32 <= 300 + 8  # in characters too, at the capped density


def test_switch_or_change_the_subject_to_a_value_replaces_the_earlier_value() -> None:
    text = run(
        chat(
            ("assistant", "Change of plan: use v5.35.9 for the release."),
            ("user", "Ok."),
            ("assistant", "Switch the release to v9.34.2."),
            ("user", "Fine."),
        )
    )
    assert "v9.34.2" in text and "v5.35.9" not in text


def test_switch_the_next_step_replaces_the_next_step_said_before() -> None:
    for said_by in ("assistant", "user"):
        text = run(
            chat(
                (said_by, "NEXT STEP: Draft the migration notes."),
                ("assistant" if said_by == "user" else "user", "Ok."),
                ("user", "Ok. Switch the next step: backfill the ledger table."),
                ("assistant", "Will do."),
            )
        )
        assert "backfill the ledger table" in text
        assert "migration notes" not in text, said_by


def test_a_later_next_label_replaces_the_earlier_one() -> None:
    text = run(
        chat(
            ("user", "Ok. NEXT: Wire up the rollout flag."),
            ("assistant", "Noted. Moving on to the next part."),
            ("user", "NEXT: Profile the slow export query."),
            ("assistant", "Noted."),
        )
    )
    assert "Profile the slow export query" in text and "rollout flag" not in text


def test_a_message_that_only_states_a_value_is_replaced_by_its_update() -> None:
    text = run(
        chat(
            ("user", "Fix the flaky upload test."),
            ("assistant", "On it."),
            ("user", "Thanks. Heads up, the project budget: $5,700."),
            ("assistant", "Noted."),
            ("user", "Quick update: keep the project's budget under $6,175."),
            ("assistant", "Noted."),
        )
    )
    assert "$6,175" in text and "$5,700" not in text
    assert "flaky upload test" in text  # the task itself stays


def test_a_done_step_that_moved_something_replaces_no_other_done_step() -> None:
    text = run(
        chat(
            ("assistant", "DONE: Deleted the legacy endpoints."),
            ("user", "Good."),
            ("assistant", "DONE: Moved the cron jobs to the scheduler."),
            ("user", "Good."),
        )
    )
    assert "Deleted the legacy endpoints" in text and "cron jobs to the scheduler" in text


def test_a_statement_said_again_with_a_lead_in_is_kept_once() -> None:
    text = run(
        chat(
            ("user", "Fix the flaky upload test."),
            ("assistant", "Sure."),
            ("user", "Also: And never push straight to main."),
            ("assistant", "Sure."),
            ("user", "And never push straight to main."),
            ("assistant", "Understood."),
        )
    )
    assert text.lower().count("never push straight to main") == 1


def test_a_path_at_the_end_of_a_sentence_is_read_without_the_full_stop() -> None:
    from dashr_ext._summarizers.extractive.anchors import typed_literals

    (found,) = typed_literals("Also: switch logs to /srv/nker6/logs.")
    assert (found.type, found.value) == ("path", "/srv/nker6/logs")
    assert [lit.value for lit in typed_literals("Run ./build.sh, then edit src/app.py.")] == [
        "./build.sh",
        "src/app.py",
    ]


def test_a_value_chosen_for_a_thing_is_replaced_when_that_thing_changes() -> None:
    text = run(
        chat(
            ("user", "Speed up the audit log writer."),
            ("assistant", "Sure."),
            ("user", "Let's instead go with ro-22.xnp.internal for read traffic."),
            ("assistant", "Noted."),
            ("user", "Also: Switch read traffic to ro-75.ek6.internal."),
            ("assistant", "Noted."),
        )
    )
    assert "ro-75.ek6.internal" in text and "ro-22.xnp.internal" not in text
    assert "audit log writer" in text


def test_a_value_chosen_for_one_thing_leaves_another_things_value() -> None:
    text = run(
        chat(
            ("user", "Use https://stg-8e8x.corp.example for the staging link."),
            ("assistant", "Noted."),
            ("user", "Use https://www-86bz.qx.io for production."),
            ("assistant", "Noted."),
        )
    )
    assert "stg-8e8x.corp.example" in text and "www-86bz.qx.io" in text


def test_an_update_naming_the_earlier_thing_leaves_another_things_value() -> None:
    previous = (
        "- Task (seq 92): Document the thumbnail worker.\n"
        "- Scratch that, QA sign-off is 2027-08-16.\n"
        "- The earlier code freeze date no longer applies; the freeze is May 11, 2027 from "
        "today.\n"
    )
    text = run(chat(("user", "Continue."), ("assistant", "The install went through.")), previous)
    assert "2027-08-16" in text and "May 11, 2027" in text


def test_spend_capped_at_a_sum_updates_the_budget_of_the_same_thing() -> None:
    text = run(
        chat(
            ("user", "Ok. REMEMBER: travel budget = $5,550. Do not edit anything under vendor/."),
            ("assistant", "Noted."),
            ("user", "The project budget is $800."),
            ("assistant", "Finance says travel spend is capped at $5,400 now."),
            ("user", "Quick update: keep the project's money under $1,350."),
            ("assistant", "Noted."),
        )
    )
    assert "$5,400" in text and "$5,550" not in text
    assert "$1,350" in text and "$800" not in text
    from dashr_ext._summarizers.extractive.facts import statements

    (said,) = statements("Finance says travel spend is capped at $5,400 now.")
    assert said[:2] == ("travel spend", "$5,400")  # who said it is not part of the label

