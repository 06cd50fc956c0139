//! `sluice soak`: mixed traffic against the engine and Linux side by side in the switched
//! lab (sluice-experiments' soak); prints the table, or JSON with `--json`, and exits
//! non-zero if any byte was wrong or any error was counted.

use std::io::Write;

use sluice_experiments::error::ExperimentError;
use sluice_experiments::soak::{self, SoakArgs};

/// Runs `sluice soak`.
pub fn run(args: &SoakArgs) -> Result<(), ExperimentError> {
    let report = soak::run(args)?;
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| ExperimentError::Workload(format!("the JSON report: {e}")))?;
    if let Some(path) = &args.out {
        std::fs::write(path, &json)
            .map_err(|e| ExperimentError::Io(format!("write {}", path.display()), e))?;
    }
    if args.json {
        eprint!("{}", report.table());
        println!("{json}");
    } else {
        print!("{}", report.table());
    }
    let _ = std::io::stdout().flush();
    if report.passed() {
        Ok(())
    } else {
        Err(ExperimentError::Workload(format!(
            "the soak failed: {}",
            report.failures.join("; ")
        )))
    }
}
