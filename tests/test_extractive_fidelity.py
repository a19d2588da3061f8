"""The extractive summarizer keeps what matters at small budgets, once, and only current."""

from __future__ import annotations

from corpus_events import assistant, tool, user

from dashr_ext._events import Event
from dashr_ext._meter import TokenMeter
from dashr_ext._summarizers.base import SummaryRequest
from dashr_ext._summarizers.extractive import ExtractiveSummarizer

METER = TokenMeter()


def summarize(
    span: list[Event], budget: int, previous: str | None = None, show: bool = False
) -> str:
    request = SummaryRequest(
        span=span,
        previous_summary=previous,
        max_summary_tokens=budget,
        prefix_messages=[],
        count_tokens=METER.count_text,
        show_superseded=show,
    )
    text = ExtractiveSummarizer().summarize(request).text
    assert METER.count_text(text) <= budget
    return text


def chat(*lines: str) -> list[Event]:
    """Alternating user/assistant events; the assistant only acknowledges."""
    events: list[Event] = []
    for i, line in enumerate(lines):
        events.append(user(2 * i + 1, line))
        events.append(assistant(2 * i + 2, "Okay, noted. Continuing."))
    return events


def test_filler_never_displaces_a_labelled_statement_or_a_rule() -> None:
    span = chat(
        "Morning! Hope your week is off to a good start.",
        "Side note: my cat knocked over a plant today.",
        "CONSTRAINT: the export job may only run between 01:00 and 03:00 UTC.",
        "lol anyway",
        "Under no circumstances rotate the signing key without telling Priya.",
        "DEPLOY TARGET: cluster eu-west-2b, namespace billing-prod.",
    )
    text = summarize(span, 90)
    assert "CONSTRAINT: the export job" in text
    assert "rotate the signing key" in text
    assert "DEPLOY TARGET" in text
    assert "cat knocked" not in text and "Hope your week" not in text
    assert "Continuing" not in text


def test_a_greeting_or_trivia_is_never_quoted_as_the_task() -> None:
    span = chat(
        "Hey, good morning to you!",
        "Our CI runners are in Frankfurt.",
        "Could you port the nightly report script to the new scheduler?",
    )
    text = summarize(span, 120)
    assert "Task (seq 5): Could you port the nightly report" in text
    assert "Task (seq 1)" not in text and "Task (seq 3)" not in text


def test_a_statement_said_twice_is_kept_once_citing_the_latest_seq() -> None:
    span = chat(
        "Always run the linter before you commit.",
        "Refactor the parser module please.",
        "Always run the linter before you commit!",
    )
    text = summarize(span, 200)  # a checklist: the statement alone, once
    assert text.lower().count("always run the linter before you commit") == 1
    headed = summarize(span, 400)  # headed sections cite where it was said
    assert headed.lower().count("always run the linter before you commit") == 1
    assert "(seq 5): Always run the linter" in headed


def test_a_statement_the_carried_text_holds_is_not_repeated() -> None:
    span = chat("Never force-push to the release branch.", "Please tidy up the imports.")
    request = SummaryRequest(
        span=span,
        previous_summary=None,
        max_summary_tokens=200,
        prefix_messages=[],
        count_tokens=METER.count_text,
        carried="Pinned: Never force-push to the release branch.",
    )
    text = ExtractiveSummarizer().summarize(request).text
    assert "force-push" not in text
    assert "tidy up the imports" in text


def test_an_override_in_other_words_replaces_the_earlier_statement() -> None:
    span = chat(
        "Please build the ingest service.",
        "The monthly hosting spend limit is $1200.",
        "Change of plan on money: hosting spend must stay below seven hundred dollars.",
        "We'll store events in MongoDB.",
        "On second thought, go with Kafka instead, since ops already runs it.",
    )
    text = summarize(span, 200)
    assert "seven hundred dollars" in text
    assert "$1200" not in text
    assert "Kafka instead, since ops already runs it" in text
    assert "MongoDB" not in text
    assert "(was" not in text


def test_look_alike_distinct_items_both_survive() -> None:
    span = chat(
        "Please prepare the quarterly plan.",
        "The marketing budget is $40,000.",
        "Update: the hardware budget is now $15,000.",
        "FACT: the staging endpoint is https://stage.acme.internal/api.",
        "FACT: the production endpoint is https://api.acme.com/v3.",
    )
    text = summarize(span, 240)
    assert "$40,000" in text and "$15,000" in text
    assert "stage.acme.internal" in text and "api.acme.com" in text


