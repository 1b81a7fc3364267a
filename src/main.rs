use std::process::ExitCode;

use clap::Parser;
use tdset_operator::cli::{Cli, Command, crd_yaml, run_preview};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd => crd_yaml(),
        Command::Preview(args) => run_preview(&args, chrono::Utc::now()),
    };
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
