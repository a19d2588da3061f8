"""Salience, labelled values and typed anchors of the extractive summarizer (SPEC §5.2).

Planted facts: a rule said early among chatter, a value changed later (in one pass and
across passes), literal values of every type, settings a tool printed. Each must survive the
budget where it matters and never be shown stale.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from corpus_events import CORPUS, assistant, corpus_files, session_from_corpus, tool, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashr_ext._events import Event
from dashr_ext._meter import TokenMeter
from dashr_ext._summarizers import ExtractiveSummarizer
from dashr_ext._summarizers.base import SummaryRequest
from dashr_ext._summarizers.extractive.compact import COMPACT_TOKENS

METER = TokenMeter()


def run(
    span: Sequence[Event],
    budget: int = 4096,
    previous: str | None = None,
    mode: str = "summary",
    show_superseded: bool = False,
) -> str:
    request = SummaryRequest(
        span, previous, budget, [], METER.count_text, mode=mode, show_superseded=show_superseded
    )
    text = ExtractiveSummarizer().summarize(request).text
    assert METER.count_text(text) <= budget
    return text


def sections_of(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts), 2)}


def keyword_groups(text: str) -> dict[str, str]:
    """The keyword line of a summary (``- Keywords — …``) or a stub (``Keywords: …``)."""
    match = re.search(r"^(?:- Keywords —|Keywords:) (.*)$", text, flags=re.M)
    if match is None:
        return {}
    return dict(g.split(": ", 1) for g in re.split(r"; (?=[a-z]+: )", match.group(1)))


def values_line(text: str) -> str:
    match = re.search(r"^- Values — (.*)$", text, flags=re.M)
    return match.group(1) if match else ""


def only_as_was(text: str, old: str) -> bool:
    """Every occurrence of ``old`` in ``text`` stands inside a ``(was …)`` note."""
    outside = re.sub(r"\(was [^()]*\)", "", text)
    return old not in outside


CHATTER = (
    "Haha nice, how is your day going so far?",
    "By the way, did you catch the game last night?",
    "lol ok, that was a wild finish",
    "Cool cool. Anyway, coffee time for me.",
)


def rule_then_chatter() -> list[Event]:
    events = [
        user(1, "Hi! Can you help me with the deploy pipeline?"),
        assistant(2, "Sure, tell me what you need."),
        user(3, "Never deploy on Fridays."),
        assistant(4, "Understood."),
    ]
    for i, line in enumerate(CHATTER):
        events += [user(5 + 2 * i, line), assistant(6 + 2 * i, "Ha, sounds good.")]
    return events


# --------------------------------------------------------------------------- salience


def test_an_early_rule_survives_a_small_budget_while_later_chatter_is_dropped() -> None:
    text = run(rule_then_chatter(), budget=100)
    assert "Never deploy on Fridays." in text
    assert not any(line.split(",")[0] in text for line in CHATTER)


def test_a_users_rule_reaches_critical_context() -> None:
    critical = sections_of(run(rule_then_chatter()))["Critical Context"]
    assert "- User rule (seq 3): Never deploy on Fridays." in critical.splitlines()


def test_a_trivial_first_message_is_not_pinned() -> None:
    span = [
        user(1, "hi, can you help?"),
        assistant(2, "Of course. What is it?"),
        user(3, "Fix the flaky upload test in tests/test_upload.py; it times out on CI."),
        assistant(
            4, "Looking into it.", [("c1", "bash", {"command": "pytest tests/test_upload.py"})]
        ),
        tool(5, "c1", "<returncode>1</returncode>\nTimeoutError: upload took 31 s"),
    ]
    primary = sections_of(run(span))["Primary Request and Intent"]
    assert primary.startswith("- Original request (seq 3), verbatim:")
    assert "Original request (seq 1)" not in primary
    assert "hi, can you help?" not in primary  # a greeting takes no slot
    tight = run(span, budget=90)
    assert "Fix the flaky upload test" in tight and "hi, can you help?" not in tight


def test_a_long_first_request_keeps_its_salient_sentences_when_the_budget_is_short() -> None:
    filler = " ".join(f"Some background on part {i} of the service history." for i in range(30))
    request = (
        f"{filler} Migrate the billing job to the new queue. The job must never run twice for "
        "one invoice. Deadline is 2026-03-13."
    )
    text = run([user(1, request), assistant(2, "On it.")], budget=140)
    assert "## " not in text  # a budget this small gets the checklist
    task = [line for line in text.splitlines() if line.startswith("- Task (seq 1): ")]
    assert len(task) == 1 and "Some background on part 3" not in task[0]
    assert "must never run twice for one invoice" in text
    assert "2026-03-13" in text
    roomy = run([user(1, request), assistant(2, "On it.")], budget=400)
    primary = sections_of(roomy)["Primary Request and Intent"]
    assert primary.startswith("- Original request (seq 1), excerpt:")
    assert "Some background on part 3" not in primary


def test_an_unanswered_ask_reaches_pending_jobs_and_the_next_step_with_its_rule() -> None:
    span = [
        *rule_then_chatter()[:4],
        user(5, "Please deploy the hotfix branch fix/retry-budget to staging."),
    ]
    parts = sections_of(run(span))
    assert parts["Pending Jobs"] == (
        "- Request of seq 5, not answered yet: Please deploy the hotfix branch "
        "fix/retry-budget to staging."
    )
    assert parts["Next Step"].splitlines() == [
        "- Answer the request of seq 5 (see Pending Jobs)",
        "- Mind the user rule of seq 3 (Critical Context)",
    ]
    assert "- User rule (seq 3): Never deploy on Fridays." in parts["Critical Context"]


def test_a_literal_value_outranks_low_salience_prose() -> None:
    span = [
        user(1, "Reconcile the March payouts."),
        assistant(2, "The ledger shows a payout of $1,250.00 to acct 7731.", [("c", "ls", {})]),
        tool(3, "c", "ok"),
        *[user(4 + 2 * i, line) for i, line in enumerate(CHATTER)],
        assistant(20, "Ha."),
    ]
    kept_value = False
    for budget in range(40, 200, 4):  # whenever chatter is shown, the value is too
        text = run(span, budget=budget)
        chatter = any(line.split(",")[0] in text for line in CHATTER)
        assert "$1,250.00" in text or not chatter, (budget, text)
        kept_value = kept_value or ("$1,250.00" in text and not chatter)
    assert kept_value  # and some budget keeps the value but none of the chatter


# --------------------------------------------------------------------------- updated values

CAP_FIRST = [
    user(1, "Set up the payout job. The cap is $390 per payout."),
    assistant(2, "Noted, working on the payout job.", [("c1", "bash", {"command": "ls jobs"})]),
    tool(3, "c1", "payout.py"),
    assistant(4, "The job is in jobs/payout.py."),
]
CAP_UPDATE = [
    user(5, "Update: the cap is now $450."),
    assistant(6, "Understood, I will use the new cap."),
]


def test_an_updated_value_is_current_and_the_old_one_only_a_was_note() -> None:
    plain = run(CAP_FIRST + CAP_UPDATE)
    assert "$390" not in plain  # current values only, each said once
    assert plain.count("$450") == 1 and "User rule (seq 5): Update: the cap is now $450." in plain
    text = run(CAP_FIRST + CAP_UPDATE, show_superseded=True)
    assert "cap: `$450` (was `$390`)" in values_line(text)
    assert only_as_was(text, "$390")
    # The original request is quoted with the current value, the old one as a note.
    assert "  > Set up the payout job. The cap is $450 (was $390) per payout." in text


def test_an_update_across_passes_replaces_the_value_of_the_previous_summary() -> None:
    first = run(CAP_FIRST)
    assert "User rule (seq 1): The cap is $390 per payout." in first
    plain = run(CAP_UPDATE, previous=first)
    assert "$450" in plain and "$390" not in plain
    assert "$390" not in run([user(7, "Thanks.")], previous=plain)
    second = run(CAP_UPDATE, previous=first, show_superseded=True)
    assert "cap: `$450` (was `$390`)" in values_line(second)
    assert only_as_was(second, "$390")
    assert "User rule (seq 1): Set up the payout job. The cap is $390" not in second
    third = run([user(7, "Thanks.")], previous=second, show_superseded=True)  # nothing new
    assert "cap: `$450` (was `$390`)" in values_line(third)
    assert only_as_was(third, "$390")


def test_a_replaced_number_is_rewritten_in_prose_but_not_in_seq_marks_or_code() -> None:
    from dashr_ext._summarizers.extractive.facts import Facts, rewrite

    facts = Facts()
    facts.state("max attempts", "5", 1.0, 1)
    facts.state("max attempts", "7", 2.0, 1, cue=True)
    text = "User rule (seq 5): max attempts is 5 here; ran ×5; `retry --max 5`"
    assert rewrite(text, facts.stale()) == (
        "User rule (seq 5): max attempts is 7 (was 5) here; ran ×5; `retry --max 5`"
    )


def test_a_changed_config_key_keeps_only_its_current_value() -> None:
    span = [
        user(1, "Tune the retries. Use RETRY_CAP=40 for now."),
        assistant(2, "Set.", [("c1", "bash", {"command": "export RETRY_CAP=40"})]),
        tool(3, "c1", ""),
        user(4, "Actually, raise RETRY_CAP=60; 40 is too low."),
        assistant(5, "Raised."),
    ]
    text = run(span, show_superseded=True)
    assert "RETRY_CAP: `60` (was `40`)" in values_line(text)
    assert "RETRY_CAP=40" not in keyword_groups(text).get("config", "")
    plain = run(span)
    critical = sections_of(plain)["Critical Context"]  # (the command run stays as it ran)
    assert "RETRY_CAP=60" in critical and "RETRY_CAP=40" not in critical and "(was" not in plain


def test_values_a_tool_printed_are_labelled_and_secrets_are_not() -> None:
    settings_file = (
        '[service]\nregion = "eu-west-1"\ntimezone = "Europe/Berlin"\n'
        '[gateway]\ntimeout_s = 30\nwebhook_secret = "whsec_test_7Qm2Vx9Lp4KdR"\n'
    )
    span = [
        user(1, "Check the service settings."),
        assistant(2, "Reading them.", [("c1", "bash", {"command": "cat config/settings.toml"})]),
        tool(3, "c1", settings_file),
        assistant(4, "Read."),
    ]
    values = values_line(run(span))
    assert "service.region: `eu-west-1`" in values
    assert "service.timezone: `Europe/Berlin`" in values
    assert "gateway.timeout_s: `30`" in values
    assert "whsec_" not in values and "webhook_secret" not in values


# --------------------------------------------------------------------------- typed anchors


TYPED = [
    ("money", "values", "$390"),
    ("money", "values", "€1.2k"),
    ("money", "values", "390 USD"),
    ("date", "values", "2026-03-13"),
    ("date", "values", "March 13"),
    ("time", "values", "14:00 UTC"),
    ("version", "values", "v3.1.4"),
    ("version", "values", "3.1.4"),
    ("hash", "ids", "a41c9e2"),
    ("uuid", "ids", "123e4567-e89b-12d3-a456-426614174000"),
    ("ticket", "ids", "PAY-1234"),
    ("host", "values", "api.example.com"),
    ("host", "values", "10.0.0.12"),
    ("region", "values", "eu-west-1"),
    ("timezone", "values", "Europe/Berlin"),
    ("config", "config", "retry.max_attempts = 5"),
    ("config", "config", "RETRY_CAP=40"),
    ("branch", "ids", "fix/retry-budget"),
    ("person", "names", "Dana Whitfield"),
    ("path", "paths", "config/settings.toml"),
]
SENTENCES = {
    "Dana Whitfield": "Please ask Dana Whitfield (our release manager) first.",
    "fix/retry-budget": "Push it to branch fix/retry-budget.",
}


@pytest.mark.parametrize(("type_", "kind", "literal"), TYPED, ids=[t[2] for t in TYPED])
def test_typed_literals_reach_the_keyword_line(type_: str, kind: str, literal: str) -> None:
    said = SENTENCES.get(literal, f"For the record: {literal} is what we saw.")
    # Late in a long explanation: not a statement bullet of its own (which would show the
    # literal already), so the keyword line is where the summary keeps it.
    steps = " ".join(f"Step {n} of the release went as planned." for n in range(1, 9))
    span = [
        user(1, "Prepare the release."),
        assistant(2, f"{steps} {said}", [("c1", "bash", {"command": "make release"})]),
        tool(3, "c1", "<returncode>0</returncode>"),
        assistant(4, "The release is prepared."),
    ]
    text = run(span)
    if kind == "config":  # a key with its value: a labelled value, not a keyword
        key, value = (part.strip() for part in literal.split("="))
        assert f"{key}: `{value}`" in values_line(text)
    else:
        assert f"`{literal}`" in keyword_groups(text).get(kind, ""), text
    from dashr_ext._summarizers.extractive.anchors import typed_literals

    assert [(lit.type, lit.value) for lit in typed_literals(said)][:1] == [(type_, literal)]


def test_a_person_is_named_only_where_introduced_and_plain_words_are_not_literals() -> None:
    from dashr_ext._summarizers.extractive.anchors import typed_literals

    assert typed_literals("The Retry Policy reads Python Settings.") == ()
    assert [lit.value for lit in typed_literals("Ping Ravi Menon about it.")] == ["Ravi Menon"]
    assert [lit.type for lit in typed_literals("see v3.1.4. Then 10.0.0.1.")] == ["version", "host"]


# --------------------------------------------------------------------------- stub and state


PLANTED = [
    user(1, "Deploy the payout service. The region is eu-west-1 and the spend cap is $390."),
    assistant(2, "Deploying.", [("c1", "bash", {"command": "make deploy"})]),
    tool(3, "c1", "<returncode>0</returncode>\ndeployed"),
    assistant(4, "Deployed."),
]


def test_a_planted_value_reaches_the_stubs_keyword_line() -> None:
    groups = keyword_groups(run(PLANTED, budget=160, mode="stub"))
    assert "$390" in groups["values"] and "eu-west-1" in groups["values"]


def test_a_planted_value_reaches_the_states_key_values_and_updates() -> None:
    first = run(PLANTED, budget=600, mode="state")
    key_values = sections_of(first)["Key Values"]
    assert "region: `eu-west-1`" in key_values and "spend cap: `$390`" in key_values
    update = [user(5, "The cap is now $450."), assistant(6, "Noted.")]
    plain = run(update, budget=600, previous=first, mode="state")
    assert "spend cap: `$450`" in sections_of(plain)["Key Values"] and "$390" not in plain
    second = run(update, budget=600, previous=first, mode="state", show_superseded=True)
    assert "spend cap: `$450` (was `$390`)" in sections_of(second)["Key Values"]
    assert only_as_was(second, "$390")
    assert "- User rule (seq 5): The cap is now $450." in sections_of(second)["Constraints"]


def test_a_final_answer_in_a_span_without_a_request_closes_the_previous_one() -> None:
    first = run(
        [
            user(1, "Add a --dry-run flag to deploy.sh."),
            assistant(
                2, "I'll edit deploy.sh next.", [("c1", "bash", {"command": "cat deploy.sh"})]
            ),
            tool(3, "c1", "#!/bin/sh"),
        ]
    )
    assert "## Pending Jobs" in first and "## Next Step" in first
    done = [assistant(4, "Added the --dry-run flag; deploy.sh prints the plan and exits.")]
    second = run(done, previous=first)
    assert "## Pending Jobs" not in second and "## Next Step" not in second
    assert "I'll edit deploy.sh next." not in second


def test_empty_sections_are_left_out_and_a_summary_without_them_merges() -> None:
    span = [user(1, "Rename the helper to load_config."), assistant(2, "Renamed.")]
    summary = run(span)
    assert "(none)" not in summary and "## Next Step" not in summary
    state = run(span, mode="state")
    assert "(none)" not in state and "## Next Steps" not in state
    merged = run([user(3, "Now add a docstring to load_config.")], previous=summary)
    assert "Original request (seq 1), verbatim:" in merged
    assert "Request of seq 3, not answered yet" in sections_of(merged)["Pending Jobs"]


# --------------------------------------------------------------------------- budget, determinism


@functools.cache
def _corpus_events(index: int) -> list[Event]:
    session = session_from_corpus(corpus_files()[index])
    return [session.event(seq) for seq in session.surface]


@pytest.mark.corpus
@pytest.mark.skipif(not corpus_files(), reason=f"corpus not found at {CORPUS}")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, 1000),
    start=st.floats(0.0, 0.9),
    share=st.floats(0.05, 1.0),
    budget=st.integers(64, 4096),
    mode=st.sampled_from(["summary", "state"]),
)
def test_corpus_spans_never_exceed_any_budget_from_64(
    index: int, start: float, share: float, budget: int, mode: str
) -> None:
    events = _corpus_events(index % len(corpus_files()))
    a = int(start * len(events))
    b = min(len(events), a + max(1, int(share * len(events))))
    half = (a + b) // 2
    previous = run(events[a:half], budget, mode=mode) if half > a else None
    text = run(events[half:b], budget, previous=previous, mode=mode)
    compact = mode == "summary" and budget <= COMPACT_TOKENS  # the checklist has no headings
    assert text.startswith("- " if compact else "## ")


def test_output_is_deterministic_and_does_not_depend_on_hash_seeds() -> None:
    span = rule_then_chatter() + CAP_FIRST[:0]
    assert run(span) == run(span)
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, {tests!r})
        from test_salience import CAP_FIRST, CAP_UPDATE, PLANTED, rule_then_chatter, run
        first = run(CAP_FIRST, 300)
        sys.stdout.write(run(CAP_UPDATE, 300, previous=first))
        sys.stdout.write(run(rule_then_chatter() + PLANTED[1:], 200))
        sys.stdout.write(run(PLANTED, 160, mode="stub") + run(PLANTED, 400, mode="state"))
        """
    ).format(tests=str(Path(__file__).parent))
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        outputs.add(proc.stdout)
    assert len(outputs) == 1


