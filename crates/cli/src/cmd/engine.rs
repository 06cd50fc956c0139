//! `sluice engine`: the engine as a service (docs/service.md). It owns the interface, runs
//! the core, and serves applications that attach over a Unix socket (`sluice run`, or
//! libsluice directly) until SIGTERM or SIGINT.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM};
use sluice_engine::multicore::{Layout as MultiLayout, MultiEngine};
use sluice_engine::setup::{self, Backend};
use sluice_engine::DEFAULT_SPIN_BEFORE_YIELD;
use sluice_service::{PortRange, Quotas, Service, ServiceConfig};
use sluice_shm::control::DEFAULT_SOCKET;
use sluice_shm::Layout;

use sluice_engine::hooks::HookPoint;
use sluice_shm::admin::MAX_OBJECT;

use crate::attach::{Attach, TransportArgs};
use crate::cmd::module_file;
use crate::error::CliError;

/// `sluice engine`.
#[derive(Args, Debug)]
pub struct EngineArgs {
    #[command(flatten)]
    attach: Attach,
    /// The control socket applications attach to.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// How long application threads poll before sleeping, in microseconds.
    #[arg(long, default_value_t = 10_000)]
    app_idle_us: u64,
    /// How long the engine polls with nothing to do before sleeping, in microseconds.
    #[arg(long, default_value_t = 10_000)]
    idle_us: u64,
    /// Of an idle spell, how long the engine polls before it yields its core between polls
    /// (to the applications and clients sharing the machine), in microseconds.
    #[arg(long, default_value_t = DEFAULT_SPIN_BEFORE_YIELD.as_micros() as u64)]
    spin_us: u64,
    /// Bytes per payload ring, each socket has an RX and a TX ring (a power of two,
    /// 4096 to 64 MiB).
    #[arg(long, default_value_t = Layout::default().ring_size)]
    ring_size: u32,
    /// Socket slots per application.
    #[arg(long, default_value_t = Layout::default().max_sockets)]
    max_sockets: u32,
    /// Contexts (application threads talking to the engine) per application.
    #[arg(long, default_value_t = Layout::default().max_contexts)]
    max_contexts: u32,
    /// The group (name or gid) whose members may attach; the socket is `root:<group> 0660`.
    /// If it does not exist, only root (and --allow-uid) may attach, socket `0600`.
    #[arg(long, default_value = "sluice")]
    group: String,
    /// A uid that may attach whatever its groups (repeatable).
    #[arg(long = "allow-uid")]
    allow_uid: Vec<u32>,
    /// Binding a port below this needs root or CAP_NET_BIND_SERVICE in the application.
    #[arg(long, default_value_t = 1024)]
    unprivileged_port_start: u16,
    /// Ports LO to HI reserved for UID: other uids (but root) get EACCES binding them
    /// (repeatable; ranges may not overlap).
    #[arg(long = "port-range", value_name = "UID:LO-HI")]
    port_range: Vec<PortRange>,
    /// Applications attached at once, of every uid (each also costs memory mappings: an
    /// attach over the engine's mapping budget is refused first).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_apps: u64,
    /// Applications of one uid attached at once (uid 0 exempt); over it the attach is
    /// refused with EAGAIN.
    #[arg(long, default_value_t = Quotas::default().apps_per_uid, value_parser = at_least_one())]
    apps_per_uid: u32,
    /// Open sockets of all applications of one uid (uid 0 exempt); Open over it: EMFILE.
    #[arg(long, default_value_t = Quotas::default().sockets_per_uid, value_parser = at_least_one())]
    sockets_per_uid: u32,
    /// Listeners of one application; Listen over it: ENOBUFS.
    #[arg(long, default_value_t = Quotas::default().listeners_per_app, value_parser = at_least_one())]
    listeners_per_app: u32,
    /// Listeners of all applications of one uid (uid 0 exempt); Listen over it: ENOBUFS.
    #[arg(long, default_value_t = Quotas::default().listeners_per_uid, value_parser = at_least_one())]
    listeners_per_uid: u32,
    /// Connections one application owns; Connect over it: ENOBUFS, and accepts wait in
    /// the listener's queue until it closes some.
    #[arg(long, default_value_t = Quotas::default().connections_per_app, value_parser = at_least_one())]
    connections_per_app: u32,
    /// Connections all applications of one uid own, closed ones still draining included
    /// (uid 0 exempt).
    #[arg(long, default_value_t = Quotas::default().connections_per_uid, value_parser = at_least_one())]
    connections_per_uid: u32,
    /// Commands taken from one application per loop iteration, over all its contexts.
    #[arg(long, default_value_t = Quotas::default().commands_per_app, value_parser = at_least_one())]
    commands_per_app: u32,
    /// The most bytes the connections of one uid may buffer in the core (unread, out of
    /// order, unacknowledged): past it that uid's new connections are refused at the SYN and
    /// its buffers stop growing, while other uids go on. Sizes take k, m or g; 0 for no
    /// per-uid limit; default half the core's global hard limit (--tcp-mem's HIGH).
    #[arg(long, value_name = "BYTES")]
    buffered_bytes_per_uid: Option<String>,
    /// An eBPF module to run at a hook point from the start: HOOK=FILE.o[:SECTION] or
    /// HOOK=NAME of a shipped program (HOOK ingress, established or egress; repeatable, run
    /// in order).
    /// A program the verifier refuses stops the engine before it starts.
    #[arg(long = "module", value_name = "HOOK=FILE.o[:SECTION]")]
    module: Vec<String>,
    /// Run every eBPF module in the interpreter, even where the x86-64 JIT is available
    /// (modules loaded later by `sluice ctl module load` too).
    #[arg(long)]
    no_jit: bool,
    /// Who relays spliced connections' frames: the core's splice stage, or the eBPF splice
    /// module at ingress (attached if no `--module` brings one), with the core's stage
    /// keeping SYN, FIN, RST, SACK blocks and the close.
    #[arg(long, value_enum, default_value = "core")]
    splice: SpliceWith,
}

