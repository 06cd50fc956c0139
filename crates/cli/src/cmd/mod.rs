//! One module per subcommand: its arguments and its run.

pub mod bench;
pub mod capture;
/// `sluice capture`'s filter compiler.
pub mod capture_filter;
pub mod ctl;
/// `sluice ctl trace`.
pub mod ctl_offload;
/// What `sluice ctl`'s commands share: the session, the errors, JSON.
pub mod ctl_session;
pub mod ctl_trace;
pub mod demo;
pub mod echo;
pub mod engine;
pub mod flood;
pub mod lab;
/// An eBPF module named on the command line.
pub mod module_file;
pub mod mtp;
pub mod offload_demo;
/// `sluice capture`'s pcap writer.
pub mod pcap_file;
pub mod proxy;
/// `sluice proxy --config`'s file.
pub mod proxy_file;
pub mod run;
pub mod sink;
pub mod soak;
pub mod source;
pub mod switch;
pub mod verbs_device;
