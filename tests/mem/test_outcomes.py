"""infer_outcome: a run's result from its turns — a table of realistic transcripts, traps included."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness_mem.experience.consolidate import Turn, verdict
from harness_mem.experience.outcomes import NO_SIGNAL, Outcome, infer_outcome, user_reaction
from harness_mem.experience.transcript import TranscriptRecorder, tool_turn_text
from harness_mem.store import MemoryStore


@dataclass(frozen=True)
class T:
    """Any object with the five attributes will do; this one is not consolidation's Turn."""

    id: str
    role: str
    content: str
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


def run(*steps: tuple[Any, ...]) -> list[T]:
    """Turns t1, t2, … from ``("user", text)``, ``("assistant", text[, tags])``, ``("tool", name, result[, metadata])``."""
    turns = []
    for i, step in enumerate(steps, start=1):
        role = step[0]
        if role == "tool":
            meta = {"tool": step[1], **(step[3] if len(step) > 3 else {})}
            turns.append(T(f"t{i}", "tool", tool_turn_text(step[1], step[2]), metadata=meta))
        else:
            turns.append(T(f"t{i}", role, step[1], tuple(step[2]) if len(step) > 2 else ()))
    return turns


TASK = ("user", "The CSV importer crashes on empty lines, please fix it and make sure the tests pass")
PLAN = ("assistant", "I'll reproduce it with the test suite, fix the parser, then rerun the tests.")
EDIT = ("tool", "edit_file", {"path": "importer.py", "written": 412})
RED = ("tool", "shell", "collected 13 items\n\ntests/test_import.py ...F.F.F.....\n\n"
       "=========================== 3 failed, 10 passed in 1.21s ===========================")
GREEN = ("tool", "shell", "collected 13 items\n\ntests/test_import.py .............\n\n"
         "============================== 13 passed in 1.02s ==============================")
DONE = ("assistant", "Fixed: blank lines are skipped now.")