# --------------------------------------------------------------------------- fact survival


def test_chit_chat_and_keep_going_rank_below_a_preference_and_are_no_rule() -> None:
    """A request's rank is what it gives (rule, goal, value), not its length or recency."""
    events = [
        user(1, "We are moving the settlement job onto the new scheduler."),
        assistant(2, "I'll start with the scheduler."),
        user(3, "A preference of mine for this repo: squash merges with one-line subjects."),
        assistant(4, "Noted."),
        user(5, "Please reference ticket INC-20417 in every commit message for this work."),
        assistant(6, "Noted."),
        user(7, "The goal for this week is p99 latency under 250 ms."),
        assistant(8, "Noted."),
    ]
    chat = (
        "Ha, the coffee machine on the third floor is broken again, so I am running on tea "
        "today. Anyway, no rush, carry on with what you were doing.",
        "People keep arguing about it in the standup and I want to settle it before the end "
        "of the week, it has gone on long enough.",
        "Not your problem though, just keep going with the work.",
        "Keep going with the next part.",
    )
    for i, line in enumerate(chat * 3):
        events += [user(9 + 2 * i, line), assistant(10 + 2 * i, "Continuing.")]
    text = run(events, budget=260)
    for planted in ("squash merges with one-line subjects", "INC-20417", "p99 latency under 250"):
        assert planted in text, planted
    assert "coffee machine" not in text and "keep going with the work" not in text
    critical = sections_of(run(events))["Critical Context"]
    assert "coffee" not in critical and "standup" not in critical
    assert "User goal (seq 7): The goal for this week is p99 latency under 250 ms." in critical


