//! The service's counters: what happened, and every piece of bad input it refused.

use std::fmt;

/// Counters of the engine side of service mode (monotonic since the service started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Applications that completed the attach handshake.
    pub apps_attached: u64,
    /// Applications whose control socket hung up (or that were dropped for misbehaving).
    pub apps_detached: u64,
    /// Attach requests refused (bad version, too many applications, region creation failed).
    pub apps_refused: u64,
    /// Attach requests refused by the access policy (the peer's uid may not attach).
    pub apps_denied: u64,
    /// Binds to a port below `unprivileged_port_start` refused (EACCES): the application
    /// has neither uid 0 nor CAP_NET_BIND_SERVICE.
    pub privileged_ports_refused: u64,
    /// Of those, attaches refused because the engine's mappings would cross its budget
    /// (`vm.max_map_count` less headroom).
    pub apps_refused_maps: u64,
    /// Sockets refused (ENOMEM) because their rings could not be mapped.
    pub ring_maps_refused: u64,
    /// Contexts handed out.
    pub contexts_created: u64,
    /// Context requests refused (the application's contexts are all in use).
    pub contexts_refused: u64,
    /// Commands executed (valid or not).
    pub commands: u64,
    /// Completions posted.
    pub completions: u64,
    /// Queue entries that did not decode (unknown opcode, field out of range).
    pub bad_entries: u64,
    /// Commands naming a slot out of range or not allocated (EBADF).
    pub bad_slots: u64,
    /// Commands in the wrong state for their slot (EINVAL, EISCONN, ENOTCONN, ...).
    pub bad_state: u64,
    /// Ring positions outside their bounds (each resets its connection with EFAULT).
    pub bad_positions: u64,
    /// Control messages that were malformed or unexpected.
    pub bad_control: u64,
    /// Context queues whose published head was out of bounds (the context is dropped).
    pub corrupt_queues: u64,
    /// Connections reset because the application wrote a bad position.
    pub resets_bad_input: u64,
    /// Connections reset because their application went away (or, closed by it before it
    /// went, still had not drained after the orphan linger).
    pub resets_on_detach: u64,
    /// Departed applications freed after their closed connections finished (or lingered
    /// too long).
    pub orphans_freed: u64,
    /// Connections reset on close (abort, or unread bytes in the RX ring: RFC 2525 2.17).
    pub resets_on_close: u64,
    /// Connections reset because the engine stopped.
    pub resets_on_stop: u64,
    /// Connections accepted into listeners' rings.
    pub accepts: u64,
    /// Times a listener could not take a waiting connection (ring full or no free slot).
    pub accept_stalls: u64,
    /// Times a connection's RX ring was full with more data waiting in the core.
    pub rx_stalls: u64,
    /// Bytes moved from TX rings into the core.
    pub tx_bytes: u64,
    /// Bytes moved from the core into RX rings.
    pub rx_bytes: u64,
    /// Context eventfds signalled.
    pub wakeups: u64,
    /// Times the engine announced it was going to sleep.
    pub sleeps: u64,
    /// Sleeps cancelled because a command arrived while announcing them.
    pub sleeps_cancelled: u64,
    /// A part of the service in flow groups could not watch an application's doorbell
    /// (epoll_ctl failed): that part no longer sleeps while the application is attached.
    pub doorbells_unwatched: u64,
    /// Splices handed to the core for applications.
    pub splices: u64,
    /// Splice reports posted to applications.
    pub splice_reports: u64,
    /// Splice reports nobody could take (the application left, its context died, or it
    /// let more than the held bound pile up); the splices themselves go on.
    pub splice_reports_dropped: u64,
    /// Control-path verbs asked (docs/verbs.md).
    pub verbs_requests: u64,
    /// Verbs refused for a value, a limit or a busy object (EINVAL, ENOMEM, EBUSY, ...).
    pub verbs_refused: u64,
    /// Verbs and doorbells naming a handle, key or QP the application does not own.
    pub verbs_not_owned: u64,
    /// ModifyQp to RTR answered EAGAIN while the peer's MAC was resolved.
    pub verbs_arp_waits: u64,
    /// QP doorbells run.
    pub verbs_doorbells: u64,
    /// Work-queue entries taken.
    pub wqes: u64,
    /// Work-queue entries that did not decode or named what this transport does not do
    /// (each completes with an error and moves its QP to ERR).
    pub bad_wqes: u64,
    /// Completions placed in completion queues.
    pub verbs_completions: u64,
    /// Completion channels signalled.
    pub verbs_events: u64,
    /// Completion events not written: the channel (a pipe) was full.
    pub verbs_events_dropped: u64,
    /// Requests (a line with its continuations) and stray lines taken from notification
    /// pipes (docs/verbs.md "Notification pipes").
    pub verbs_pipe_lines: u64,
    /// Pipe lines that were no request at all (garbage, a stray continuation): dropped.
    pub verbs_pipe_garbage: u64,
    /// Work requests past a pipe-mode QP's `max_*_wr` backlog: completed in error.
    pub verbs_pipe_overposted: u64,
    /// Completions with no pipe to go to (their QP gone, or its pipe dead): dropped.
    pub verbs_pipe_unrouted: u64,
    /// OFFLOAD requests handed to a registered handler (docs/offload.md).
    pub verbs_offload_requests: u64,
    /// Of those, answered with a handler's error status (stopped, failed, panicked).
    pub verbs_offload_errors: u64,
    /// OFFLOAD requests for a handler unloaded meanwhile (answered NoHandler), and
    /// responses the transport no longer took (their QP gone or in ERR).
    pub verbs_offload_refused: u64,
    /// Offload admin requests refused (a bad handler, region, QP or permission; an unload
    /// of nothing).
    pub verbs_offload_loads_refused: u64,
    /// Completions lost because a completion queue was full (an overrun).
    pub cq_overruns: u64,
    /// MTP control requests asked (docs/mtp.md).
    pub mtp_requests: u64,
    /// MTP requests refused for a value or a limit (EINVAL, ENOMEM, EADDRINUSE, ...).
    pub mtp_refused: u64,
    /// MTP requests and doorbells naming memory or an endpoint the application does not own.
    pub mtp_not_owned: u64,
    /// MTP doorbells run.
    pub mtp_doorbells: u64,
    /// MTP send and receive entries taken.
    pub mtp_entries: u64,
    /// MTP entries refused with an error completion (no decode, outside registered memory, too long, bad destination).
    pub mtp_bad_entries: u64,
    /// MTP messages acknowledged to their sender.
    pub mtp_sent: u64,
    /// MTP messages given up (timeouts) or flushed.
    pub mtp_failed: u64,
    /// MTP messages placed in posted buffers.
    pub mtp_received: u64,
    /// MTP completions placed in completion queues.
    pub mtp_completions: u64,
    /// MTP completion queues' eventfds signalled.
    pub mtp_events: u64,
    /// MTP destinations whose MAC had to be resolved first.
    pub mtp_arp_waits: u64,
    /// Binds refused (EACCES) because the port lies in a range reserved for another uid
    /// (`ServiceConfig::port_ranges`).
    pub port_range_refused: u64,
    /// Attaches refused by the applications-per-uid quota (EAGAIN; counted in
    /// `apps_refused` too).
    pub quota_apps_refused: u64,
    /// Opens refused by the sockets-per-uid quota (EMFILE).
    pub quota_sockets_refused: u64,
    /// Listens refused by the listeners-per-application or per-uid quota (ENOBUFS).
    pub quota_listeners_refused: u64,
    /// Connects refused by the connections-per-application or per-uid quota (ENOBUFS).
    pub quota_connections_refused: u64,
    /// Times a listener stalled because its application (or uid) is at its connections
    /// quota: the connection waits in the core's accept queue.
    pub quota_accept_stalls: u64,
    /// Loop iterations in which an application had more commands waiting than its
    /// commands-per-application quota (the rest wait for the next iteration).
    pub quota_command_deferrals: u64,
    /// Connections and listeners of a uid left ungrouped (under the core's global limit
    /// only) because every memory group was taken (src/memory_groups.rs).
    pub uid_groups_full: u64,
    /// Admin requests answered (`sluice ctl`, docs/ctl.md).
    pub admin_requests: u64,
    /// Admin requests refused: the client is neither uid 0 nor the engine's uid.
    pub admin_denied: u64,
    /// eBPF modules loaded at run time (`sluice ctl module load`).
    pub modules_loaded: u64,
    /// Module loads refused (the object, the verifier, a full chain).
    pub modules_refused: u64,
    /// Frames a module redirected to the control plane (XDP_REDIRECT), counted and dropped:
    /// the control plane has no consumer for them yet.
    pub module_redirects: u64,
    /// Connections given their traffic class's rate from a classifier module
    /// (src/traffic_classes.rs).
    pub flows_classified: u64,
    /// New connections left unclassified because the bounded lists were full.
    pub classify_overflow: u64,
    /// Splices whose rewrites went into the eBPF splice module's map (`--splice ebpf`).
    pub splice_fast_path_installed: u64,
    /// Splices that stayed with the core's stage: no module with the map, or it was full.
    pub splice_fast_path_failed: u64,
    /// Frames the eBPF splice module sent back out, summed as each splice ends.
    pub splice_fast_path_frames: u64,
    /// Splices of two slots served by different flow-group parts, refused (EOPNOTSUPP).
    pub splices_across_parts: u64,
    /// Connections a part accepted for a listener another part owns, handed to it.
    pub accepts_handed_over: u64,
    /// Of those, refused by the owner (its listener had closed) and reset.
    pub accepts_refused_closed: u64,
    /// Replicas of a listener another part could not open in its core (the listener
    /// then misses the connections hashing to that part).
    pub listen_replicas_failed: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: [(&str, u64); 87] = [
            ("apps_attached", self.apps_attached),
            ("apps_detached", self.apps_detached),
            ("apps_refused", self.apps_refused),
            ("apps_denied", self.apps_denied),
            ("privileged_ports_refused", self.privileged_ports_refused),
            ("apps_refused_maps", self.apps_refused_maps),
            ("ring_maps_refused", self.ring_maps_refused),
            ("contexts_created", self.contexts_created),
            ("contexts_refused", self.contexts_refused),
            ("commands", self.commands),
            ("completions", self.completions),
            ("bad_entries", self.bad_entries),
            ("bad_slots", self.bad_slots),
            ("bad_state", self.bad_state),
            ("bad_positions", self.bad_positions),
            ("bad_control", self.bad_control),
            ("corrupt_queues", self.corrupt_queues),
            ("resets_bad_input", self.resets_bad_input),
            ("resets_on_detach", self.resets_on_detach),
            ("orphans_freed", self.orphans_freed),
            ("resets_on_close", self.resets_on_close),
            ("resets_on_stop", self.resets_on_stop),
            ("accepts", self.accepts),
            ("accept_stalls", self.accept_stalls),
            ("rx_stalls", self.rx_stalls),
            ("tx_bytes", self.tx_bytes),
            ("rx_bytes", self.rx_bytes),
            ("wakeups", self.wakeups),
            ("sleeps", self.sleeps),
            ("sleeps_cancelled", self.sleeps_cancelled),
            ("doorbells_unwatched", self.doorbells_unwatched),
            ("splices", self.splices),
            ("splice_reports", self.splice_reports),
            ("splice_reports_dropped", self.splice_reports_dropped),
            ("verbs_requests", self.verbs_requests),
            ("verbs_refused", self.verbs_refused),
            ("verbs_not_owned", self.verbs_not_owned),
            ("verbs_arp_waits", self.verbs_arp_waits),
            ("verbs_doorbells", self.verbs_doorbells),
            ("wqes", self.wqes),
            ("bad_wqes", self.bad_wqes),
            ("verbs_completions", self.verbs_completions),
            ("verbs_events", self.verbs_events),
            ("verbs_events_dropped", self.verbs_events_dropped),
            ("verbs_pipe_lines", self.verbs_pipe_lines),
            ("verbs_pipe_garbage", self.verbs_pipe_garbage),
            ("verbs_pipe_overposted", self.verbs_pipe_overposted),
            ("verbs_pipe_unrouted", self.verbs_pipe_unrouted),
            ("verbs_offload_requests", self.verbs_offload_requests),
            ("verbs_offload_errors", self.verbs_offload_errors),
            ("verbs_offload_refused", self.verbs_offload_refused),
            (
                "verbs_offload_loads_refused",
                self.verbs_offload_loads_refused,
            ),
            ("cq_overruns", self.cq_overruns),
            ("mtp_requests", self.mtp_requests),
            ("mtp_refused", self.mtp_refused),
            ("mtp_not_owned", self.mtp_not_owned),
            ("mtp_doorbells", self.mtp_doorbells),
            ("mtp_entries", self.mtp_entries),
            ("mtp_bad_entries", self.mtp_bad_entries),
            ("mtp_sent", self.mtp_sent),
            ("mtp_failed", self.mtp_failed),
            ("mtp_received", self.mtp_received),
            ("mtp_completions", self.mtp_completions),
            ("mtp_events", self.mtp_events),
            ("mtp_arp_waits", self.mtp_arp_waits),
            ("port_range_refused", self.port_range_refused),
            ("quota_apps_refused", self.quota_apps_refused),
            ("quota_sockets_refused", self.quota_sockets_refused),
            ("quota_listeners_refused", self.quota_listeners_refused),
            ("quota_connections_refused", self.quota_connections_refused),
            ("quota_accept_stalls", self.quota_accept_stalls),
            ("quota_command_deferrals", self.quota_command_deferrals),
            ("uid_groups_full", self.uid_groups_full),
            ("admin_requests", self.admin_requests),
            ("admin_denied", self.admin_denied),
            ("modules_loaded", self.modules_loaded),
            ("modules_refused", self.modules_refused),
            ("module_redirects", self.module_redirects),
            ("flows_classified", self.flows_classified),
            ("classify_overflow", self.classify_overflow),
            (
                "splice_fast_path_installed",
                self.splice_fast_path_installed,
            ),
            ("splice_fast_path_failed", self.splice_fast_path_failed),
            ("splice_fast_path_frames", self.splice_fast_path_frames),
            ("splices_across_parts", self.splices_across_parts),
            ("accepts_handed_over", self.accepts_handed_over),
            ("accepts_refused_closed", self.accepts_refused_closed),
            ("listen_replicas_failed", self.listen_replicas_failed),
        ];
        for (i, (name, value)) in rows.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{name:<24} {value}")?;
        }
        Ok(())
    }
}