CASES: list[tuple[str, list[T], bool | None, str | None, str]] = [
    # (name, turns, success, turn that showed it, reason contains)
    ("red, fix, green is a success", run(TASK, PLAN, RED, EDIT, GREEN, DONE), True, "t5", "pytest: 13 passed"),
    ("green, then a failing push is a failure",
     run(TASK, PLAN, EDIT, GREEN, ("tool", "shell", {"exit": 1, "stderr": "rejected: non-fast-forward"}), DONE),
     False, "t5", "exit status 1 in [shell]"),
    ("green, then the user: still broken", run(TASK, PLAN, EDIT, GREEN, DONE, ("user", "Still broken on my machine.")),
     False, "t6", "the user rejected: 'Still broken on my machine.'"),
    ("a pytest banner with failures", run(TASK, PLAN, EDIT, RED, ("assistant", "Three tests still fail.")),
     False, "t4", "pytest: 3 failed, 10 passed"),
    ("red tests are not cleared by a later exit 0 (a commit)",
     run(TASK, PLAN, RED, EDIT, ("tool", "shell", {"exit": 0, "stdout": "[main 3f2a1c] fix importer"}), DONE),
     False, "t3", "pytest: 3 failed"),
    ("red, fix, the user says it works", run(TASK, PLAN, RED, EDIT, DONE, ("user", "that works, thanks")),
     True, "t6", "the user confirmed: 'that works, thanks'"),
    ("tag result:success decides", run(TASK, PLAN, EDIT, ("assistant", "Done.", ["result:success"])),
     True, "t4", "tag result:success"),
    ("tag result:failure beats a green run", run(TASK, PLAN, GREEN, ("assistant", "Gave up.", ["result:failure"])),
     False, "t4", "tag result:failure"),
    ("a tag covers the work before it: more work after it is judged anew",
     run(TASK, PLAN, ("assistant", "Done.", ["result:success"]), ("user", "Now purge the CDN cache too"),
         ("tool", "cdn_purge", {"ok": False}), ("assistant", "The purge failed.\nStatus: failed")),
     False, "t6", "verdict"),
    ("a tag is the host's word: a later complaint does not change it",
     run(TASK, PLAN, EDIT, ("assistant", "Done.", ["result:success"]), ("user", "still failing")),
     True, "t4", "tag result:success"),
    ("verdict line in the final assistant turn", run(TASK, PLAN, EDIT, ("assistant", "Importer fixed.\nResult: success")),
     True, "t4", "verdict line"),
    ("a verdict line is overruled by the user after it",
     run(TASK, PLAN, EDIT, ("assistant", "Status: passed"), ("user", "No, that didn't work. Same error as before.")),
     False, "t5", "the user rejected"),
    ("'0 failed' is a pass (cargo)",
     run(TASK, PLAN, ("tool", "cargo", "running 5 tests\n.....\ntest result: ok. 5 passed; 0 failed; 0 ignored; "
                      "0 measured; 0 filtered out; finished in 0.01s")), True, "t3", "cargo test: ok, 5 passed, 0 failed"),
    ("'0 failed' is a pass (jest)",
     run(TASK, PLAN, ("tool", "npm", "Test Suites: 2 passed, 2 total\nTests:       0 failed, 4 passed, 4 total")),
     True, "t3", "jest: 0 failed, 4 passed"),
    ("jest failures", run(TASK, PLAN, ("tool", "npm", "Tests:       1 failed, 4 passed, 5 total\nSnapshots:   0 total")),
     False, "t3", "jest: 1 failed, 4 passed"),
    ("unittest OK", run(TASK, PLAN, ("tool", "shell", "..........\n----------\nRan 10 tests in 0.004s\n\nOK")),
     True, "t3", "unittest: OK"),
    ("unittest FAILED", run(TASK, PLAN, ("tool", "shell", "..F.F\nRan 5 tests in 0.002s\n\nFAILED (failures=2)")),
     False, "t3", "unittest: FAILED (failures=2)"),
    ("go test ok", run(TASK, PLAN, ("tool", "go", "ok  \tgithub.com/acme/importer\t0.014s")),
     True, "t3", "go test: ok github.com/acme/importer"),
    ("go test FAIL", run(TASK, PLAN, ("tool", "go", "--- FAIL: TestBlankLines (0.00s)\nFAIL\tgithub.com/acme/importer\t0.01s")),
     False, "t3", "go test: FAIL"),
    ("a test summary beats the pipeline's exit 0",
     run(TASK, PLAN, ("tool", "shell", {"exit": 0, "stdout": "==== 2 failed, 3 passed in 0.50s ===="})),
     False, "t3", "pytest: 2 failed, 3 passed"),
    ("exit_code in JSON", run(TASK, PLAN, ("tool", "shell", {"exit_code": 1, "stderr": "make: *** [all] Error 2"})),
     False, "t3", "exit status 1 in [shell]"),
    ("returncode 0 in JSON", run(TASK, PLAN, ("tool", "run", {"returncode": 0, "stdout": "built 3 files"})),
     True, "t3", "exit status 0 in [run]"),
    ("an IDE's 'Process finished with exit code 0'", run(TASK, PLAN, ("tool", "run", "importing…\n\nProcess finished with exit code 0")),
     True, "t3", "exit status 0 in [run]"),
    ("'exited with status 2'", run(TASK, PLAN, ("tool", "shell", "ld: symbol not found\ncommand exited with status 2")),
     False, "t3", "exit status 2 in [shell]"),
    ("the exit status in the turn's metadata", run(TASK, PLAN, ("tool", "shell", "done", {"exit_code": 3})),
     False, "t3", "exit status 3 in [shell]"),
    ("trap: 'exit 0' inside an unrelated sentence",
     run(TASK, PLAN, ("tool", "read_file", "The script should exit 0 when the build is done; exit code 0 means success "
                      "to the scheduler.\n"), DONE), None, None, NO_SIGNAL),
    ("trap: 'no errors' is not a failure", run(TASK, PLAN, EDIT, ("tool", "lint", "checked 14 files: no errors"), DONE),
     None, None, NO_SIGNAL),
    ("trap: 'thanks' before any work",
     run(("user", "Thanks, that works now! Next: the importer crashes on blank lines."), PLAN, EDIT, DONE),
     None, None, NO_SIGNAL),
    ("trap: a bare 'thanks' after the work is politeness", run(TASK, PLAN, EDIT, DONE, ("user", "thanks")),
     None, None, NO_SIGNAL),
    ("trap: a test summary quoted by the assistant",
     run(TASK, ("assistant", "The last CI run said `== 2 failed, 8 passed in 3.1s ==`; I will fix the parser."),
         EDIT, DONE), None, None, NO_SIGNAL),
    ("trap: the assistant's tone", run(TASK, PLAN, EDIT, ("assistant", "Everything worked perfectly! All tests pass.")),
     None, None, NO_SIGNAL),
    ("trap: the user asks, does not confirm", run(TASK, PLAN, EDIT, DONE, ("user", "Does it work with Windows line endings?")),
     None, None, NO_SIGNAL),
    ("trap: a hedge is not a confirmation", run(TASK, PLAN, EDIT, DONE, ("user", "Not sure if it works yet, I'll check later.")),
     None, None, NO_SIGNAL),
    ("trap: a verdict line before the end is not the run's result",
     run(TASK, ("assistant", "CI says:\nStatus: failed (yesterday's run). I'll look at the parser."), EDIT, DONE),
     None, None, NO_SIGNAL),
    ("a traceback in the final tool result",
     run(TASK, PLAN, EDIT, ("tool", "python", "Traceback (most recent call last):\n  File \"importer.py\", line 3\n"
                            "ValueError: empty line"), DONE), False, "t4", "a traceback in the final tool result [python]"),
    ("a traceback the agent went on past is not the result",
     run(TASK, PLAN, ("tool", "python", "Traceback (most recent call last):\nValueError: empty line"), EDIT, DONE),
     None, None, NO_SIGNAL),
    ("pip's ERROR line in the final tool result",
     run(TASK, PLAN, ("tool", "shell", "ERROR: Could not find a version that satisfies the requirement csvkit==9")),
     False, "t3", "an error in the final tool result [shell]"),
    ("a JSON error in the final tool result", run(TASK, PLAN, ("tool", "deploy", {"error": "permission denied"})),
     False, "t3", "an error in the final tool result [deploy]"),
    ("HTTP 200 as the final check",
     run(TASK, PLAN, ("tool", "shell", {"exit": 0}), ("tool", "http_get", {"status": 200, "body": "ok"}), DONE),
     True, "t4", "HTTP 200 in the final tool result [http_get]"),
    ("HTTP 503 as the final check", run(TASK, PLAN, ("tool", "curl", "HTTP/1.1 503 Service Unavailable\nretry-after: 5")),
     False, "t3", "HTTP 503 in the final tool result [curl]"),
    ("a 404 while exploring is not the result",
     run(TASK, PLAN, ("tool", "http_get", {"status": 404}), ("tool", "read_file", "importer.py: 80 lines"), DONE),
     None, None, NO_SIGNAL),
    ("'perfect, thanks' after the work", run(TASK, PLAN, EDIT, DONE, ("user", "Perfect, thanks!")),
     True, "t5", "the user confirmed"),
    ("'great, it's fixed'", run(TASK, PLAN, EDIT, DONE, ("user", "great, it's fixed")), True, "t5", "the user confirmed"),
    ("a confirmation with a complaint is a rejection",
     run(TASK, PLAN, EDIT, DONE, ("user", "That works, but the header row is still broken.")), False, "t5", "the user rejected"),
    ("'no, wrong'", run(TASK, PLAN, EDIT, DONE, ("user", "no, wrong file")), False, "t5", "the user rejected"),
    ("confirmed midway, then a later command fails",
     run(TASK, PLAN, EDIT, DONE, ("user", "It works now. Please also push it."), ("tool", "shell", "fatal: could not read "
         "from remote repository\nexit code 128"), ("assistant", "The push failed.")),
     False, "t6", "exit status 128 in [shell]"),
    ("a chat with no tools and no verdict", run(("user", "what does CSV stand for?"), ("assistant", "Comma-separated values."),
                                                ("user", "great, thanks")), True, "t3", "the user confirmed"),
]


