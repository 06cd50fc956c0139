//! The state of one host's TCP core: the tables of the control plane and of the data-path
//! in one struct. It is defined below both planes so that their `impl Stack` blocks import
//! it downwards; the application API is in stack.rs.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use crate::buffer::{ConnBuffers, RingPool, POOL_RINGS};
use crate::cc::{Algorithm, Policy};
use crate::config::{Config, ConfigError};
use crate::control::isn::Secret;
use crate::control::neighbor::{NeighborCache, ARP_ASKED};
use crate::control::state::ConnControl;
use crate::counters::Counters;
use crate::datapath::DataPath;
use crate::events::EventQueue;
use crate::frame::ControlQueue;
use crate::memory_group::MemoryGroups;
use crate::offload::relay::RelayQueue;
use crate::offload::splice::{Pending, SpliceEvent, SpliceStage, SpliceStats};
use crate::offload::teardown::{Expiry, Limits, TeardownStage};
use crate::payload_source::Touched;
use crate::pressure::BufferedBytes;
use crate::reuseport::ListenerPorts;
use crate::shared_log::log::SharedLogs;
use crate::table::{ConnTable, FourTuple};
use crate::time::Instant;
use crate::timer::TimerQueue;
use crate::trace::Tracer;

/// A listening port.
pub(crate) struct Listener {
    pub port: u16,
    pub backlog: usize,
    pub accept: VecDeque<u32>,
    pub syn_pending: usize,
    /// The algorithm its connections run from the SYN on (their SYN-ACK's ECN follows it).
    pub cc_algorithm: Algorithm,
    /// Its handle's generation ([`crate::ListenerId`]).
    pub generation: u32,
}

/// One host's TCP core: hand it frames and the time, take frames to send and its next
/// deadline; the application API is documented on its methods (stack.rs).
pub struct Stack {
    pub(crate) cfg: Config,
    pub(crate) now: Instant,
    pub(crate) dp: DataPath,
    pub(crate) conns: Vec<ConnControl>,
    /// Congestion-control policies, per slot: the control plane's (control/congestion.rs).
    pub(crate) cc: Vec<Policy>,
    /// Each connection's policy as it was before its latest timeout, to undo a spurious
    /// one (RFC 4015); control-plane state like `cc`. Boxed: only a connection that had a
    /// timeout holds one, and a slot pays 8 bytes instead of a policy's size.
    pub(crate) cc_before_rto: Vec<Option<Box<Policy>>>,
    /// Each connection's policy as it was before its latest fast recovery, to undo the
    /// cut if D-SACKs show the recovery needless (RFC 3708); boxed as `cc_before_rto`.
    pub(crate) cc_before_recovery: Vec<Option<Box<Policy>>>,
    pub(crate) table: ConnTable,
    pub(crate) bufs: Vec<Option<ConnBuffers>>,
    /// Storage for receive rings at the initial size, taken on data, given back drained.
    pub(crate) rx_pool: RingPool,
    /// Storage for send rings at the initial size, taken on send, given back when acked.
    pub(crate) tx_pool: RingPool,
    pub(crate) listeners: Box<[Option<Listener>]>,
    /// The generation the next listener's handle gets.
    pub(crate) next_listener_generation: u32,
    /// Ports to their listener or reuseport group, and the free listener indexes.
    pub(crate) listener_by_port: ListenerPorts,
    pub(crate) neighbors: NeighborCache,
    /// ARP requests sent for other transports ([`Stack::resolve_neighbor`]): target and
    /// when, to rate-limit them.
    pub(crate) arp_asked: [(Ipv4Addr, Instant); ARP_ASKED],
    pub(crate) isn_secret: Secret,
    pub(crate) cookie_secret: Secret,
    /// When the latest SYN cookie went out: an ACK in LISTEN is checked as a cookie only
    /// while one may still be valid.
    pub(crate) cookie_sent_at: Option<Instant>,
    pub(crate) ts_secret: Secret,
    pub(crate) timer_queue: TimerQueue,
    pub(crate) out: ControlQueue,
    pub(crate) events: EventQueue,
    pub(crate) counters: Counters,
    /// Bytes buffered by all connections against `Config::tcp_mem` (control/memory.rs).
    pub(crate) memory: BufferedBytes,
    /// The same bytes per memory group, and each slot's and listener's group
    /// (control/memory_group.rs).
    pub(crate) groups: MemoryGroups,
    pub(crate) ip_ident: u16,
    pub(crate) next_port: u16,
    pub(crate) awaiting_arp: Vec<u32>,
    /// The teardown stage: closed connections it took over (offload/teardown.rs).
    pub(crate) teardown: TeardownStage,
    /// The stage's timer outcomes of one `handle_timeout`, kept to reuse the allocation.
    pub(crate) teardown_fired: Vec<(u32, Expiry)>,
    /// The splice stage: spliced pairs' rewrite rules (offload/splice.rs).
    pub(crate) splice: SpliceStage,
    /// Splices waiting for their connections to drain (control/splice.rs).
    pub(crate) splice_pending: Vec<Pending>,
    /// Splice events for the application.
    pub(crate) splice_events: VecDeque<SpliceEvent>,
    /// Frames the splice stage rewrote, waiting for `poll_transmit`.
    pub(crate) relay: RelayQueue,
    /// Where a frame goes that the full relay queue cannot take (the stage still sees it).
    pub(crate) relay_scratch: Option<Vec<u8>>,
    /// Room for one segment while a large spliced frame is cut into MTU-sized ones.
    pub(crate) gso_scratch: Vec<u8>,
    /// Splices the wheel ended in one `handle_timeout`, kept to reuse the allocation.
    pub(crate) splice_ended: Vec<(u64, SpliceStats)>,
    /// The last splice id given out.
    pub(crate) next_splice_id: u64,
    /// Tracepoints: all off until asked for (trace/).
    pub(crate) tracer: Tracer,
    /// Shared logs and the connections attached to them (shared_log/).
    pub(crate) logs: SharedLogs,
    /// Transmit-side bytes touched (header_only.rs).
    pub(crate) tx_touch: Touched,
}

