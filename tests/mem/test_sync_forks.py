"""Forks: one id added with other words on two devices, or one entry corrected on both, settles on the
same current version everywhere, keeps the other as history, and shows it (`get`, `conflicts`).

Real stores syncing through a real folder (SQLite; both engines where the log's own rows matter).
The random steps are test_sync_convergence.py's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engine_rows import written
from sync_steps import everything, leftovers

from harness_mem.cli import cli
from harness_mem.errors import NotFoundError
from harness_mem.store import MemoryStore


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[MemoryStore, MemoryStore, Path]]:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "laptop.db", embedder=None) as a, MemoryStore(tmp_path / "desktop.db", embedder=None) as b:
        a.sync(folder)
        b.sync(folder)
        yield a, b, folder


def test_an_id_added_apart_with_other_words_settles_on_the_latest_everywhere(
        two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.add("the staging database is on port 5432", id="port")
    time.sleep(0.01)  # b writes it later: b's words hold the id
    b.add("the staging database is on port 5433", id="port")
    reports = [store.sync(folder) for store in (a, b, a)]
    assert reports[1].applied.forks == 1 and reports[2].applied.forks == 1  # each device saw the other's words
    for store in (a, b):
        assert store.get("port").content == "the staging database is on port 5433"
        (fork,) = store.conflicts()
        assert fork.added and fork.entry_id == "port" and fork.versions[0] == "port"
        history = [e.content for e in store.list(include_superseded=True)]
        assert sorted(history) == ["the staging database is on port 5432", "the staging database is on port 5433"]
    assert everything(a) == everything(b)
    assert a.conflicts() == b.conflicts()


def test_the_order_the_adds_arrive_in_does_not_change_which_holds_the_id(tmp_path: Path) -> None:
    """A third device that reads the later add first and the earlier one next ends where the others did."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        stores[0].add("the build runs on Linux", id="build")
        stores[0].sync(folder)
        stores[2].sync(folder)  # holds the first words, then learns of the later ones
        time.sleep(0.01)
        stores[1].add("the build runs on macOS", id="build")
        stores[1].sync(folder)
        for store in (*stores, *stores):
            store.sync(folder)
        assert {store.get("build").content for store in stores} == {"the build runs on macOS"}
        assert everything(stores[0]) == everything(stores[1]) == everything(stores[2])
    finally:
        for store in stores:
            store.close()