def _facts_said_by_assistant_and_tool() -> list[Event]:
    log = "\n".join(
        f"2026-02-{d:02d}T10:{d + 10}:00Z INFO api[{1000 + d}]: batch {d * 97} in {d} ms "
        f"(req {d:012x})"
        for d in range(1, 25)
    )
    events = [
        user(1, "Move the settlement job onto the new scheduler."),
        assistant(2, "Status: canary at 10% of traffic. I will keep watching."),
        assistant(
            3, "For the backfill I'll read from db-replica-07.internal, since the primary is busy."
        ),
        assistant(4, "Checking.", [("c1", "bash", {"command": "oncall show --team billing"})]),
        tool(5, "c1", "team: billing\nprimary on-call this week: Priya Raman\nopen pages: 0"),
        assistant(6, "Deploying.", [("c2", "bash", {"command": "make deploy-staging"})]),
        tool(
            7, "c2", "Step 1/3 : build\ndeployed build b49d95bb to staging (healthy after 3 checks)"
        ),
        assistant(8, "Again.", [("c3", "bash", {"command": "make deploy-staging"})]),
        tool(
            9, "c3", "Step 1/3 : build\ndeployed build 7e31c0aa to staging (healthy after 4 checks)"
        ),
        assistant(10, "Status update: canary at 50% of traffic. The error rate stayed flat."),
    ]
    for i in range(6):
        seq = 11 + 3 * i
        events += [
            user(seq, "This is what I see on my machine, in case it helps:\n" + log),
            assistant(seq + 1, "Tea works too! Offsites always take longer than the agenda says."),
            user(seq + 2, "Keep going with the next part."),
        ]
    return events