impl Stack {
    /// Creates a core. Fails if the configuration is invalid.
    pub fn new(cfg: Config) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let slots = cfg.max_connections;
        let (lo, hi) = cfg.ephemeral_ports;
        let span = (hi - lo) as u64 + 1;
        Ok(Stack {
            now: Instant::ZERO,
            dp: DataPath::new(
                slots,
                cfg.cold_pool(),
                cfg.ooo_intervals,
                cfg.scoreboard_ranges(),
                cfg.rack_marks(),
                cfg.sched_wheel_slots,
                cfg.sched_granularity.as_nanos() as u64,
            ),
            // Per-slot rows: room reserved for every slot, rows added as slots are first
            // used (`add_slots_through`), so memory follows the connections that exist.
            conns: Vec::with_capacity(slots),
            cc: Vec::with_capacity(slots),
            cc_before_rto: Vec::with_capacity(slots),
            cc_before_recovery: Vec::with_capacity(slots),
            table: ConnTable::new(slots, cfg.seed),
            bufs: Vec::with_capacity(slots),
            rx_pool: RingPool::new(cfg.rx_initial(), POOL_RINGS),
            tx_pool: RingPool::new(cfg.tx_initial(), POOL_RINGS),
            listeners: (0..cfg.max_listeners).map(|_| None).collect(),
            next_listener_generation: 0,
            listener_by_port: ListenerPorts::new(cfg.max_listeners, cfg.seed),
            neighbors: NeighborCache::new(cfg.neighbor_cache, cfg.seed),
            arp_asked: [(Ipv4Addr::UNSPECIFIED, Instant::ZERO); ARP_ASKED],
            isn_secret: Secret::derive(cfg.seed, 1),
            cookie_secret: Secret::derive(cfg.seed, 2),
            cookie_sent_at: None,
            ts_secret: Secret::derive(cfg.seed, 3),
            timer_queue: TimerQueue::new(slots),
            out: ControlQueue::new(cfg.control_frame_queue),
            events: EventQueue::new(slots, cfg.max_listeners),
            counters: Counters::default(),
            memory: BufferedBytes::new(cfg.memory_limits(), slots),
            groups: MemoryGroups::new(cfg.max_memory_groups, slots, cfg.max_listeners),
            ip_ident: (cfg.seed >> 16) as u16,
            next_port: lo + (cfg.seed % span) as u16,
            awaiting_arp: Vec::with_capacity(slots),
            teardown: TeardownStage::new(
                Limits {
                    flows: cfg.teardown_flows,
                    tail_bytes: cfg.teardown_tail_bytes,
                    retries: cfg.teardown_retries,
                    rto_max: cfg.rto_max,
                    time_wait: cfg.time_wait,
                    fin_wait2: cfg.time_wait.max(std::time::Duration::from_secs(1)),
                },
                cfg.teardown_wheel_slots,
                cfg.teardown_tick,
                cfg.seed,
            ),
            teardown_fired: Vec::new(),
            // A spliced pair's peers keep their own TIME-WAIT; the stage only lingers long
            // enough to relay a retransmitted FIN or its ACK.
            splice: SpliceStage::new(
                cfg.splice_max,
                cfg.time_wait.min(std::time::Duration::from_secs(2)),
                cfg.seed,
            ),
            splice_pending: Vec::new(),
            splice_events: VecDeque::new(),
            // Up to 256 slots may grow to hold a large (GSO) frame the device segments.
            relay: RelayQueue::new(cfg.splice_relay_frames, usize::from(cfg.mtu) + 18, 256),
            relay_scratch: None,
            gso_scratch: Vec::new(),
            splice_ended: Vec::new(),
            next_splice_id: 0,
            tracer: Tracer::new(),
            logs: SharedLogs::default(),
            tx_touch: Touched::default(),
            cfg,
        })
    }
}