/// `--splice`: where splices run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SpliceWith {
    /// The core's built-in splice stage.
    Core,
    /// The eBPF splice module (crates/ebpf/programs/splice.c).
    Ebpf,
}

/// A verified module from `--module`, ready to attach.
struct StartModule {
    at: HookPoint,
    name: String,
    section: String,
    program: sluice_ebpf::Program,
    maps: sluice_ebpf::Maps,
}

/// Reads and verifies every `--module`, before anything else is set up.
fn start_modules(specs: &[String]) -> Result<Vec<StartModule>, CliError> {
    specs
        .iter()
        .map(|spec| {
            let (hook, object) = spec.split_once('=').ok_or_else(|| {
                CliError::usage(format!("--module {spec}: HOOK=FILE.o[:SECTION]"))
            })?;
            let at = match hook {
                "ingress" => HookPoint::Ingress,
                "egress" => HookPoint::Egress,
                "established" => HookPoint::Established,
                _ => {
                    return Err(CliError::usage(format!(
                        "--module {spec}: no hook point {hook:?} (ingress, established or egress)"
                    )))
                }
            };
            // The same bound as `sluice ctl module load`, so a module that loads at start
            // loads at run time too.
            let m = module_file::read(object, MAX_OBJECT)
                .map_err(|e| CliError::usage(format!("--module {spec}: {e}")))?;
            let (program, maps) = sluice_ebpf::load(&m.bytes, &m.section)
                .map_err(|e| CliError::usage(format!("--module {spec}: {e}")))?;
            Ok(StartModule {
                at,
                name: m.name,
                section: m.section,
                program,
                maps,
            })
        })
        .collect()
}

/// A quota flag's parser: 0 would lock every application out.
fn at_least_one() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..)
}

/// The gid of `group` (a name, or a number); None, said on stderr, if there is none.
fn resolve_group(group: &str) -> Option<u32> {
    let found = match group.parse::<u32>() {
        Ok(gid) => nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)),
        Err(_) => nix::unistd::Group::from_name(group),
    };
    match found {
        Ok(Some(g)) => Some(g.gid.as_raw()),
        Ok(None) | Err(_) => {
            eprintln!(
                "sluice engine: group {group:?} does not exist: only root and the \
                 --allow-uid uids may attach (socket mode 0600); create it, or name \
                 another with --group"
            );
            None
        }
    }
}

/// The backend's name as the flag spells it.
fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::AfPacket => "af_packet",
        Backend::Tap => "tap",
        Backend::AfXdp => "af_xdp",
        Backend::Sim => "sim",
    }
}

/// The core's counters an operator of the engine looks at, as `name value` lines like the
/// service's.
fn core_counters(stack: &sluice_tcp::Stack) -> String {
    format_rows(&core_rows(stack))
}

