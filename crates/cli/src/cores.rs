//! `--cores N` and `--layout`: the data-path on several cores (issue 20; docs/multicore.md).
//! An embedded application then runs as one instance per flow group, made by a factory;
//! totals such as `sink --count` are shared between the instances.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use signal_hook::consts::{SIGINT, SIGTERM};
use sluice_engine::apps::{EchoApp, SinkApp, SourceApp};
use sluice_engine::multicore::layout::MAX_GROUPS;
use sluice_engine::multicore::Layout;
use sluice_engine::{App, AppStatus, EngineError};
use sluice_tcp::{Instant, Stack};

use crate::error::CliError;

/// `--layout` as the flag spells it (flextoe.txt 3.2, Table 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// A thread per flow group, each with its pre, protocol and post roles (N cores).
    FlowGroups,
    /// NIC and pre on one core, protocol and post on the other (2 cores).
    Pipelined,
    /// NIC and protocol on one core, N - 1 pre/post replicas on the others.
    Replicated,
    /// Every role on one core (1 core).
    RunToCompletion,
}

/// The data-path's cores and their layout (shared by every engine subcommand).
#[derive(Args, Debug, Clone)]
pub struct CoresArgs {
    /// Data-path cores, 1 to the machine's; more than 1 runs the multi-core engine, one
    /// application instance per flow group.
    #[arg(long, default_value_t = 1)]
    pub(crate) cores: usize,
    /// How the data-path's roles use the cores: flow-groups (the default with more than one
    /// core), pipelined (2 cores), replicated (pre/post replicas on cores 2..N) or
    /// run-to-completion (1 core, the multi-core runtime's roles on one thread).
    #[arg(long, value_enum)]
    pub(crate) layout: Option<LayoutArg>,
}

impl CoresArgs {
    /// The multi-core layout the flags ask for, or None for the single-core engine;
    /// checked against this machine's cores.
    pub(crate) fn layout(&self) -> Result<Option<Layout>, CliError> {
        let machine = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.layout_on(machine)
    }

    /// [`CoresArgs::layout`] on a machine of `machine` cores.
    pub(crate) fn layout_on(&self, machine: usize) -> Result<Option<Layout>, CliError> {
        let n = self.cores;
        let most = machine.clamp(1, usize::from(MAX_GROUPS));
        if !(1..=most).contains(&n) {
            return Err(CliError::usage(format!(
                "--cores {n}: must be within 1..={most} (this machine has {machine} core(s))"
            )));
        }
        let groups = n as u16;
        let exactly = |want: usize, name: &str| {
            if n == want {
                Ok(())
            } else {
                Err(CliError::usage(format!(
                    "--layout {name} runs on {want} core(s): give --cores {want}"
                )))
            }
        };
        Ok(match self.layout {
            None if n == 1 => None,
            None | Some(LayoutArg::FlowGroups) => Some(Layout::FlowGroups { groups }),
            Some(LayoutArg::RunToCompletion) => {
                exactly(1, "run-to-completion")?;
                Some(Layout::RunToCompletion { groups: 1 })
            }
            Some(LayoutArg::Pipelined) => {
                exactly(2, "pipelined")?;
                Some(Layout::Pipelined { groups: 1 })
            }
            Some(LayoutArg::Replicated) => {
                if n < 2 {
                    return Err(CliError::usage(
                        "--layout replicated needs --cores 2 or more (the NIC and protocol \
                         roles on one, a pre/post replica on each other)",
                    ));
                }
                Some(Layout::Replicated {
                    groups: 1,
                    replicas: groups - 1,
                })
            }
        })
    }

    /// The layout for the service (`sluice engine`): by default its one flow group's core
    /// runs the service, and the other cores take the device, the checksums and the
    /// pre/post stages (pipelined on 2 cores, replicated pre/post beyond); `--layout
    /// flow-groups` runs the service as one part per flow group, each serving its queue
    /// pair of every context (docs/service.md, "Flow groups").
    pub(crate) fn service_layout(&self) -> Result<Option<Layout>, CliError> {
        let machine = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.service_layout_on(machine)
    }

    /// [`CoresArgs::service_layout`] on a machine of `machine` cores.
    pub(crate) fn service_layout_on(&self, machine: usize) -> Result<Option<Layout>, CliError> {
        let layout = self.layout_on(machine)?;
        Ok(match (self.layout, layout) {
            (None, Some(_)) if self.cores == 2 => Some(Layout::Pipelined { groups: 1 }),
            (None, Some(_)) => Some(Layout::Replicated {
                groups: 1,
                replicas: self.cores as u16 - 1,
            }),
            (_, layout) => layout,
        })
    }

    /// Refuses the multi-core flags for a subcommand that runs on one core only.
    pub(crate) fn single_core(&self, what: &str, why: &str) -> Result<(), CliError> {
        match self.layout()? {
            None => Ok(()),
            Some(_) => Err(CliError::usage(format!(
                "--cores {} / --layout: {what} runs on one data-path core only ({why}); use --cores 1",
                self.cores
            ))),
        }
    }
}

/// A flag SIGTERM and SIGINT set: every group's application then ends (the multi-core
/// engine's threads stop once all have, after `--linger`).
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|source| CliError::Signal { signal, source })?;
    }
    Ok(stop)
}

/// An echo server in one flow group, until `stop` is set.
pub struct GroupEcho {
    echo: EchoApp,
    stop: Arc<AtomicBool>,
}

