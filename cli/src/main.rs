//! `fencelock`: the operator's command for fencelock's locks (list, inspect, release, watch).

mod args;
mod commands;
mod connect;
mod failure;
mod output;

use std::process::ExitCode;

use clap::Parser;

use crate::args::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(runtime) => runtime.block_on(commands::run(cli)),
        Err(error) => Err(failure::Failure::new("cannot start", error)),
    };
    match outcome {
        Ok(()) | Err(failure::Failure::OutputClosed) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("fencelock: {failure}");
            ExitCode::FAILURE
        }
    }
}