def test_superseded_values_show_only_when_asked() -> None:
    span = chat(
        "Set up the payout job.",
        "The payout cap is $390.",
        "Update: the payout cap is now $450.",
    )
    plain = summarize(span, 200)
    assert "(was" not in plain and "$390" not in plain and "$450" in plain
    shown = summarize(span, 200, show=True)
    assert "(was" in shown and "$390" in shown


def test_five_merges_at_a_fixed_budget_keep_everything_of_the_first_pass() -> None:
    span = chat(
        "Please migrate the billing tables to the new schema.",
        "RULE: every migration needs a rollback script.",
        "I prefer small PRs, one table each.",
        "Never touch the invoices table on weekdays.",
        "Let's go with Alembic instead of raw SQL because the team knows it.",
        "Next step: draft the accounts migration.",
    )
    budget = 160
    first = summarize(span, budget)
    lines = [line for line in first.splitlines() if line.startswith("- ")]
    previous = first
    for _ in range(4):
        previous = summarize([], budget, previous=previous)
        for line in lines:
            assert line in previous.splitlines(), line


def test_small_budgets_get_a_compact_checklist_without_headings() -> None:
    span = chat("Please add retries to the uploader.", "Never retry more than 5 times.")
    text = summarize(span, 100)
    assert "## " not in text and "verbatim" not in text
    assert all(line.startswith("- ") for line in text.splitlines())
    assert "## " in summarize(span, 2000)


def test_a_checkpoint_recorded_as_a_fresh_sessions_input_is_read_back_as_a_summary() -> None:
    first = summarize(
        chat("Please migrate the cron jobs.", "RULE: never touch the billing schema."), 200
    )
    framed = f'{first}\n[checkpoint c7 #2–9, 4 events: history_read("c7")]'
    again = summarize([user(1, framed), assistant(2, "Okay.")], 200)
    assert again.count("never touch the billing schema") == 1
    assert "[checkpoint c7" not in again and "Request (seq 1)" not in again


def test_a_status_nudge_is_never_the_task_and_the_assistant_updates_a_value() -> None:
    span = [
        user(1, "Any progress?"),
        assistant(2, "Still reading."),
        user(3, "The replica host is ro-7.db.internal."),
        assistant(4, "Quick update: the replica host changed to ro-9.db.internal."),
        user(5, "Keep going."),
        assistant(6, "Okay."),
    ]
    text = summarize(span, 120)
    assert "Any progress" not in text and "Keep going" not in text
    assert "ro-9.db.internal" in text and "ro-7.db.internal" not in text


def test_an_update_naming_its_subject_otherwise_replaces_the_one_value_of_its_shape() -> None:
    span = chat(
        "The cache node is cache-04.lan.example.internal.",
        "Our mail relay is smtp-2.lan.example.internal.",
        "Please tidy the deploy notes.",
        "Change of plan: the hot keys now live on cache-19.lan.example.internal.",
    )
    text = summarize(span, 160)
    assert "cache-19.lan.example.internal" in text
    assert "cache-04.lan.example.internal" not in text
    assert "smtp-2.lan.example.internal" in text  # another shape of host: kept apart


def test_a_question_about_what_happened_is_not_quoted_as_the_task() -> None:
    from dashr_ext._summarizers.extractive.salience import reads_as_request

    assert not reads_as_request("Did you watch the final yesterday? Unreal ending.")
    assert not reads_as_request("Have you tried the new bakery downstairs?")
    assert reads_as_request("Could you move the cron jobs to the scheduler?")
    assert reads_as_request("Did you run the migrations? Please check the logs.")


def test_a_checklist_shows_statements_without_heads_and_reads_them_back_at_their_rank() -> None:
    from dashr_ext._summarizers.extractive.items import CRITICAL
    from dashr_ext._summarizers.extractive.sections import _carried_priority

    span = chat("Refactor the billing module, please.", "Never merge on a Friday afternoon.")
    text = summarize(span, 120)
    assert "- Never merge on a Friday afternoon." in text
    assert "User rule" not in text
    headed = summarize(span, 900)
    rule = next(line for line in headed.splitlines() if "Never merge" in line)
    assert _carried_priority(CRITICAL, rule[2:]) == _carried_priority(
        CRITICAL, "Never merge on a Friday afternoon."
    )


def test_a_labelled_line_a_tool_printed_is_kept_over_listing_rows() -> None:
    span = [
        user(1, "Go through the repo notes, please."),
        assistant(2, "Reading them.", calls=[("c1", "bash", {"command": "cat TODO.txt"})]),
        tool(3, "c1", "4be1f0a parser cleanup\nTODO: drop the legacy importer.\nlxml 5.2.1"),
        assistant(4, "Okay."),
    ]
    text = summarize(span, 28)
    assert "TODO: drop the legacy importer." in text
    assert "4be1f0a parser cleanup" not in text and "lxml" not in text
    roomy = summarize(span, 400)  # rows of the listing fill what room is left
    assert "TODO: drop the legacy importer." in roomy


