"""Fence guards for the data layer: the storage refuses the writes of a
holder that was paused past its TTL.

A lease alone cannot stop a late write: a holder paused (a GC pause, a
swap-in, a frozen VM) past its TTL wakes up believing it still holds the
lock, while the broker has granted it to someone else. Every grant carries
a fence, strictly greater than every earlier grant's fence of that name; a
store that keeps the highest fence it accepted and refuses lower ones makes
the late write harmless. This module does that for the two stores the
problem is usually met in:

* SQL (PostgreSQL): a ``fence`` column on the rows the lock protects, and
  a write applied only when ``fence <= my fence``, in one statement
  (:func:`guarded_update`, :func:`guarded_upsert`, the column added by
  :func:`migration`). Equal fences are allowed: the same holder writes many
  times under one lease; its successor's fence is higher, so once the
  successor wrote, the old holder's writes are refused.
* Object stores (S3, GCS, anything with conditional writes): the object
  carries its fence in its metadata, and a put is conditional on the object
  being the one whose fence was read (:func:`guarded_put`, over an
  :class:`ObjectStore` adapter; :class:`Boto3Store` for S3 with boto3).

A resource that can store nothing (a call to a third party, an e-mail)
cannot keep a fence; ask the broker instead, right before acting, with
:meth:`leasehold.Client.check_fence` (``CheckFence``)::

    with client.acquire("billing/charge-42", ttl=30) as lease:
        amount = compute_charge()               # may take a long pause
        if not client.check_fence("billing/charge-42", lease.fence):
            raise RuntimeError("lost the lock while computing: not charging")
        payments.charge(customer, amount)       # cannot be fenced itself

That answer can be stale by the time it arrives (the window is one round
trip instead of a whole pause), so prefer a fence the store keeps when the
store can keep one.

The SQL helpers take a DB-API 2 connection whose driver uses the
``format`` paramstyle (``%s``): psycopg 3 and psycopg2. The SQL they issue
is PostgreSQL's (``ON CONFLICT``, data-modifying ``WITH``); the same
pattern works elsewhere (MySQL: ``UPDATE ... WHERE fence <= ?`` and the
affected row count; SQLite: the same ``ON CONFLICT``), see README.md. They
run in the caller's transaction and do not commit: commit it as for any
other write (with psycopg's default, a transaction is open until you do).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from .errors import LeaseholdError

#: The column the SQL helpers keep the fence in, unless told otherwise.
FENCE_COLUMN = "fence"

#: The migration that adds the fence column to a table (PostgreSQL): rows
#: written before it have fence 0, which every grant's fence passes.
MIGRATION = "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} bigint NOT NULL DEFAULT 0;"

#: A table name: one identifier, or (schema, table).
Table = Union[str, Sequence[str]]


class StaleFence(LeaseholdError):
    """The store refused a write: it holds a higher fence than the one the
    write was made with, so a later holder of the lock has written since.
    Stop acting on the lease (it is lost, whatever this process believes).

    ``fence``: the fence the write was made with. ``stored``: the fence the
    store holds, when known (None when a concurrent write changed it while
    the refused write was being decided). ``target``: what was written to
    (a table and key, or an object key)."""

    def __init__(self, fence: int, stored: Optional[int], target: str):
        holds = "a higher fence" if stored is None else f"fence {stored}"
        super().__init__(
            f"stale fence: {target} holds {holds}, the write was made with fence {fence}: "
            "a later holder of the lock wrote since, so this write was refused"
        )
        self.fence = fence
        self.stored = stored
        self.target = target


class NoSuchRow(LeaseholdError, LookupError):
    """:func:`guarded_update` found no row with that key (nothing was
    written). Use :func:`guarded_upsert` for rows that may not exist yet."""

    def __init__(self, target: str):
        super().__init__(f"no row {target}: nothing was written (guarded_upsert creates rows)")
        self.target = target


# -- SQL -------------------------------------------------------------------------


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (``"My ""odd"" table"``), safe to
    put in a statement whatever it holds (as PostgreSQL's
    ``quote_ident``, always quoted: so the name is taken as spelt, case
    included)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an SQL identifier must be a non-empty string, got {name!r}")
    if "\x00" in name:
        raise ValueError(f"an SQL identifier cannot contain a NUL character: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def _ident(name: str) -> str:
    """An identifier for a statement sent with parameters to a ``format``
    paramstyle driver, where ``%`` starts a placeholder: doubled."""
    return quote_ident(name).replace("%", "%%")


def _table(table: Table, quote=_ident) -> str:
    """A table name quoted: ``"t"``, or ``"schema"."t"`` from a pair. A
    string is one identifier (a dot in it is part of the name)."""
    parts = [table] if isinstance(table, str) else list(table)
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"a table is a name or a (schema, table) pair, got {table!r}")
    return ".".join(quote(p) for p in parts)


def migration(table: Table, column: str = FENCE_COLUMN) -> str:
    """The statement that adds the fence column to ``table`` (run it
    without parameters)::

        ALTER TABLE "accounts" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0;
    """
    return MIGRATION.format(table=_table(table, quote_ident), column=quote_ident(column))


def _columns(what: str, values: Mapping[str, Any]) -> List[Tuple[str, Any]]:
    if not isinstance(values, Mapping) or not values:
        raise ValueError(f"{what} must be a non-empty mapping of column names to values")
    return list(values.items())


def _describe(table: Table, key: Mapping[str, Any]) -> str:
    name = table if isinstance(table, str) else ".".join(table)
    where = ", ".join(f"{k}={v!r}" for k, v in key.items())
    return f"{name} ({where})"


def _checked(key: Mapping[str, Any], values: Mapping[str, Any], fence_column: str):
    keys = _columns("key", key)
    sets = _columns("values", values)
    if fence_column in key or fence_column in values:
        raise ValueError(f"the fence column {fence_column!r} is set by the guard: leave it out of key and values")
    return keys, sets


def _check_fence(fence: int) -> int:
    if isinstance(fence, bool) or not isinstance(fence, int) or fence < 0:
        raise ValueError(f"fence must be a lease's fence (a non-negative int), got {fence!r}")
    return fence


def update_statement(
    table: Table, key: Mapping[str, Any], values: Mapping[str, Any], fence: int, fence_column: str = FENCE_COLUMN
) -> Tuple[str, List[Any]]:
    """The statement :func:`guarded_update` runs, and its parameters
    (``format`` paramstyle). One statement: the row as it was (its fence)
    and the guarded update, which sees the same snapshot; it returns how
    many rows were written and the highest fence the matching rows held::

        WITH before_write AS (SELECT "fence" FROM "t" WHERE "id" = %s),
             written AS (UPDATE "t" SET "v" = %s, "fence" = %s
                         WHERE "id" = %s AND "fence" <= %s RETURNING 1)
        SELECT (SELECT count(*) FROM written), (SELECT max("fence") FROM before_write)
    """
    _check_fence(fence)
    keys, sets = _checked(key, values, fence_column)
    t = _table(table)
    f = _ident(fence_column)
    where = " AND ".join(f"{_ident(k)} = %s" for k, _ in keys)
    assignments = ", ".join(f"{_ident(c)} = %s" for c, _ in sets)
    sql = (
        f"WITH before_write AS (SELECT {f} FROM {t} WHERE {where}), "
        f"written AS (UPDATE {t} SET {assignments}, {f} = %s WHERE {where} AND {f} <= %s RETURNING 1) "
        f"SELECT (SELECT count(*) FROM written), (SELECT max({f}) FROM before_write)"
    )
    params = [v for _, v in keys] + [v for _, v in sets] + [fence] + [v for _, v in keys] + [fence]
    return sql, params


def upsert_statement(
    table: Table, key: Mapping[str, Any], values: Mapping[str, Any], fence: int, fence_column: str = FENCE_COLUMN
) -> Tuple[str, List[Any]]:
    """The statement :func:`guarded_upsert` runs, and its parameters: an
    insert that, on a conflict on the key's columns (they need a unique
    index or primary key), updates only a row whose fence is not higher::

        INSERT INTO "t" AS existing ("id", "v", "fence") VALUES (%s, %s, %s)
        ON CONFLICT ("id") DO UPDATE SET "v" = EXCLUDED."v", "fence" = EXCLUDED."fence"
        WHERE existing."fence" <= EXCLUDED."fence"

    wrapped as :func:`update_statement` is, to tell the fence that refused
    it."""
    _check_fence(fence)
    keys, sets = _checked(key, values, fence_column)
    t = _table(table)
    f = _ident(fence_column)
    where = " AND ".join(f"{_ident(k)} = %s" for k, _ in keys)
    columns = ", ".join(_ident(c) for c, _ in keys + sets) + f", {f}"
    placeholders = ", ".join(["%s"] * (len(keys) + len(sets) + 1))
    conflict = ", ".join(_ident(k) for k, _ in keys)
    assignments = ", ".join(f"{_ident(c)} = EXCLUDED.{_ident(c)}" for c, _ in sets)
    sql = (
        f"WITH before_write AS (SELECT {f} FROM {t} WHERE {where}), "
        f"written AS (INSERT INTO {t} AS existing ({columns}) VALUES ({placeholders}) "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {assignments}, {f} = EXCLUDED.{f} "
        f"WHERE existing.{f} <= EXCLUDED.{f} RETURNING 1) "
        f"SELECT (SELECT count(*) FROM written), (SELECT max({f}) FROM before_write)"
    )
    params = [v for _, v in keys] + [v for _, v in keys] + [v for _, v in sets] + [fence]
    return sql, params


def _run(connection: Any, sql: str, params: List[Any]) -> Tuple[int, Optional[int]]:
    """Runs the guard's statement on a connection (a cursor of its own) or
    on a cursor the caller gave; returns (rows written, fence before)."""
    if hasattr(connection, "cursor"):
        cursor = connection.cursor()
        try:
            cursor.execute(sql, params)
            written, stored = cursor.fetchone()
        finally:
            cursor.close()
    else:
        connection.execute(sql, params)
        written, stored = connection.fetchone()
    return int(written), None if stored is None else int(stored)


def guarded_update(
    connection: Any,
    table: Table,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    fence: int,
    *,
    fence_column: str = FENCE_COLUMN,
) -> int:
    """Writes ``values`` to the row(s) of ``table`` whose columns equal
    ``key``, and sets their fence to ``fence``, only where the fence they
    hold is not higher: ``UPDATE t SET ..., fence = f WHERE key AND fence
    <= f``, one statement, in the caller's transaction. Returns how many
    rows were written.

    Raises :class:`StaleFence` when the row holds a higher fence (a later
    holder wrote: nothing was written), :class:`NoSuchRow` when no row has
    that key. Both are told apart in the same statement, which reads the
    row's fence in the snapshot the update starts from; a concurrent
    transaction that changes the row meanwhile makes the update wait and
    re-check, so the decision is always the row's latest, and the
    exception's ``stored`` is None when it was that transaction's fence
    that refused the write.

    ``connection``: a DB-API connection (or cursor) of a
    ``format``-paramstyle driver (psycopg 3, psycopg2); identifiers are quoted (:func:`quote_ident`),
    values are bound parameters. Example::

        fence.guarded_update(conn, "accounts", {"id": 42}, {"balance": 100}, lease.fence)
        conn.commit()
    """
    sql, params = update_statement(table, key, values, fence, fence_column)
    written, stored = _run(connection, sql, params)
    if written:
        return written
    if stored is None:
        raise NoSuchRow(_describe(table, key))
    raise StaleFence(fence, stored if stored > fence else None, _describe(table, key))


def guarded_upsert(
    connection: Any,
    table: Table,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    fence: int,
    *,
    fence_column: str = FENCE_COLUMN,
) -> None:
    """Creates the row of ``table`` with ``key``, ``values`` and ``fence``,
    or, if it exists, writes ``values`` and ``fence`` to it only where its
    fence is not higher (``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE
    t.fence <= EXCLUDED.fence``: one statement, in the caller's
    transaction). The key's columns need a unique index (or be the primary
    key). Raises :class:`StaleFence` when the row holds a higher fence
    (nothing was written). Example::

        fence.guarded_upsert(conn, "reports", {"day": "2026-12-05"}, {"body": text}, lease.fence)
        conn.commit()
    """
    sql, params = upsert_statement(table, key, values, fence, fence_column)
    written, stored = _run(connection, sql, params)
    if not written:
        raise StaleFence(fence, stored if stored is not None and stored > fence else None, _describe(table, key))


# -- object stores ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ObjectHead:
    """What a guarded put reads of an object before writing it: its ETag
    (the version a conditional write names) and the fence in its metadata
    (None for an object written without one: any fence may replace it)."""

    etag: str
    fence: Optional[int]


@dataclasses.dataclass(frozen=True)
class Precondition:
    """The condition a put is made on: ``if_match`` (an ETag: the object
    must still be that version, ``If-Match``), or ``if_none_match`` (it must
    not exist, ``If-None-Match: *``)."""

    if_match: Optional[str] = None
    if_none_match: bool = False


class PreconditionFailed(Exception):
    """What an adapter's :meth:`ObjectStore.put` raises when the store
    refused the write for its precondition (HTTP 412, or S3's 409
    ConditionalRequestConflict): someone wrote the object in between."""


class ObjectStore(Protocol):
    """The adapter a guarded put needs from an object store's SDK: plug in
    your SDK with these two methods (:class:`Boto3Store` is one for S3)."""

    def head(self, key: str) -> Optional[ObjectHead]:
        """The object's ETag and fence (metadata ``fence``), or None if it
        does not exist."""
        ...

    def put(self, key: str, body: bytes, precondition: Precondition, fence: int) -> None:
        """Writes ``body`` with metadata ``fence`` = ``fence``, on
        ``precondition``; raises :class:`PreconditionFailed` if the store
        refused it for that."""
        ...


#: How many times a guarded put reads and tries again when another write
#: slips between its read and its write.
PUT_ATTEMPTS = 5


def guarded_put(store: ObjectStore, key: str, body: bytes, fence: int, *, attempts: int = PUT_ATTEMPTS) -> None:
    """Writes the object ``key`` with the fence in its metadata, unless it
    holds a higher fence: reads it (HEAD); a higher fence is
    :class:`StaleFence` (nothing written); else puts it on the condition
    that it is still what was read (``If-Match: <etag>``, or
    ``If-None-Match: *`` when there was none), so a write that slipped in
    between is not overwritten: the put is refused (412), and the object is
    read again and the put retried, up to ``attempts`` times, ending in
    :class:`StaleFence` if the newcomer's fence is higher.

    Equal fences pass (the same holder writes again under one lease).
    Raises :class:`LeaseholdError` when every attempt was overtaken by
    another write (writers with fences no higher than this one racing for
    the object)."""
    _check_fence(fence)
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    for _ in range(attempts):
        head = store.head(key)
        if head is not None and head.fence is not None and head.fence > fence:
            raise StaleFence(fence, head.fence, f"object {key!r}")
        precondition = Precondition(if_none_match=True) if head is None else Precondition(if_match=head.etag)
        try:
            store.put(key, body, precondition, fence)
            return
        except PreconditionFailed:
            continue  # written in between: read it again
    raise LeaseholdError(
        f"object {key!r}: {attempts} conditional puts in a row were overtaken by other writes; nothing was written"
    )


class Boto3Store:
    """An :class:`ObjectStore` over a boto3 S3 client and a bucket: the
    fence in the user metadata (``x-amz-meta-fence``), conditional writes
    with ``IfMatch`` / ``IfNoneMatch="*"`` (S3 since 2024; botocore must
    know those parameters: 1.35.65 or later)::

        s3 = boto3.client("s3")
        fence.guarded_put(fence.Boto3Store(s3, "reports"), "daily.csv", data, lease.fence)

    GCS's XML API takes the same headers (``x-goog-meta-fence``, with
    ``If-Match``; its JSON API has ``ifGenerationMatch``): write an adapter
    of the same two methods for google-cloud-storage."""

    def __init__(self, client: Any, bucket: str):
        self._client = client
        self._bucket = bucket

    def head(self, key: str) -> Optional[ObjectHead]:
        try:
            r = self._client.head_object(Bucket=self._bucket, Key=key)
        except Exception as e:
            if _status(e) == 404:
                return None
            raise
        raw = (r.get("Metadata") or {}).get("fence")
        try:
            stored = None if raw is None else int(raw)
        except ValueError:
            raise LeaseholdError(f"object {key!r} has fence metadata {raw!r}, which is not an integer") from None
        return ObjectHead(etag=r["ETag"], fence=stored)

    def put(self, key: str, body: bytes, precondition: Precondition, fence: int) -> None:
        condition = {"IfNoneMatch": "*"} if precondition.if_none_match else {"IfMatch": precondition.if_match}
        try:
            self._client.put_object(
                Bucket=self._bucket, Key=key, Body=body, Metadata={"fence": str(fence)}, **condition
            )
        except Exception as e:
            # 412: the condition failed; 409: a concurrent conditional
            # write (S3's ConditionalRequestConflict); 404 to an If-Match:
            # the object was deleted since it was read. Each means "read
            # it again", not a failure of the store.
            status = _status(e)
            if status in (409, 412) or (status == 404 and not precondition.if_none_match):
                raise PreconditionFailed(str(e)) from e
            raise


def _status(error: BaseException) -> Optional[int]:
    """The HTTP status of a botocore ClientError (None for anything else)."""
    response = getattr(error, "response", None)
    if not isinstance(response, Mapping):
        return None
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


__all__: Iterable[str] = [
    "FENCE_COLUMN",
    "MIGRATION",
    "PUT_ATTEMPTS",
    "Boto3Store",
    "NoSuchRow",
    "ObjectHead",
    "ObjectStore",
    "Precondition",
    "PreconditionFailed",
    "StaleFence",
    "guarded_put",
    "guarded_update",
    "guarded_upsert",
    "migration",
    "quote_ident",
    "update_statement",
    "upsert_statement",
]