impl Stack {
    /// Adds per-slot rows until `slot` has one. The table hands out never-used slots in
    /// increasing order (its free list is a stack), so rows grow with the most
    /// connections ever open at once, and a slot's rows are reused after it is freed.
    pub(crate) fn add_slots_through(&mut self, slot: u32) {
        while self.conns.len() <= slot as usize {
            self.conns
                .push(ConnControl::new(placeholder_tuple(), self.cfg.rto_initial));
            self.cc.push(Policy::new(self.cfg.congestion_control, 1460));
            self.cc_before_rto.push(None);
            self.cc_before_recovery.push(None);
            self.bufs.push(None);
            self.dp.add_slot();
        }
    }
}

fn placeholder_tuple() -> FourTuple {
    FourTuple {
        remote_ip: Ipv4Addr::UNSPECIFIED,
        remote_port: 0,
        local_port: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control plane's per-slot rows (printed for docs/notes/issue-18/million.md) stay
    /// within the note's budget: a row added to every slot must find its bytes, and the
    /// undo copies of the policy stay boxed.
    #[test]
    fn per_slot_rows_are_what_the_million_note_says() {
        use core::mem::size_of;
        let rows = [
            ("ConnControl", size_of::<ConnControl>()),
            ("Policy", size_of::<Policy>()),
            ("Option<Box<Policy>>", size_of::<Option<Box<Policy>>>()),
            ("Option<ConnBuffers>", size_of::<Option<ConnBuffers>>()),
        ];
        println!("{rows:?}");
        assert_eq!(
            size_of::<Option<Box<Policy>>>(),
            8,
            "an empty undo copy is a pointer"
        );
        // ConnControl + Policy + two undo boxes + ConnBuffers (216 + 224 + 16 + 72 today).
        let slot = rows[0].1 + rows[1].1 + 2 * rows[2].1 + rows[3].1;
        assert!(
            slot <= 560,
            "{slot} B of control-plane rows per slot: {rows:?}"
        );
    }
}
