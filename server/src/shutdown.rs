//! Shutdown signals: SIGTERM (Kubernetes, systemd) and SIGINT (Ctrl-C).

use std::future::Future;

/// Starts listening for SIGTERM and SIGINT *now* (so a signal that arrives
/// before the returned future is first polled is not lost, and does not kill
/// the process), and returns a future that resolves at the first of them.
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = int.recv() => tracing::info!("SIGINT received"),
                }
            }
            (term, int) => {
                let e = term
                    .err()
                    .or(int.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(error = %e, "cannot listen for signals; stop the process with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}