def test_the_same_words_added_on_two_devices_are_no_fork(two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.add("we ship on Fridays", id="ship")
    b.add("we ship on Fridays", id="ship")
    reports = [store.sync(folder) for store in (a, b, a)]
    assert sum(r.applied.forks for r in reports) == 0
    assert a.conflicts() == b.conflicts() == []
    assert [e.content for e in b.list(include_superseded=True)] == ["we ship on Fridays"]


def test_the_same_words_added_apart_with_other_tags_hold_the_latest_adds_columns_everywhere(tmp_path: Path) -> None:
    """Each device first holds the add it saw first; every one ends on the latest add's tags, metadata,
    session and time, whatever order the adds arrived in."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        stores[0].add("we ship on Fridays", id="ship", tags=["laptop"], metadata={"from": "d0"}, session="s0")
        stores[0].sync(folder)
        stores[2].sync(folder)  # holds d0's columns first
        time.sleep(0.01)
        stores[1].add("we ship on Fridays", id="ship", tags=["desktop"], metadata={"from": "d1"}, session="s1")
        for store in (*stores, *stores):
            store.sync(folder)
        held = [store.get("ship") for store in stores]
        assert {(tuple(e.tags), e.metadata.get("from"), e.session) for e in held} == {(("desktop",), "d1", "s1")}
        assert everything(stores[0]) == everything(stores[1]) == everything(stores[2])
        assert [e.content for e in stores[2].list(include_superseded=True)] == ["we ship on Fridays"]
        assert stores[0].conflicts() == []  # the same words: no fork
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize("order", ["replacer last", "replacer first", "late device"])
def test_an_id_replaced_on_one_device_holds_only_the_new_words_everywhere(order: str, tmp_path: Path) -> None:
    """A replace travels as what it is: the old words go (on every device, whatever order the devices
    sync in), the new ones hold the id; no fork, and the old words are in no file after gc."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        stores[0].add("the qzreplacedmarker alarm code is 1234", id="alarm")
        for store in stores[:2] if order == "late device" else stores:
            store.sync(folder)
        stores[1].add("the alarm code is 9876", id="alarm", on_conflict="replace")
        syncs = {"replacer last": [0, 2, 1, 0, 2, 1], "replacer first": [1, 0, 2, 1, 0, 2],
                 "late device": [1, 0, 1, 2, 0, 1]}[order]
        for n in syncs:
            stores[n].sync(folder)
        assert [store.get("alarm").content for store in stores] == ["the alarm code is 9876"] * 3
        assert everything(stores[0]) == everything(stores[1]) == everything(stores[2])
        assert [len(list(store.list(include_superseded=True))) for store in stores] == [1, 1, 1]
        assert [store.conflicts() for store in stores] == [[], [], []]
        assert leftovers(stores, tmp_path, b"qzreplacedmarker") == []
    finally:
        for store in stores:
            store.close()


def test_a_forget_that_arrives_after_a_later_replace_leaves_the_new_words(tmp_path: Path) -> None:
    """One device forgets an id; another, not knowing, replaces it a moment later; a third reads the
    replace first and the forget last: the forget reaches the old words only, on every device (found
    by the property test)."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        stores[0].add("the qzoldwords wifi password is hunter2", id="wifi")
        for store in stores:
            store.sync(folder)
        stores[2].forget("wifi")
        time.sleep(0.01)  # the replace is the later
        stores[1].add("the wifi password is in the vault", id="wifi", on_conflict="replace")
        for n in (1, 0, 2, 0, 1, 2):
            stores[n].sync(folder)
        assert [store.get("wifi").content for store in stores] == ["the wifi password is in the vault"] * 3
        assert everything(stores[0]) == everything(stores[1]) == everything(stores[2])
        assert leftovers(stores, tmp_path, b"qzoldwords") == []
    finally:
        for store in stores:
            store.close()


def test_an_id_corrected_then_replaced_is_a_new_entry_on_every_device(two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    """The correction was of the words the replace took away: the new words under the id are current
    everywhere, not corrected by it (found by the property test)."""
    a, b, folder = two
    a.sync(folder)
    a.add("lunch is at noon", id="lunch")
    a.supersede("lunch", "lunch is at one", id="lunch-2")
    a.add("lunch is in the garden", id="lunch", on_conflict="replace")
    for store in (a, b, a):
        store.sync(folder)
    assert {e.id: e.content for e in b.list()} == {e.id: e.content for e in a.list()} == {
        "lunch": "lunch is in the garden", "lunch-2": "lunch is at one"}
    assert everything(a) == everything(b)
    a.supersede("lunch", "lunch is in the garden at one", id="lunch-3")  # corrects the new entry only
    for store in (a, b):
        store.sync(folder)
    assert {e.id: e.content for e in b.list()} == {e.id: e.content for e in a.list()} == {
        "lunch-2": "lunch is at one", "lunch-3": "lunch is in the garden at one"}
    assert everything(a) == everything(b)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_each_device_correcting_its_own_version_of_an_id_added_apart_ends_on_one_history(
        order: tuple[int, ...], tmp_path: Path) -> None:
    """Three devices add one id with words of their own and each corrects its own version (one of them
    corrects its correction again); whatever order they sync in, every device ends with the same
    history: the latest words hold the id and the latest correction is current, the other first
    corrections superseded by it, the one corrected again by its own successor (found by the property
    test: an entry's corrections were settled from those its id brought up, the correction corrected
    again brought up only its own)."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        for n, store in enumerate(stores):
            store.add(f"the release train leaves on day {n}", id="train")
            time.sleep(0.005)
        for n, store in reversed(list(enumerate(stores))):  # the corrections in the other order than the adds
            store.supersede("train", f"the release train leaves on day {n + 10}", id=f"train-{n}")
            time.sleep(0.005)
        stores[1].supersede("train-1", "the release train leaves on day 21", id="train-1b")
        for n in (*order, 0, 1, 2, 0, 1, 2):
            stores[n].sync(folder)
        held = [everything(store) for store in stores]
        assert held[0] == held[1] == held[2]
        versions = {e["id"]: e["superseded_by"] for e in held[0] if "~fork-" not in e["id"]}
        # d2's words hold the id; d0's correction is the latest
        assert versions == {"train": "train-0", "train-0": None, "train-1": "train-1b", "train-1b": None,
                            "train-2": "train-0"}
        assert [e["superseded_by"] for e in held[0] if "~fork-" in e["id"]] == ["train", "train"]  # d0's, d1's words
        assert stores[0].conflicts() == stores[1].conflicts() == stores[2].conflicts()
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_corrections_of_an_id_between_replaces_of_it_stay_current_everywhere(order: tuple[int, ...],
                                                                              tmp_path: Path) -> None:
    """One device corrects an id, replaces it, corrects the new entry, and replaces it again: each
    correction was of the words of its time, which are gone, so both stay current on every device,
    whatever order the others read the steps in (found by the property test)."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        writer = stores[order[0]]
        writer.add("the standup is at nine", id="standup")
        writer.supersede("standup", "the standup is at ten", id="standup-2")
        writer.sync(folder)
        stores[order[1]].sync(folder)  # holds the first words and their correction
        writer.add("the standup is on Mondays", id="standup", on_conflict="replace")
        writer.supersede("standup", "the standup is on Tuesdays", id="standup-3")
        writer.sync(folder)
        stores[order[2]].sync(folder)
        writer.add("there is no standup", id="standup", on_conflict="replace")
        for n in (*order, *order):
            stores[n].sync(folder)
        for store in stores:
            assert {e.id: e.content for e in store.list()} == {
                "standup": "there is no standup", "standup-2": "the standup is at ten",
                "standup-3": "the standup is on Tuesdays"}
        assert everything(stores[0]) == everything(stores[1]) == everything(stores[2])
    finally:
        for store in stores:
            store.close()


def test_a_forget_arriving_late_parts_corrections_it_stands_between(tmp_path: Path) -> None:
    """One device corrects an id; another forgets it; a third, not knowing, adds the id anew and
    corrects that. A device that reads both corrections before the forget first settles them as
    rivals; once the forget arrives they are corrections of two entries, and it ends as the others do."""
    folder = tmp_path / "Sync"
    a, forgetter, newcomer, reader = stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(4)]
    try:
        for store in stores:
            store.sync(folder)
        a.add("the backup runs at midnight", id="backup")
        a.supersede("backup", "the backup runs at one", id="backup-a")
        a.sync(folder)
        forgetter.sync(folder)
        forgetter.forget("backup")
        time.sleep(0.01)  # the newcomer's add and correction are later than the forget
        newcomer.add("the backup runs hourly", id="backup")
        newcomer.supersede("backup", "the backup runs every two hours", id="backup-n")
        newcomer.sync(folder)
        reader.sync(folder)  # both corrections, no forget yet: rivals, the newcomer's the later
        assert reader.get("backup-a").superseded_by == "backup-n"
        forgetter.sync(folder)
        for store in (*stores, *stores):
            store.sync(folder)
        for store in stores:
            assert {e.id: e.content for e in store.list()} == {"backup-a": "the backup runs at one",
                                                              "backup-n": "the backup runs every two hours"}
        assert everything(stores[0]) == everything(stores[1]) == everything(stores[2]) == everything(stores[3])
    finally:
        for store in stores:
            store.close()


def test_a_correction_never_reaches_an_add_of_its_id_made_after_it(tmp_path: Path) -> None:
    """One device corrects an id and forgets both versions; another, not knowing, adds the id later: the
    correction was of words that are gone, so the new entry is current on every device, whichever
    order the correction, the forget and the add reach it in (found by the property test)."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        stores[0].add("the printer is on floor two", id="printer", session="office")
        stores[0].supersede("printer", "the printer is on floor three", id="printer-2")
        stores[0].forget(session="office")
        stores[1].add("the printer needs a new toner", id="printer", session="office")
        for store in (*stores, *stores):
            store.sync(folder)
        held = [[(e.id, e.superseded_by) for e in store.list(include_superseded=True)] for store in stores]
        assert held == [[("printer", None)]] * 3
    finally:
        for store in stores:
            store.close()


def test_a_forget_reaching_an_id_added_apart_later_lets_go_of_the_earlier_words_on_either_engine(
        fresh_target: Any, engine: str, tmp_path: Path) -> None:
    """One device adds an id and forgets it; another, not knowing, adds the id later with other words.
    A third device that holds both adds (the earlier kept as a version) when the forget arrives lets
    go of the earlier words: not only the kept version, the logged add too, so no value of any store
    holds them after gc, while the later words keep the id."""
    folder = tmp_path / "Sync"
    targets = [fresh_target() for _ in range(3)]
    with contextlib.ExitStack() as opened:
        a, b, c = (opened.enter_context(MemoryStore(target, embedder=None)) for target in targets)
        for store in (a, b, c):
            store.sync(folder)
        a.add("the qzearlierwords gate code is 1234", id="gate")
        a.sync(folder)
        c.sync(folder)  # holds the earlier words
        a.forget("gate")
        time.sleep(0.01)  # b's add is the later
        b.add("the gate code is in the vault", id="gate")
        b.sync(folder)
        c.sync(folder)  # both adds, the earlier kept as a version: no forget yet
        assert len(list(c.list(include_superseded=True))) == 2
        for store in (a, c, b, a):
            store.sync(folder)
        for store in (a, b, c):
            assert [(e.id, e.content) for e in store.list(include_superseded=True)] == [
                ("gate", "the gate code is in the vault")]
            store.purge()
            store.gc()
    for target in targets:
        assert b"qzearlierwords" not in written(target)


@pytest.mark.parametrize("how", ["forget the id", "forget its session", "delete the id", "delete a kept version"])
def test_forgetting_a_forked_id_forgets_every_version_on_every_device(
        how: str, two: tuple[MemoryStore, MemoryStore, Path], tmp_path: Path) -> None:
    """However the id goes (by id, by a selector that matches only the version holding it, or deleted),
    every version goes with it: no byte of any version in a store's file or in the folder after gc."""
    a, b, folder = two
    a.add("the qzforkmarker door code is 1234", id="door", session="hall")
    time.sleep(0.01)
    b.add("the qzforkmarker door code is 4321", id="door", session="porch")  # the later: it holds the id
    for store in (a, b, a):
        store.sync(folder)
    if how == "forget the id":
        a.forget("door")
    elif how == "forget its session":
        assert [e.id for e in a.list(session="porch", include_superseded=True)] == ["door"]
        a.forget(session="porch")
    elif how == "delete the id":
        assert a.delete("door")
    else:
        (kept,) = [e.id for e in a.list(include_superseded=True) if e.id != "door"]
        assert a.delete(kept)
    for store in (a, b, a):
        store.sync(folder)
    with MemoryStore(tmp_path / "late.db", embedder=None) as late:  # learns of both adds and the forget at once
        late.sync(folder)
        for store in (a, b, late):
            assert [e.content for e in store.list(include_superseded=True)] == []
            with pytest.raises(NotFoundError):
                store.get("door")
        assert leftovers((a, b, late), tmp_path, b"qzforkmarker") == []
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p for p in files if p.name.split(".")[0] in {"laptop", "desktop", "late"}]
    assert [p for p in files if p.suffix == ".gz"]