def test_facts_the_assistant_said_and_a_tool_printed_survive_and_the_newer_status_wins() -> None:
    text = run(_facts_said_by_assistant_and_tool(), budget=420)
    for value in ("canary at 50% of traffic", "db-replica-07.internal", "Priya Raman", "7e31c0aa"):
        assert value in text, value
    assert "canary at 10% of traffic" not in text and "b49d95bb" not in text
    assert "Offsites always" not in sections_of(text)["Critical Context"]
    assert "req 0000" not in text


def test_an_update_under_another_label_replaces_the_value_by_its_subject() -> None:
    """ "cap for the new jobs" and "spend cap" are one cap; "the freeze: it now starts" is the
    code freeze; "move the deployment to …; that region" updates the region a tool printed."""
    events = [
        user(1, "Budget note: the spend cap for the new jobs is $390 per month."),
        user(2, "Heads-up: the code freeze starts 2026-03-13, so merge before then."),
        assistant(3, "Reading.", [("c1", "bash", {"command": "cat infra/main.tf"})]),
        tool(4, "c1", 'provider "aws" {\n  region = "eu-west-1"\n}'),
        user(5, "Finance approved more headroom: the spend cap is now $450 per month."),
        user(6, "Release management moved the freeze: it now starts 2026-03-20."),
        user(7, "We move the deployment to eu-central-1; plan against that region from now on."),
        assistant(8, "Noted."),
    ]
    text = run(events)
    for new in ("$450", "2026-03-20", "eu-central-1"):
        assert new in text, new
    for old in ("$390", "2026-03-13", "eu-west-1"):
        assert only_as_was(text, old), (old, text)


