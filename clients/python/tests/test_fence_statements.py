"""The fence guards without a store: the statements the SQL guard sends,
and the object-store guard's reads, preconditions and retries against an
in-memory store that behaves as S3's conditional writes do. (The same
against real servers: test_fence_sql.py, test_fence_s3.py.)"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import pytest

from leasehold import LeaseholdError, fence
from leasehold.fence import ObjectHead, Precondition, PreconditionFailed, StaleFence


def test_the_update_is_one_statement_guarded_by_the_fence():
    sql, params = fence.update_statement("accounts", {"id": 42}, {"balance": 100}, 7)
    assert 'UPDATE "accounts" SET "balance" = %s, "fence" = %s WHERE "id" = %s AND "fence" <= %s RETURNING 1' in sql
    assert sql.count(";") == 0 and params == [42, 100, 7, 42, 7]


def test_the_upsert_updates_only_a_row_whose_fence_is_not_higher():
    sql, params = fence.upsert_statement("reports", {"day": "d"}, {"body": "b"}, 3)
    assert 'INSERT INTO "reports" AS existing ("day", "body", "fence") VALUES (%s, %s, %s)' in sql
    assert 'ON CONFLICT ("day") DO UPDATE SET "body" = EXCLUDED."body", "fence" = EXCLUDED."fence"' in sql
    assert 'WHERE existing."fence" <= EXCLUDED."fence"' in sql
    assert params == ["d", "d", "b", 3]


def test_identifiers_are_quoted_and_percent_signs_kept_from_placeholders():
    assert fence.quote_ident('a "b" c') == '"a ""b"" c"'
    sql, _ = fence.update_statement(("s", "t%"), {"k": 1}, {"v%s": 2}, 1)
    assert '"s"."t%%"' in sql and '"v%%s" = %s' in sql
    # The migration runs without parameters: % stays single.
    assert fence.migration("t%") == 'ALTER TABLE "t%" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0;'
    for bad in ("", "a\x00b"):
        with pytest.raises(ValueError):
            fence.quote_ident(bad)
    with pytest.raises(ValueError):
        fence.update_statement("t", {"id": 1}, {}, 1)
    with pytest.raises(ValueError):
        fence.update_statement("t", {"id": 1}, {"v": 1}, -1)


class MemoryStore:
    """Objects with an ETag and metadata, and S3's conditional puts: a
    failed If-Match or If-None-Match is a 412 (PreconditionFailed)."""

    def __init__(self):
        self.objects: Dict[str, Tuple[bytes, str, Optional[int]]] = {}
        self.puts = []
        self._version = 0

    def head(self, key: str) -> Optional[ObjectHead]:
        if key not in self.objects:
            return None
        _, etag, stored = self.objects[key]
        return ObjectHead(etag, stored)

    def put(self, key: str, body: bytes, precondition: Precondition, fence: int) -> None:
        self.puts.append(precondition)
        current = self.objects.get(key)
        if precondition.if_none_match and current is not None:
            raise PreconditionFailed("412: the object exists")
        if precondition.if_match is not None and (current is None or current[1] != precondition.if_match):
            raise PreconditionFailed("412: the ETag does not match")
        self._version += 1
        self.objects[key] = (body, f'"v{self._version}"', fence)


def test_a_guarded_put_writes_on_the_version_it_read_and_refuses_a_lower_fence():
    store = MemoryStore()
    fence.guarded_put(store, "k", b"one", 5)
    fence.guarded_put(store, "k", b"two", 5)
    assert store.puts == [Precondition(if_none_match=True), Precondition(if_match='"v1"')]
    with pytest.raises(StaleFence) as refused:
        fence.guarded_put(store, "k", b"late", 4)
    assert (refused.value.fence, refused.value.stored) == (4, 5)
    assert store.objects["k"][0] == b"two" and len(store.puts) == 2


def test_a_put_overtaken_between_read_and_write_reads_again():
    store = MemoryStore()
    fence.guarded_put(store, "k", b"one", 1)

    class Overtaken:
        """Another writer (fence ``theirs``) gets in after each read."""

        def __init__(self, theirs: int, times: int):
            self.theirs, self.times = theirs, times

        def head(self, key):
            head = store.head(key)
            if self.times:
                self.times -= 1
                store.objects[key] = (b"theirs", '"theirs%d"' % self.times, self.theirs)
            return head

        put = store.put

    # Theirs is higher: refused after the re-read, theirs kept.
    with pytest.raises(StaleFence) as refused:
        fence.guarded_put(Overtaken(theirs=9, times=1), "k", b"mine", 2)
    assert refused.value.stored == 9 and store.objects["k"][0] == b"theirs"
    # Theirs is not higher: written on the second try.
    fence.guarded_put(Overtaken(theirs=9, times=1), "k", b"mine", 9)
    assert store.objects["k"][0] == b"mine"
    # Overtaken at every try: given up, nothing written.
    with pytest.raises(LeaseholdError, match="3 conditional puts"):
        fence.guarded_put(Overtaken(theirs=9, times=3), "k", b"never", 10, attempts=3)
    assert store.objects["k"][0] == b"theirs"


def test_the_fence_column_is_the_guard_s_to_set():
    with pytest.raises(ValueError, match="fence column"):
        fence.upsert_statement("t", {"id": 1}, {"fence": 3}, 3)
