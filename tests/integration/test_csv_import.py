"""CSV import/export (ops.csv_io) on moto: good rows imported, every bad row reported with
its line and reason, a re-run changes nothing, resume after interruption, no resubscribe,
export round trip."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ops.admin import SubscriberAdmin
from ops.csv_io import checkpoint_path, export_csv, import_csv
from shared.store.subscribers import SubscriberStore, keys
from tests.integration.conftest import operations, scan_all

# The rules at a small size, with the handlers' requests counted; the 10,000-row acceptance
# runs through the CLI against `mailstep dev` (tests/e2e/test_csv_import.py).
ROWS = 200
BAD_KINDS = (
    ("not-an-email", "", "", "bad email"),
    ("{i}@", "", "", "bad email"),
    ("bad{i}@example.com", "Bad#Tag", "", "bad tag"),
    ("bad{i}@example.com", "", '{"email": "x"}', "bad attribute"),
    ("bad{i}@example.com", "", "[1, 2]", "bad attribute"),
    ("dup", "", "", "duplicate row"),
)


def make_csv(path: Path, rows: int, bad_every: int = 20) -> dict[int, str]:
    """``rows`` data rows, one in ``bad_every`` bad (5%); returns line -> expected reason."""
    expected: dict[int, str] = {}
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["email", "first_name", "tags", "attributes", "company"])
        for i in range(rows):
            line = i + 2
            if i % bad_every == bad_every - 1:
                email, tags, attributes, reason = BAD_KINDS[(i // bad_every) % len(BAD_KINDS)]
                if email == "dup":
                    email = f"User{i - 1:05d}@Example.com"  # same as the previous row once normalised
                writer.writerow([email.format(i=i), "", tags, attributes, ""])
                expected[line] = reason
            else:
                writer.writerow(
                    [
                        f"User{i:05d}@Example.com",
                        f"User {i}",
                        "imported;cohort-a" if i % 2 else "",
                        "",
                        f"Co {i % 7}",
                    ]
                )
    return expected


def profiles(table: str) -> dict[str, dict[str, Any]]:
    return {i["email"]: i for i in scan_all(table) if i["SK"] == keys.PROFILE}


def test_import_reports_bad_rows_and_second_run_changes_nothing(
    tmp_path: Path, store: SubscriberStore, resources: Any
) -> None:
    source = tmp_path / "list.csv"
    expected = make_csv(source, ROWS)
    good = ROWS - len(expected)

    with operations() as first_calls:
        first = import_csv(
            source, store, extra_tags=("import-2026",), checkpoint=checkpoint_path(source), workers=1
        )
    # new subscribers share transactions (whole subscribers, at most 100 actions each: a
    # profile, its directory item, its list-hygiene item and its 1 or 3 TAG# partners); their
    # profiles and suppressions were read with the window's (BatchGetItem, 50 addresses a
    # request), not one GetItem each
    actions = sum(4 if i % 2 == 0 else 6 for i in range(ROWS) if i + 2 not in expected)
    assert set(first_calls) == {"TransactWriteItems", "BatchGetItem"}, Counter(first_calls)
    assert Counter(first_calls)["TransactWriteItems"] <= -(-actions // 100) + -(-ROWS // 256)
    assert Counter(first_calls)["BatchGetItem"] <= -(-good // 50) + -(-ROWS // 256)

    assert first.rows == ROWS and first.created == good and first.updated == first.unchanged == 0
    assert {r.line: r.reason.split(":")[0] for r in first.rejected} == expected
    assert all(r.reason.split(":", 1)[1].strip() for r in first.rejected)  # each says why
    table = resources.tables["table_name"]
    stored = profiles(table)
    assert len(stored) == good
    sample = stored["User00001@example.com"]
    assert sample["tags"] == {"imported", "cohort-a", "import-2026"}
    assert sample["attributes"] == {"company": "Co 1"} and sample["first_name"] == "User 1"
    assert len(store.tag_members("import-2026")) == good  # TAG# partners written with each profile
    assert not checkpoint_path(source).exists()
    print(f"\nimport: {first.rows} rows in {first.seconds:.2f} s = {first.rows_per_second:.0f} rows/s")

    before = scan_all(table)
    with operations() as calls:
        second = import_csv(
            source, store, extra_tags=("import-2026",), checkpoint=checkpoint_path(source), workers=1
        )
    # the re-run reads each window's addresses 50 a request and writes nothing
    assert set(calls) == {"BatchGetItem"} and len(calls) <= -(-good // 50) + -(-ROWS // 256), calls

    assert second.unchanged == good and second.created == second.updated == 0
    assert len(second.rejected) == len(expected)
    assert sorted(map(repr, scan_all(table))) == sorted(map(repr, before))  # not one write


def test_dry_run_writes_nothing(tmp_path: Path, store: SubscriberStore, resources: Any) -> None:
    source = tmp_path / "list.csv"
    expected = make_csv(source, 60)

    report = import_csv(source, store, dry_run=True)

    assert report.valid == 60 - len(expected) and report.written == 0
    assert {r.line for r in report.rejected} == set(expected)
    assert profiles(resources.tables["table_name"]) == {}


def test_import_never_resubscribes_and_keeps_opt_outs(tmp_path: Path, store: SubscriberStore) -> None:
    store.upsert("gone@example.com", add_tags=["old"])
    store.unsubscribe("gone@example.com")
    source = tmp_path / "list.csv"
    source.write_text(
        "email,status,tags\n"
        "gone@example.com,subscribed,vip\n"
        "new-out@example.com,unsubscribed,\n"
        "weird@example.com,maybe,\n"
        'multi@example.com,,"a,b"\n'
    )

    report = import_csv(source, store)

    assert [(r.line, r.reason.split(":")[0]) for r in report.rejected] == [(4, "bad status")]
    gone = store.require_profile("gone@example.com")
    assert gone.status == "unsubscribed" and gone.tags == {"old", "vip"}
    assert store.require_profile("new-out@example.com").status == "unsubscribed"
    assert store.require_profile("multi@example.com").tags == {"a", "b"}


def test_interrupted_import_resumes_from_checkpoint(
    tmp_path: Path, store: SubscriberStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ops.csv_io as csv_io

    monkeypatch.setattr(csv_io, "WINDOW", 10)
    source = tmp_path / "list.csv"
    make_csv(source, 50, bad_every=1000)
    checkpoint = checkpoint_path(source)
    calls = {"n": 0}
    real_upsert_many = SubscriberStore.upsert_many

    def failing_upsert_many(self: Any, upserts: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > 2:  # the third window: the network goes before its transaction
            raise ConnectionError("network gone")
        return real_upsert_many(self, upserts)

    monkeypatch.setattr(SubscriberStore, "upsert_many", failing_upsert_many)
    with pytest.raises(ConnectionError):
        import_csv(source, store, checkpoint=checkpoint, workers=1)
    saved = json.loads(checkpoint.read_text())["line"]
    assert saved == 21  # two full windows of 10 rows (lines 2-21) were committed

    monkeypatch.setattr(SubscriberStore, "upsert_many", real_upsert_many)
    resumed = import_csv(source, store, checkpoint=checkpoint, workers=1)

    assert resumed.resumed_after_line == 21 and resumed.skipped_before_checkpoint == 20
    assert resumed.created == 30 and resumed.unchanged == 0  # rows 22..51: none written before
    assert len(store.tag_members("imported")) == 25 and not checkpoint.exists()


def test_export_streams_csv_that_imports_back_unchanged(tmp_path: Path, store: SubscriberStore) -> None:
    store.upsert(
        "ada@example.com", first_name="Ada", add_tags=["pro", "beta"], attributes={"seats": 3, "x": "y"}
    )
    store.upsert("bob@example.com", add_tags=["free"])
    store.unsubscribe("bob@example.com")
    admin = SubscriberAdmin(store)

    out = io.StringIO()
    assert export_csv(admin, out) == 2
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    by_email = {r["email"]: r for r in rows}
    assert by_email["ada@example.com"]["tags"] == "beta pro"
    assert json.loads(by_email["ada@example.com"]["attributes"]) == {"seats": 3, "x": "y"}
    assert by_email["bob@example.com"]["status"] == "unsubscribed"

    pro = io.StringIO()
    assert export_csv(admin, pro, tag="pro") == 1

    path = tmp_path / "export.csv"
    path.write_text(out.getvalue())
    again = import_csv(path, store)
    assert again.unchanged == 2 and not again.rejected


def test_a_file_without_an_email_column_is_refused_before_any_write(
    tmp_path: Path, store: SubscriberStore
) -> None:
    from shared.core.errors import InvalidInput

    source = tmp_path / "names.csv"
    source.write_text("name,tags\nAda,pro\n")

    with pytest.raises(InvalidInput, match="email"):
        import_csv(source, store)


def test_a_row_that_would_take_a_profile_past_a_limit_is_rejected_and_writes_nothing(
    tmp_path: Path, store: SubscriberStore, resources: Any
) -> None:
    # Given subscribers at the limits: 45 tags, 50 attributes, 8 KiB of attributes nearly
    store.upsert("tags@example.com", add_tags=[f"t{i}" for i in range(45)])
    store.upsert("attrs@example.com", attributes={f"a{i}": i for i in range(50)})
    store.upsert("big@example.com", attributes={f"n{i}": "n" * 990 for i in range(8)})
    before = scan_all(resources.tables["table_name"])
    source = tmp_path / "limits.csv"
    with source.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["email", "tags", "attributes"])
        writer.writerow(["tags@example.com", ";".join(f"u{i}" for i in range(10)), ""])
        writer.writerow(["attrs@example.com", "", '{"one_more": 1}'])
        writer.writerow(["big@example.com", "", json.dumps({"n8": "n" * 990})])

    # When the file is imported
    report = import_csv(source, store)

    # Then each row is rejected with the limit it breaks, and no item changed
    assert report.created == report.updated == 0
    reasons = {r.line: r.reason for r in report.rejected}
    assert reasons[2] == "bad tag: a subscriber holds at most 50 tags (this makes 55)"
    assert reasons[3] == "bad attribute: a subscriber holds at most 50 attributes (this makes 51)"
    assert reasons[4].startswith("bad attribute: a subscriber's attributes hold at most 8192 bytes")
    assert scan_all(resources.tables["table_name"]) == before