def test_across_passes_a_newer_fact_replaces_the_carried_one_and_carried_chatter_goes_first() -> (
    None
):
    first = run(
        [
            user(1, "Move the settlement job onto the new scheduler."),
            user(2, "The goal for this week is p99 latency under 250 ms."),
            assistant(3, "Status: canary at 10% of traffic. I will keep watching."),
            assistant(4, "Deploying.", [("c1", "bash", {"command": "make deploy-staging"})]),
            tool(5, "c1", "deployed build b49d95bb to staging (healthy after 3 checks)"),
            user(6, "Ha, the coffee machine on the third floor is broken again, so I am on tea."),
            assistant(7, "Tea works too!"),
        ]
    )
    assert "canary at 10% of traffic" in first and "coffee machine" in first
    span = [
        assistant(8, "Again.", [("c2", "bash", {"command": "make deploy-staging"})]),
        tool(9, "c2", "deployed build 7e31c0aa to staging (healthy after 4 checks)"),
        assistant(10, "Status update: canary at 50% of traffic."),
    ]
    text = run(span, previous=first, budget=200)
    for value in ("canary at 50% of traffic", "7e31c0aa", "p99 latency under 250 ms"):
        assert value in text, value
    assert "canary at 10%" not in text and "b49d95bb" not in text
    assert "coffee machine" not in text


