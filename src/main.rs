//! The `leasehold` binary: parses the command line, sets up logging and hands
//! over to the library.

use clap::{Parser, Subcommand};
use leasehold::config::{LogFormat, ServeConfig};
use tokio::net::TcpListener;

/// Leasehold: a distributed lock broker with fencing tokens.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(ServeConfig),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(config) => {
            init_tracing(config.log_format);
            match serve(config).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "broker stopped");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(config: ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    let grpc = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {} (--listen): {e}", config.listen))?;
    let metrics = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|e| {
            format!(
                "cannot listen on {} (--metrics-listen): {e}",
                config.metrics_listen
            )
        })?;
    leasehold::server::run(grpc, metrics, config, leasehold::shutdown::signal()).await?;
    Ok(())
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal, never into log files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match format {
        LogFormat::Pretty => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