def test_an_update_naming_the_kind_it_replaces_drops_the_latest_of_that_kind() -> None:
    span = chat(
        "Please tidy up the logging in the ingest worker.",
        "Never open a pull request without a linked ticket.",
        "Actually, that rule is replaced: every pull request needs two reviewers.",
    )
    for budget in (120, 400):
        text = summarize(span, budget)
        assert "two reviewers" in text
        assert "linked ticket" not in text
        assert "tidy up the logging" in text  # a rule update leaves the task alone
    shown = summarize(span, 400, show=True)
    assert "linked ticket" in shown


def test_an_update_replacing_the_earlier_task_drops_the_request_that_stated_it() -> None:
    span = chat(
        "Today we should rewrite the thumbnail cache.",
        "FACT: the build server is forge-3.",
        "New plan: drop the earlier task, we profile the upload path first.",
    )
    for budget in (120, 400):
        text = summarize(span, budget)
        assert "profile the upload path" in text
        assert "thumbnail cache" not in text
        assert "forge-3" in text


def test_a_replaced_value_leaves_every_line_that_showed_it() -> None:
    span = chat(
        "Can you plan the rollout? The rollout window opens 2031-05-04, keep it quiet.",
        "Also keep the change log short.",
        "Scratch that, the rollout window is 2031-06-09.",
    )
    for budget in (120, 400):
        text = summarize(span, budget)
        assert "2031-06-09" in text
        assert "2031-05-04" not in text
        assert "plan the rollout" in text  # the request keeps what else it said
    assert "2031-05-04" in summarize(span, 400, show=True)


def test_a_line_carried_without_a_head_is_replaced_by_a_later_update() -> None:
    previous = (
        "- Task (seq 1): Port the billing report to the new scheduler.\n"
        "- Always page the on-call lead before a schema change.\n"
    )
    span = chat("Change of plan regarding that rule: a schema change needs a dry run first.")
    text = summarize(span, 120, previous=previous)
    assert "dry run first" in text
    assert "page the on-call lead" not in text
    assert "billing report" in text


def test_a_labelled_goal_replaces_the_task_it_shares_no_words_with() -> None:
    span = chat(
        "We need to speed up the invoice exporter.",
        "NOTE: staging runs on node st-41.",
        "CURRENT GOAL: document the search indexer.",
    )
    text = summarize(span, 120)
    assert "document the search indexer" in text
    assert "invoice exporter" not in text
    assert "st-41" in text


def test_an_update_naming_a_shorter_label_replaces_the_longer_one() -> None:
    span = chat(
        "Heads up: the code freeze date is 2032-01-12.",
        "Please keep commits small.",
        "Actually, the code freeze is 2032-02-20.",
    )
    for budget in (120, 400):
        text = summarize(span, budget)
        assert "2032-02-20" in text
        assert "2032-01-12" not in text


def test_steps_said_done_and_boxes_ticked_in_a_file_are_kept_as_done() -> None:
    """ "I already split the module" and a file's "[x] pinned the client" say where the task
    stands, whoever says them; a box left open is not a step done."""
    span = [
        user(1, "Tidy the service before the release."),
        assistant(2, "Reading the plan.", [("c1", "bash", {"command": "cat PLAN.md"})]),
        tool(3, "c1", "# Plan\n3f12d68 fix parser\n[x] pinned the HTTP client\n[ ] rename tables"),
        user(4, "Also: I already split the settings module myself yesterday."),
        assistant(5, "Okay, noted. Continuing."),
        user(6, "Random: the office plants need watering."),
        assistant(7, "Okay, noted. Continuing."),
    ]
    text = summarize(span, 120)
    assert "pinned the HTTP client" in text
    assert "split the settings module" in text
    assert "rename tables" not in text.split("Done:")[-1].split("\n")[0]


def test_a_new_next_step_or_task_in_other_words_replaces_the_labelled_one() -> None:
    steps = chat(
        "Fix the login bug; keep the API backwards compatible.",
        "NEXT: rotate the service account keys.",
        "Scratch that, next we backfill the ledger table.",
    )
    text = summarize(steps, 160)
    assert "backfill the ledger table" in text and "backwards compatible" in text
    assert "rotate the service account keys" not in text
    tasks = chat(
        "Hi there, good morning!",
        "CURRENT TASK: Split the session cache.",
        "Change of plan: forget the earlier task, we harden the audit log writer first.",
    )
    text = summarize(tasks, 160)
    assert "harden the audit log writer" in text and "Split the session cache" not in text