/// `name value` lines.
fn format_rows(rows: &[(&str, u64)]) -> String {
    rows.iter()
        .map(|(name, v)| format!("{name:<25} {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The core's counters [`core_counters`] prints.
fn core_rows(stack: &sluice_tcp::Stack) -> [(&'static str, u64); 16] {
    let c = stack.counters();
    let rows: [(&str, u64); 16] = [
        ("frames_rx", c.frames_rx),
        ("frames_tx", c.frames_tx),
        ("rst_sent", c.rst_sent),
        ("timeouts", c.timeouts),
        ("syn_cookies_sent", c.syn_cookies_sent),
        ("syn_cookies_accepted", c.syn_cookies_accepted),
        // SYNs dropped because the listener's accept queue was full (issue 23: the stalls).
        ("accept_queue_overflow", c.accept_queue_overflow),
        ("teardown_offloaded", c.teardown_offloaded),
        ("teardown_refused_state", c.teardown_refused_state),
        ("teardown_refused_full", c.teardown_refused_full),
        ("teardown_completed", c.teardown_completed),
        ("teardown_timed_out", c.teardown_timed_out),
        ("teardown_reset", c.teardown_reset),
        ("teardown_data_after_close", c.teardown_data_after_close),
        ("teardown_retransmits", c.teardown_retransmits),
        ("teardown_flows", stack.teardown_flows() as u64),
    ];
    rows
}

/// Runs `sluice engine` until SIGTERM or SIGINT.
pub fn run(args: &EngineArgs) -> Result<(), CliError> {
    // First: a refused module says so before anything is set up.
    let modules = start_modules(&args.module)?;
    let cores = args.attach.cores.service_layout()?;
    if args.attach.backend == Backend::Sim {
        return Err(CliError::usage(
            "sluice engine serves applications on a real interface: \
             --backend sim is not supported here",
        ));
    }
    let layout = Layout {
        max_sockets: args.max_sockets,
        max_contexts: args.max_contexts,
        ring_size: args.ring_size,
        ..Layout::default()
    };
    layout
        .validate()
        .map_err(|e| CliError::usage(format!("--ring-size/--max-sockets/--max-contexts: {e}")))?;
    if let Some(cores) = cores {
        if !modules.is_empty() || args.splice == SpliceWith::Ebpf {
            return Err(CliError::usage(
                "--module / --splice ebpf: the service on several data-path cores takes no \
                 modules yet (the multi-core engine's hook points are its roles'); use --cores 1",
            ));
        }
        return run_on_cores(args, layout, cores);
    }
    let opts = args.attach.options()?;
    let linger = args.attach.linger()?;
    let mut engine = setup::open(&opts)?;
    engine.hooks.modules_mut().no_jit = args.no_jit;
    for m in modules {
        let id = engine
            .hooks
            .modules_mut()
            .attach(m.at, &m.name, &m.section, m.program, m.maps)
            .map_err(|e| CliError::usage(format!("--module: {e}")))?;
        let mode = engine.hooks.modules().modules().last().map(|m| m.mode());
        println!(
            "sluice engine: module {id}: {} ({}) at {} [{}]",
            m.name,
            m.section,
            m.at,
            mode.map_or("?".into(), |m| m.to_string())
        );
    }
    if args.splice == SpliceWith::Ebpf
        && sluice_engine::splice_fast_path::module(&engine.hooks).is_none()
    {
        let (bytes, section) = sluice_ebpf::programs::shipped("splice").expect("shipped");
        let (program, maps) = sluice_ebpf::load(bytes, section)
            .map_err(|e| CliError::usage(format!("--splice ebpf: {e}")))?;
        let id = engine
            .hooks
            .modules_mut()
            .attach(HookPoint::Ingress, "splice", section, program, maps)
            .map_err(|e| CliError::usage(format!("--splice ebpf: {e}")))?;
        println!("sluice engine: module {id}: splice ({section}) at ingress");
    }
    engine.linger = linger;
    engine.idle_before_sleep = Duration::from_micros(args.idle_us);
    engine.spin_before_yield = Duration::from_micros(args.spin_us);
    let mut service = Service::new(service_config(args, &opts, layout)?)?;
    stop_on_signals(&service)?;
    say_ready(args, &opts);
    let result = engine.run(&mut service, None);
    eprintln!(
        "sluice engine: stopped; service counters:\n{}\ncore counters:\n{}\nrdma counters:\n{}mtp counters:\n{}",
        service.counters(),
        core_counters(&engine.stack),
        service.rdma_counters(),
        service.mtp_counters()
    );
    result.map(|_| ()).map_err(CliError::from)
}

/// `sluice engine --cores N` (N > 1): the service is the application of the multi-core
/// engine's one flow group (its protocol role's core), the NIC and pre/post roles on the
/// other cores; with `--layout flow-groups`, one part of the service per flow group
/// (docs/service.md, "Several cores" and "Flow groups").
fn run_on_cores(args: &EngineArgs, layout: Layout, cores: MultiLayout) -> Result<(), CliError> {
    let opts = args.attach.options()?;
    let (device, core_config) = setup::open_multi(&opts)?;
    let mut config = service_config(args, &opts, layout)?;
    config.hook_points = false;
    config.flow_groups = u32::from(cores.groups());
    let mut parts: Vec<Option<Service>> = Service::flow_groups(config)?
        .into_iter()
        .map(Some)
        .collect();
    stop_on_signals(parts[0].as_ref().expect("made above"))?;
    let mut engine = MultiEngine::new(device, core_config, cores, |g| {
        parts[usize::from(g)]
            .take()
            .expect("a part of the service per flow group")
    })
    .map_err(CliError::Multi)?;
    engine.linger = args.attach.linger()?;
    eprint!("{}", engine.describe());
    say_ready(args, &opts);
    let result = engine.run(None);
    // The groups' core counters and the parts' service counters, each summed, and the
    // verbs' and MTP's (part 0's), as the single engine prints them.
    let mut rows: Option<[(&str, u64); 16]> = None;
    for p in engine.protocols() {
        let each = core_rows(&p.stack);
        match rows.as_mut() {
            None => rows = Some(each),
            Some(sum) => {
                for (s, e) in sum.iter_mut().zip(each) {
                    s.1 += e.1;
                }
            }
        }
    }
    let core = rows.map_or_else(String::new, |r| format_rows(&r));
    let parts = engine.into_apps();
    let mut sum = sluice_service::Counters::default();
    for part in &parts {
        sum += part.counters();
    }
    if let Some(part0) = parts.first() {
        eprintln!(
            "sluice engine: stopped; service counters:\n{}\ncore counters:\n{}\nrdma counters:\n{}mtp counters:\n{}",
            sum,
            core,
            part0.rdma_counters(),
            part0.mtp_counters()
        );
    }
    result.map(|_| ()).map_err(CliError::Multi)
}

/// SIGTERM/SIGINT stop the service cleanly (connections reset, socket removed); a second
/// one exits at once.
fn stop_on_signals(service: &Service) -> Result<(), CliError> {
    let stop = service.stop_flag();
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone())
            .and_then(|_| signal_hook::flag::register(signal, stop.clone()))
            .map_err(|source| CliError::Signal { signal, source })?;
    }
    Ok(())
}

/// The `ready` line tests and scripts wait for.
fn say_ready(args: &EngineArgs, opts: &setup::EngineOptions) {
    println!(
        "sluice engine: ready on {} ({}/{}, {}; {}; {} data-path core(s))",
        args.socket.display(),
        opts.ip,
        opts.prefix,
        backend_name(opts.backend),
        TransportArgs::describe(&opts.transport),
        args.attach.cores.cores
    );
    let _ = std::io::stdout().flush();
}

/// The service's configuration from the flags.
fn service_config(
    args: &EngineArgs,
    opts: &setup::EngineOptions,
    layout: Layout,
) -> Result<ServiceConfig, CliError> {
    let mut config = ServiceConfig::new(&args.socket, opts.ip, opts.prefix);
    config.layout = layout;
    config.engine.app_idle_us = args.app_idle_us;
    config.log = true;
    config.access.group = resolve_group(&args.group);
    config.access.allow_uids = args.allow_uid.clone();
    config.unprivileged_port_start = args.unprivileged_port_start;
    config.port_ranges = args.port_range.clone();
    config.max_apps = args.max_apps as usize;
    config.splice_ebpf = args.splice == SpliceWith::Ebpf;
    config.quotas = Quotas {
        apps_per_uid: args.apps_per_uid,
        sockets_per_uid: args.sockets_per_uid,
        listeners_per_app: args.listeners_per_app,
        listeners_per_uid: args.listeners_per_uid,
        connections_per_app: args.connections_per_app,
        connections_per_uid: args.connections_per_uid,
        commands_per_app: args.commands_per_app,
    };
    config.buffered_bytes_per_uid = args
        .buffered_bytes_per_uid
        .as_deref()
        .map(|v| sluice_switch::parse_size("--buffered-bytes-per-uid", v))
        .transpose()
        .map_err(|e| CliError::usage(e.to_string()))?
        .map(|n| n as u64);
    Ok(config)
}