@pytest.mark.parametrize(("turns", "success", "turn_id", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_infer_outcome(turns: list[T], success: bool | None, turn_id: str | None, reason: str) -> None:
    outcome = infer_outcome(turns)
    assert (outcome.success, outcome.turn_id) == (success, turn_id), outcome
    assert reason in outcome.reason


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 25
    assert {c[2] for c in CASES} == {True, False, None}


def test_agrees_with_consolidations_verdict_where_that_decides() -> None:
    """Wherever verdict() decides, infer_outcome says the same — but for its two refinements: the
    user's word after a verdict line, and work done after a result tag."""
    decided = 0
    for _name, turns, *_ in CASES:
        as_consolidation_reads = [Turn(i, t.id, t.role, t.content, t.tags, t.metadata) for i, t in enumerate(turns)]
        said = verdict(as_consolidation_reads)
        if said is None:
            continue
        decided += 1
        if turns[-1].role == "user" and not any(tag.startswith("result:") for t in turns for tag in t.tags):
            continue  # the user's word after a verdict line is one refinement
        tagged = [i for i, t in enumerate(turns) if any(tag.startswith("result:") for tag in t.tags)]
        if tagged and any(t.role in ("assistant", "tool") for t in turns[tagged[-1] + 1:]):
            continue  # work after a tag is judged anew: the other
        assert infer_outcome(as_consolidation_reads).success is said
    assert decided >= 4


def test_new_turns_go_on_from_the_earlier_outcome() -> None:
    """Consolidation reads only a session's new turns: going on from the earlier outcome gives what
    the whole transcript gives, at every point an episode could have been made (after some work)."""
    splits = 0
    for name, turns, *_ in CASES:
        whole = infer_outcome(turns)
        for k in range(1, len(turns)):
            if not any(t.role in ("assistant", "tool") for t in turns[:k]):
                continue
            later = infer_outcome(turns[k:], before=infer_outcome(turns[:k]))
            assert (later.success, later.turn_id) == (whole.success, whole.turn_id), (name, k)
            splits += 1
    assert splits > 100


def test_a_reaction_arriving_later_decides() -> None:
    earlier = infer_outcome(run(TASK, PLAN, EDIT, GREEN, DONE))
    assert infer_outcome(run(("user", "still broken on staging")), before=earlier).success is False
    assert infer_outcome(run(("user", "still broken on staging"))).success is None  # no work to react to


def test_outcome_metadata_round_trip() -> None:
    outcome = infer_outcome(run(TASK, PLAN, RED, EDIT, GREEN, DONE))
    data = outcome.to_dict()
    assert data == {"success": True, "turn": "t5", "reason": "pytest: 13 passed", "signal": "test"}
    assert Outcome.from_dict(data) == outcome
    assert Outcome.from_dict({"success": "yes"}) is None
    assert Outcome.from_dict(None) is None
    assert Outcome.from_dict({"success": None, "turn": 3}) == Outcome(None)


def test_no_turns_and_blank_turns_are_unknown() -> None:
    assert infer_outcome([]) == Outcome(None, None, NO_SIGNAL)
    assert infer_outcome(run(("user", ""), ("tool", "shell", ""), ("assistant", ""))).success is None


@pytest.mark.parametrize(
    ("words", "success"),
    [
        ("that fixed it", True),
        ("Looks good to me.", True),
        ("LGTM", True),
        ("works for me now", True),
        ("it's not fixed", False),
        ("nope", False),
        ("it doesn't work on the big file", False),
        ("the build still fails", False),
        ("same problem as before", False),
        ("it never works", None),
        ("nothing is broken anymore", None),
        ("No problem, take your time", None),
        ("Perfect, go ahead with the plan", None),  # approving a plan is not confirming a result
        ("the failing test passes now?", None),
    ],
)
def test_user_reaction(words: str, success: bool | None) -> None:
    signal = user_reaction(words)
    assert (None if signal is None else signal.success) is success


def test_turns_read_back_from_a_real_store(tmp_path: Path) -> None:
    """The recorder's stored form ("[name] {json}", the tool in metadata) is what the rules read."""
    with MemoryStore(tmp_path / "mem.db", embedder=None) as store:
        with TranscriptRecorder(store, session="s-1") as rec:
            rec.note_user("Fix the importer and make the tests pass")
            rec.note_assistant("Running the tests first.")
            rec.note_tool("shell", {"exit": 1, "stdout": "== 1 failed, 4 passed in 0.2s =="})
            rec.note_tool("edit_file", {"path": "importer.py"})
            rec.note_tool("shell", {"exit": 0, "stdout": "== 5 passed in 0.2s =="})
            rec.note_assistant("All five tests pass now.")
        turns = list(store.list(kind="turn", session="s-1"))
        outcome = infer_outcome(turns)
        assert outcome.success is True
        assert outcome.turn_id == turns[4].id
        assert outcome.reason == "pytest: 5 passed"