def test_get_shows_the_forks_an_entry_is_part_of(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, folder = str(tmp_path / "a.db"), str(tmp_path / "b.db"), str(tmp_path / "Sync")
    for db in (a, b):
        assert runner.invoke(cli, ["--db", db, "--embedder", "none", "sync", folder]).exit_code == 0
    runner.invoke(cli, ["--db", a, "add", "lunch is at noon", "--id", "lunch"])
    for db in (a, b):
        runner.invoke(cli, ["--db", db, "sync", folder])
    for db, lunch, office in [(a, "lunch is at one", "eight"), (b, "lunch is at half past twelve", "nine")]:
        with MemoryStore(db, embedder=None) as store:  # b's are the later ones
            store.supersede("lunch", lunch, id=f"lunch-{Path(db).stem}")
        runner.invoke(cli, ["--db", db, "add", f"the office opens at {office}", "--id", "office"])
        time.sleep(0.01)
    for db in (a, b, a):
        runner.invoke(cli, ["--db", db, "sync", folder])
    shown = [runner.invoke(cli, ["--db", db, "get", "office"]) for db in (a, b)]
    assert shown[0].exit_code == 0 and shown[0].stdout == shown[1].stdout
    (line,) = [line for line in shown[0].stdout.splitlines() if line.startswith("fork: ")]
    assert line.startswith("fork: added apart with other words, kept as office~fork-")
    assert line.endswith("— office holds the latest") and "the office opens at nine" in shown[0].stdout
    corrected = runner.invoke(cli, ["--db", a, "get", "lunch-b"]).stdout
    assert "fork: corrected apart as lunch-b, lunch-a — lunch-b is current" in corrected
    data = json.loads(runner.invoke(cli, ["--db", b, "get", "lunch-b", "--json"]).stdout)
    assert data["forks"] == [{"id": "lunch", "current": "lunch-b", "others": ["lunch-a"], "added": False}]
    listed = runner.invoke(cli, ["--db", a, "conflicts"]).stdout.splitlines()
    assert sorted(listed) == ["lunch: corrected apart as lunch-b, lunch-a — lunch-b is current",
                              f"office: {line[len('fork: '):]}"]