impl std::ops::AddAssign for Counters {
    /// Adds another part's counters (the service in flow groups sums its parts').
    fn add_assign(&mut self, o: Counters) {
        self.apps_attached += o.apps_attached;
        self.apps_detached += o.apps_detached;
        self.apps_refused += o.apps_refused;
        self.apps_denied += o.apps_denied;
        self.privileged_ports_refused += o.privileged_ports_refused;
        self.apps_refused_maps += o.apps_refused_maps;
        self.ring_maps_refused += o.ring_maps_refused;
        self.contexts_created += o.contexts_created;
        self.contexts_refused += o.contexts_refused;
        self.commands += o.commands;
        self.completions += o.completions;
        self.bad_entries += o.bad_entries;
        self.bad_slots += o.bad_slots;
        self.bad_state += o.bad_state;
        self.bad_positions += o.bad_positions;
        self.bad_control += o.bad_control;
        self.corrupt_queues += o.corrupt_queues;
        self.resets_bad_input += o.resets_bad_input;
        self.resets_on_detach += o.resets_on_detach;
        self.orphans_freed += o.orphans_freed;
        self.resets_on_close += o.resets_on_close;
        self.resets_on_stop += o.resets_on_stop;
        self.accepts += o.accepts;
        self.accept_stalls += o.accept_stalls;
        self.rx_stalls += o.rx_stalls;
        self.tx_bytes += o.tx_bytes;
        self.rx_bytes += o.rx_bytes;
        self.wakeups += o.wakeups;
        self.sleeps += o.sleeps;
        self.sleeps_cancelled += o.sleeps_cancelled;
        self.doorbells_unwatched += o.doorbells_unwatched;
        self.splices += o.splices;
        self.splice_reports += o.splice_reports;
        self.splice_reports_dropped += o.splice_reports_dropped;
        self.verbs_requests += o.verbs_requests;
        self.verbs_refused += o.verbs_refused;
        self.verbs_not_owned += o.verbs_not_owned;
        self.verbs_arp_waits += o.verbs_arp_waits;
        self.verbs_doorbells += o.verbs_doorbells;
        self.wqes += o.wqes;
        self.bad_wqes += o.bad_wqes;
        self.verbs_completions += o.verbs_completions;
        self.verbs_events += o.verbs_events;
        self.verbs_events_dropped += o.verbs_events_dropped;
        self.verbs_pipe_lines += o.verbs_pipe_lines;
        self.verbs_pipe_garbage += o.verbs_pipe_garbage;
        self.verbs_pipe_overposted += o.verbs_pipe_overposted;
        self.verbs_pipe_unrouted += o.verbs_pipe_unrouted;
        self.verbs_offload_requests += o.verbs_offload_requests;
        self.verbs_offload_errors += o.verbs_offload_errors;
        self.verbs_offload_refused += o.verbs_offload_refused;
        self.verbs_offload_loads_refused += o.verbs_offload_loads_refused;
        self.cq_overruns += o.cq_overruns;
        self.mtp_requests += o.mtp_requests;
        self.mtp_refused += o.mtp_refused;
        self.mtp_not_owned += o.mtp_not_owned;
        self.mtp_doorbells += o.mtp_doorbells;
        self.mtp_entries += o.mtp_entries;
        self.mtp_bad_entries += o.mtp_bad_entries;
        self.mtp_sent += o.mtp_sent;
        self.mtp_failed += o.mtp_failed;
        self.mtp_received += o.mtp_received;
        self.mtp_completions += o.mtp_completions;
        self.mtp_events += o.mtp_events;
        self.mtp_arp_waits += o.mtp_arp_waits;
        self.port_range_refused += o.port_range_refused;
        self.quota_apps_refused += o.quota_apps_refused;
        self.quota_sockets_refused += o.quota_sockets_refused;
        self.quota_listeners_refused += o.quota_listeners_refused;
        self.quota_connections_refused += o.quota_connections_refused;
        self.quota_accept_stalls += o.quota_accept_stalls;
        self.quota_command_deferrals += o.quota_command_deferrals;
        self.uid_groups_full += o.uid_groups_full;
        self.admin_requests += o.admin_requests;
        self.admin_denied += o.admin_denied;
        self.modules_loaded += o.modules_loaded;
        self.modules_refused += o.modules_refused;
        self.module_redirects += o.module_redirects;
        self.flows_classified += o.flows_classified;
        self.classify_overflow += o.classify_overflow;
        self.splice_fast_path_installed += o.splice_fast_path_installed;
        self.splice_fast_path_failed += o.splice_fast_path_failed;
        self.splice_fast_path_frames += o.splice_fast_path_frames;
        self.splices_across_parts += o.splices_across_parts;
        self.accepts_handed_over += o.accepts_handed_over;
        self.accepts_refused_closed += o.accepts_refused_closed;
        self.listen_replicas_failed += o.listen_replicas_failed;
    }
}
