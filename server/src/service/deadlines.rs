//! Deadlines on a plain-HTTP connection (the metrics port, the JSON API),
//! for what hyper's own timeouts leave open: a write that makes no progress
//! (a client that asks and never reads its answer, a full socket buffer),
//! and, where asked, the first bytes of a connection (hyper waits for the
//! bytes that tell HTTP/1.1 from HTTP/2 without a deadline). Anyone who
//! reaches these ports can open connections to them: each holds its socket
//! and its slot for at most the timeout without making progress.

use std::{
    future::Future,
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Sleep,
};

/// A connection whose stuck writes fail after `limit`, and (with
/// [`Deadlines::first_bytes`]) whose first bytes must come within it.
pub(super) struct Deadlines<IO> {
    io: IO,
    limit: Duration,
    /// The flag that sets `limit`, for the error that ends the connection.
    flag: &'static str,
    /// Armed while a write waits for room; reset by any progress.
    stuck: Option<Pin<Box<Sleep>>>,
    /// While the first bytes are awaited: how many are still due, and by
    /// when.
    first: Option<(usize, Pin<Box<Sleep>>)>,
}

impl<IO> Deadlines<IO> {
    /// `io`, whose writes fail once stuck for `limit` (set by `flag`).
    pub(super) fn new(io: IO, limit: Duration, flag: &'static str) -> Self {
        Deadlines {
            io,
            limit,
            flag,
            stuck: None,
            first: None,
        }
    }

    /// And whose first `n` bytes must arrive within the limit: a client
    /// that connects and says nothing, or trickles its first bytes, is
    /// closed.
    pub(super) fn first_bytes(mut self, n: usize) -> Self {
        self.first = Some((n, Box::pin(tokio::time::sleep(self.limit))));
        self
    }

    /// `poll` (of a write) as it is, but an error once it has been pending
    /// for the limit.
    fn bound<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stuck = None;
            return poll;
        }
        let limit = self.limit;
        let stuck = self
            .stuck
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stuck.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client left its answer unread past {}", self.flag),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Deadlines<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut me.io).poll_read(cx, buf);
        let Some((due, deadline)) = &mut me.first else {
            return poll;
        };
        if poll.is_ready() {
            *due = due.saturating_sub(buf.filled().len() - before);
            if *due == 0 {
                me.first = None;
            }
            return poll;
        }
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client sent no request within {}", me.flag),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Deadlines<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_write(cx, buf);
        me.bound(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        me.bound(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_flush(cx);
        me.bound(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_shutdown(cx);
        me.bound(cx, poll)
    }
}
