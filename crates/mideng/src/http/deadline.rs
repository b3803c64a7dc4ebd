//! A deadline for the whole request body, counted from the moment the request's head was read.
//!
//! Reading a body with a size limit bounds its length but not its duration: a client that sends
//! one byte a minute holds a connection, a task and a buffer for as long as it likes. Timeouts
//! that restart with every chunk received (tower-http's `RequestBodyTimeoutLayer`) do not stop
//! that either. [`RequestBodyDeadlineLayer`] fails the body once its deadline passes, however
//! steadily bytes still trickle in; the idempotency layer then answers 408
//! `request-body-timeout` (and so may any handler, through [`is_body_deadline`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::Request;
use http_body::Frame;
use thiserror::Error;

/// The body did not arrive in full before its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("the request body did not arrive within {limit:?}")]
pub struct BodyDeadlineElapsed {
    /// The deadline the body had.
    pub limit: Duration,
}

/// Whether `error` (anywhere in its chain of sources) is a [`BodyDeadlineElapsed`].
pub fn is_body_deadline(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(current) = source {
        if current.is::<BodyDeadlineElapsed>() {
            return true;
        }
        source = current.source();
    }
    false
}

/// Gives every request body `limit` to arrive in full.
#[derive(Clone, Copy, Debug)]
pub struct RequestBodyDeadlineLayer {
    limit: Duration,
}

impl RequestBodyDeadlineLayer {
    /// Bodies must arrive within `limit` of the request reaching this layer.
    pub fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> tower::Layer<S> for RequestBodyDeadlineLayer {
    type Service = RequestBodyDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestBodyDeadline {
            inner,
            limit: self.limit,
        }
    }
}

/// The service [`RequestBodyDeadlineLayer`] produces.
#[derive(Clone, Debug)]
pub struct RequestBodyDeadline<S> {
    inner: S,
    limit: Duration,
}

impl<S> tower::Service<Request<Body>> for RequestBodyDeadline<S>
where
    S: tower::Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let limit = self.limit;
        let request = request.map(|body| {
            Body::new(DeadlineBody {
                inner: body,
                deadline: Box::pin(tokio::time::sleep(limit)),
                limit,
            })
        });
        self.inner.call(request)
    }
}

struct DeadlineBody {
    inner: Body,
    // Boxed so that the body stays `Unpin` and needs no pin projection.
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // The deadline first: a client that keeps bytes coming must not keep the body alive.
        if self.inner.is_end_stream() {
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(context).is_ready() {
            let limit = self.limit;
            return Poll::Ready(Some(Err(Box::new(BodyDeadlineElapsed { limit }))));
        }
        Pin::new(&mut self.inner)
            .poll_frame(context)
            .map(|frame| frame.map(|result| result.map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