def test_a_person_named_as_the_doer_is_replaced_by_a_change_of_reviewer() -> None:
    events = [
        user(1, "Dana Whitfield reviews anything that touches billing; please add them to the PR."),
        assistant(2, "Noted."),
        user(3, "Change of reviewer: Marcus Oyelaran takes over the reviews from today."),
        assistant(4, "Noted."),
    ]
    text = run(events)
    assert "Marcus Oyelaran" in text
    assert only_as_was(text, "Dana Whitfield"), text


def test_code_diffs_grep_hits_and_log_records_are_no_printed_facts() -> None:
    outputs = (
        "25\tDEFAULT_MAX_DELAY_MS = 8_000\n52\t    return GATEWAY_CODES.get(exc.code, False)",
        "tests/test_retry.py:27:    assert policy.budget == 3",
        "diff --git a/src/retry.py b/src/retry.py\nindex ca7cff0..0d796c2 100644\n-@pytest.fixture",
        "2026-03-14 09:00:01,494 INFO payments.gateway charge ch_7Oyf5T latency 1328 ms",
        "$ .venv/bin/pytest -v --tb=short",
    )
    events = [user(1, "Fix the retry budget.")]
    for i, output in enumerate(outputs):
        seq = 2 + 2 * i
        events += [
            assistant(seq, "Looking.", [(f"c{i}", "bash", {"command": f"step {i}"})]),
            tool(seq + 1, f"c{i}", output),
        ]
    events.append(assistant(20, "The helper compute_backoff starts at 250 ms."))
    text = run(events)
    assert "Printed by" not in text
    assert "compute_backoff: `250 ms`" not in values_line(text)
