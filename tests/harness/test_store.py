"""The results store: run directories, atomic `latest` links, and listing runs whatever
state their files are in."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from harness import store
from tests.harness.test_report_support import write_checker_error_run, write_lost_write_run, write_valid_run

T0 = datetime(2026, 11, 22, 7, 0, 0, tzinfo=timezone.utc)


def test_run_dirs_are_named_by_utc_time_and_latest_links_follow_the_newest(tmp_path):
    first = store.create_run_dir(tmp_path, "queue", now=T0)
    assert first == tmp_path / "queue" / "20261122T070000.000000"
    second = store.create_run_dir(tmp_path, "delivery", now=T0 + timedelta(seconds=5))
    assert os.readlink(tmp_path / "latest") == "delivery/20261122T070005.000000"
    assert os.readlink(tmp_path / "queue" / "latest") == "20261122T070000.000000"
    assert (tmp_path / "latest").resolve() == second.resolve()
    # relative links keep working after the tree moves
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    tmp_path.rename(moved)
    assert (moved / "latest" / "..").resolve() == (moved / "delivery").resolve()
    assert not [p for p in moved.rglob(".latest.*")], "temporary links left behind"


def test_two_runs_in_the_same_microsecond_get_different_directories(tmp_path):
    a = store.create_run_dir(tmp_path, "queue", now=T0)
    b = store.create_run_dir(tmp_path, "queue", now=T0)
    assert a != b and b.name == "20261122T070000.000001"
    assert (tmp_path / "queue" / "latest").resolve() == b.resolve()


def test_times_in_other_zones_are_stored_as_utc(tmp_path):
    cest = timezone(timedelta(hours=2))
    run = store.create_run_dir(tmp_path, "queue", now=datetime(2026, 11, 22, 9, 0, tzinfo=cest))
    assert run.name == "20261122T070000.000000"
    with pytest.raises(store.StoreError, match="timezone-aware"):
        store.create_run_dir(tmp_path, "queue", now=datetime(2026, 11, 22, 9, 0))


@pytest.mark.parametrize(
    "name, reason",
    [("", "non-empty"), ("a/b", "must not contain"), ("..", "must not start"), (".hidden", "must not start"),
     ("latest", "reserved"), ("index.html", "reserved")],
)
def test_unusable_test_names_are_refused_with_the_reason(tmp_path, name, reason):
    with pytest.raises(store.StoreError, match=reason):
        store.create_run_dir(tmp_path, name)
    assert not (tmp_path / "latest").exists()


def test_latest_is_never_replaced_when_it_is_a_real_directory(tmp_path):
    (tmp_path / "latest").mkdir()
    with pytest.raises(store.StoreError, match="not a symlink"):
        store.create_run_dir(tmp_path, "queue", now=T0)


def test_update_latest_refuses_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "queue" / "notes").mkdir(parents=True)
    with pytest.raises(store.StoreError, match="not a run directory"):
        store.update_latest(tmp_path / "queue" / "notes")


def test_list_runs_newest_first_with_verdicts_and_anomaly_counts(tmp_path):
    valid = store.create_run_dir(tmp_path, "queue-none", now=T0)
    write_valid_run(valid)
    lost = store.create_run_dir(tmp_path, "queue-partition-kill", now=T0 + timedelta(minutes=1))
    write_lost_write_run(lost)
    broken = store.create_run_dir(tmp_path, "queue-crashed-checker", now=T0 + timedelta(minutes=2))
    write_checker_error_run(broken)
    running = store.create_run_dir(tmp_path, "queue-partition-kill", now=T0 + timedelta(minutes=3))
    write_lost_write_run(running, with_results=False)

    runs = store.list_runs(tmp_path)
    assert [(r.name, r.verdict) for r in runs] == [
        ("queue-partition-kill", "incomplete"),
        ("queue-crashed-checker", "unknown"),
        ("queue-partition-kill", "invalid"),
        ("queue-none", "valid"),
    ]
    invalid = runs[2]
    assert invalid.relative_path == f"queue-partition-kill/{lost.name}"
    assert invalid.workload == "queue" and invalid.nemeses == ["partition", "kill"] and invalid.seed == 42
    assert [(a.name, a.count, a.allowed) for a in invalid.anomalies] == [("lost-write", 1, False), ("duplicate", 0, True)]
    assert [a.name for a in invalid.bad_anomalies] == ["lost-write"]
    assert runs[1].checker_errors == 1
    assert all(not r.problems for r in runs)


def test_corrupt_and_missing_files_are_problems_of_their_run_not_crashes(tmp_path):
    corrupt_results = store.create_run_dir(tmp_path, "a", now=T0)
    write_valid_run(corrupt_results)
    (corrupt_results / store.RESULTS_FILE).write_text('{"valid": tru')
    corrupt_spec = store.create_run_dir(tmp_path, "b", now=T0 + timedelta(seconds=1))
    (corrupt_spec / store.SPEC_FILE).write_bytes(b"\xff\xfe not json")
    not_an_object = store.create_run_dir(tmp_path, "c", now=T0 + timedelta(seconds=2))
    (not_an_object / store.SPEC_FILE).write_text("[1, 2]")
    (not_an_object / store.RESULTS_FILE).write_text(json.dumps({"anomalies": "many"}))
    # things in the tree that are not runs
    (tmp_path / "a" / "notes.txt").write_text("hello")
    (tmp_path / "a" / "scratch").mkdir()
    (tmp_path / "stray.txt").write_text("x")

    runs = {r.name: r for r in store.list_runs(tmp_path)}
    assert set(runs) == {"a", "b", "c"}
    assert runs["a"].verdict == "unknown" and "results.json is unreadable" in runs["a"].problems[0]
    assert runs["a"].workload == "queue"
    assert runs["b"].verdict == "incomplete" and runs["b"].workload is None
    assert any("spec.json is unreadable" in p for p in runs["b"].problems)
    assert runs["c"].verdict == "unknown"
    assert "spec.json is not a JSON object" in runs["c"].problems
    assert "results.json has no 'valid' field" in runs["c"].problems
    assert "results.json: anomalies is not a list" in runs["c"].problems


def test_an_empty_or_missing_results_root_lists_no_runs(tmp_path):
    assert store.list_runs(tmp_path / "nothing-here") == []
    assert store.list_runs(tmp_path) == []
