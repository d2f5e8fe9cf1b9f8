"""The object-store fence guard (leasehold.fence.guarded_put with the boto3
adapter) against a real S3 API: moto's server, started for this module,
whose PutObject honours If-Match and If-None-Match (moto 5.1.5 and later)."""

from __future__ import annotations

import pytest

from leasehold import fence
from leasehold.fence import Boto3Store, Precondition, StaleFence

from stores import MotoS3

BUCKET = "fenced"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = MotoS3(tmp_path_factory.mktemp("moto") / "moto.log")
    server.client.create_bucket(Bucket=BUCKET)
    yield server.client
    server.stop()


class Recording:
    """The boto3 adapter, recording each put's precondition."""

    def __init__(self, s3):
        self.store = Boto3Store(s3, BUCKET)
        self.puts = []

    def head(self, key):
        return self.store.head(key)

    def put(self, key, body, precondition, f):
        self.puts.append(precondition)
        self.store.put(key, body, precondition, f)


def read(s3, key):
    o = s3.get_object(Bucket=BUCKET, Key=key)
    return o["Body"].read(), o["Metadata"].get("fence")


def test_first_write_then_successor_then_a_stale_write_refused(s3, request):
    key = f"{request.node.name}.csv"
    a = Recording(s3)
    fence.guarded_put(a, key, b"A's report", 3)
    # The first write may only create the object.
    assert a.puts == [Precondition(if_none_match=True)]
    assert read(s3, key) == (b"A's report", "3")
    fence.guarded_put(a, key, b"A's report, again", 3)  # the same fence passes
    etag = s3.head_object(Bucket=BUCKET, Key=key)["ETag"]
    b = Recording(s3)
    fence.guarded_put(b, key, b"B's report", 4)
    assert b.puts == [Precondition(if_match=etag)]
    assert read(s3, key) == (b"B's report", "4")
    # A, paused meanwhile, writes with its old fence: nothing is written.
    with pytest.raises(StaleFence) as refused:
        fence.guarded_put(a, key, b"A's late report", 3)
    assert (refused.value.fence, refused.value.stored) == (3, 4)
    assert len(a.puts) == 2
    assert read(s3, key) == (b"B's report", "4")


class Overtaken(Recording):
    """Another writer with fence ``theirs`` gets its write in right after
    this adapter's read (HEAD), ``times`` times: the put that follows names
    a version that is no more, and S3 refuses it (412)."""

    def __init__(self, s3, theirs: int, times: int = 1):
        super().__init__(s3)
        self.s3, self.theirs, self.times = s3, theirs, times

    def head(self, key):
        head = self.store.head(key)
        if self.times:
            self.times -= 1
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=b"theirs", Metadata={"fence": str(self.theirs)})
        return head


def test_a_write_between_read_and_put_with_a_higher_fence_wins(s3, request):
    key = f"{request.node.name}.csv"
    fence.guarded_put(Boto3Store(s3, BUCKET), key, b"old", 1)
    late = Overtaken(s3, theirs=9)
    with pytest.raises(StaleFence) as refused:
        fence.guarded_put(late, key, b"mine", 2)
    # The put on the version read was refused (412), the re-read found 9.
    assert len(late.puts) == 1 and refused.value.stored == 9
    assert read(s3, key) == (b"theirs", "9")


def test_a_write_between_read_and_put_with_a_lower_fence_is_written_over(s3, request):
    key = f"{request.node.name}.csv"
    fence.guarded_put(Boto3Store(s3, BUCKET), key, b"old", 1)
    mine = Overtaken(s3, theirs=2)
    fence.guarded_put(mine, key, b"mine", 5)
    assert len(mine.puts) == 2 and mine.puts[1].if_match is not None
    assert read(s3, key) == (b"mine", "5")


def test_a_create_raced_by_another_create_is_retried_on_the_object(s3, request):
    key = f"{request.node.name}.csv"
    mine = Overtaken(s3, theirs=7)
    with pytest.raises(StaleFence):
        fence.guarded_put(mine, key, b"mine", 6)
    assert mine.puts == [Precondition(if_none_match=True)]
    assert read(s3, key) == (b"theirs", "7")


class Deleted(Recording):
    """The object is deleted right after this adapter's read (HEAD): the
    put that follows names a version that is gone, and S3 answers 404
    NoSuchKey to its If-Match."""

    def __init__(self, s3):
        super().__init__(s3)
        self.s3, self.once = s3, True

    def head(self, key):
        head = self.store.head(key)
        if self.once:
            self.once = False
            self.s3.delete_object(Bucket=BUCKET, Key=key)
        return head


def test_an_object_deleted_between_read_and_put_is_read_again_and_created(s3, request):
    key = f"{request.node.name}.csv"
    fence.guarded_put(Boto3Store(s3, BUCKET), key, b"old", 1)
    mine = Deleted(s3)
    fence.guarded_put(mine, key, b"mine", 2)
    # The If-Match put was refused (404: deleted), the re-read found no
    # object, and the second put created it.
    assert mine.puts[0].if_match is not None
    assert mine.puts[1:] == [Precondition(if_none_match=True)]
    assert read(s3, key) == (b"mine", "2")