impl GroupEcho {
    /// Group's echo server on `port`, ending when `stop` is set.
    pub fn new(port: u16, stop: Arc<AtomicBool>) -> Self {
        GroupEcho {
            echo: EchoApp::new(port),
            stop,
        }
    }
}

impl App for GroupEcho {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        if self.stop.load(Ordering::Relaxed) {
            return Ok(AppStatus::Done);
        }
        self.echo.poll(stack, now)
    }
}

/// A sink in one flow group whose `--count` counts the connections of every group.
pub struct GroupSink {
    sink: SinkApp,
    closed: Arc<AtomicUsize>,
    count: Option<usize>,
}

impl GroupSink {
    /// Group's sink on `port`; `closed` is shared by every group's.
    pub fn new(port: u16, count: Option<usize>, closed: Arc<AtomicUsize>) -> Self {
        GroupSink {
            sink: SinkApp::new(port),
            closed,
            count,
        }
    }
}

impl App for GroupSink {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        self.sink.poll(stack, now)?;
        // Only the count is kept (each report was printed): they would otherwise pile up.
        let new = self.sink.reports.len();
        self.sink.reports.clear();
        let total = self.closed.fetch_add(new, Ordering::AcqRel) + new;
        Ok(match self.count {
            Some(n) if total >= n => AppStatus::Done,
            _ => AppStatus::Running,
        })
    }
}

/// `sluice source` in flow group 0 (its connection's local port hashes there); the other
/// groups have nothing to do.
pub struct GroupSource(pub Option<SourceApp>);

impl App for GroupSource {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        match self.0.as_mut() {
            Some(source) => source.poll(stack, now),
            None => Ok(AppStatus::Done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cores: CoresArgs,
    }

    fn layout(args: &[&str], machine: usize) -> Result<Option<Layout>, CliError> {
        Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
            .map_err(|e| CliError::usage(e.to_string()))?
            .cores
            .layout_on(machine)
    }

    #[test]
    fn cores_and_layout_give_the_runtime_layout() {
        assert_eq!(layout(&[], 2).unwrap(), None, "one core: the single engine");
        assert_eq!(layout(&["--cores", "1"], 2).unwrap(), None);
        assert_eq!(
            layout(&["--cores", "2"], 2).unwrap(),
            Some(Layout::FlowGroups { groups: 2 }),
            "flow groups by default"
        );
        assert_eq!(
            layout(&["--cores", "1", "--layout", "run-to-completion"], 2).unwrap(),
            Some(Layout::RunToCompletion { groups: 1 })
        );
        assert_eq!(
            layout(&["--cores", "2", "--layout", "pipelined"], 2).unwrap(),
            Some(Layout::Pipelined { groups: 1 })
        );
        assert_eq!(
            layout(&["--cores", "4", "--layout", "replicated"], 8).unwrap(),
            Some(Layout::Replicated {
                groups: 1,
                replicas: 3
            })
        );
        assert_eq!(
            layout(&["--cores", "1", "--layout", "flow-groups"], 1).unwrap(),
            Some(Layout::FlowGroups { groups: 1 })
        );
    }

    fn service_layout(args: &[&str], machine: usize) -> Result<Option<Layout>, CliError> {
        Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
            .map_err(|e| CliError::usage(e.to_string()))?
            .cores
            .service_layout_on(machine)
    }

    #[test]
    fn the_service_runs_in_one_flow_group_unless_flow_groups_are_asked_for() {
        assert_eq!(
            service_layout(&[], 2).unwrap(),
            None,
            "one core: the single engine"
        );
        assert_eq!(
            service_layout(&["--cores", "2"], 2).unwrap(),
            Some(Layout::Pipelined { groups: 1 }),
            "pipelined by default on 2 cores"
        );
        assert_eq!(
            service_layout(&["--cores", "4"], 8).unwrap(),
            Some(Layout::Replicated {
                groups: 1,
                replicas: 3
            }),
            "replicated pre/post beyond"
        );
        assert_eq!(
            service_layout(&["--cores", "2", "--layout", "replicated"], 2).unwrap(),
            Some(Layout::Replicated {
                groups: 1,
                replicas: 1
            })
        );
        assert_eq!(
            service_layout(&["--cores", "2", "--layout", "flow-groups"], 2).unwrap(),
            Some(Layout::FlowGroups { groups: 2 }),
            "the service in flow groups, one part per core"
        );
        assert!(
            service_layout(&["--cores", "3"], 2).is_err(),
            "beyond the machine"
        );
    }

    #[test]
    fn cores_beyond_the_machine_and_mismatched_layouts_are_usage_errors() {
        for (args, says) in [
            (&["--cores", "3"][..], "must be within 1..=2"),
            (&["--cores", "0"][..], "must be within 1..=2"),
            (
                &["--cores", "2", "--layout", "run-to-completion"][..],
                "give --cores 1",
            ),
            (&["--layout", "pipelined"][..], "give --cores 2"),
            (&["--layout", "replicated"][..], "needs --cores 2 or more"),
        ] {
            let e = layout(args, 2).unwrap_err();
            assert!(matches!(e, CliError::Usage(_)), "{args:?}: {e:?}");
            assert!(e.to_string().contains(says), "{args:?}: {e}");
        }
        let e = layout(&["--layout", "sideways"], 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("flow-groups"), "clap names the layouts: {e}");
    }
}
