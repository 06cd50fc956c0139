//! Where everything lives in an application's shared region.
//!
//! One region (a sealed memfd) per application, so an application maps only its own
//! buffers. In file order:
//!
//! ```text
//! [header page][context 0]...[context C-1][socket block 0]...[socket block S-1]
//! [verbs queue 0]...[verbs queue V-1]
//! [context 0's pipes: work-request pipe, completion pipe per engine core]...[arm words]
//! [context 0's queue pairs for engine cores 1..N-1]...[context C-1's]
//! [pad to page]
//! [rx ring 0][tx ring 0][rx ring 1][tx ring 1]...            (each ring_size bytes)
//! ```
//!
//! A verbs queue is a queue like a context's (header line, 64-byte entries with a phase bit)
//! that serves as one RDMA send queue, receive queue or completion queue (docs/verbs.md).
//! A notification pipe has the same shape; each context has one work-request pipe and one
//! completion pipe per engine data-path core, shared by all its QPs (docs/verbs.md
//! "Notification pipes"), and the arm words of pipe-mode completion queues follow them.
//!
//! A context is an application thread's pair of queues (commands to the engine, completions
//! back) plus a line the application writes. An engine serving sockets on N data-path cores
//! (flow groups, docs/multicore.md) gives each context one pair per core: core 0's is the
//! pair in the context itself (so N = 1 is the single-core layout exactly), the others
//! follow the arm words. Socket slot `s` is served by core `s % N` ([`Layout::slot_core`]). In the address space each ring is mapped twice
//! back to back (Laminar 4.3), so a copy that wraps around the ring's end is one copy.

use serde::{Deserialize, Serialize};

use crate::ShmError;

/// Bytes in one context-queue entry: a cache line.
pub const ENTRY_BYTES: usize = 64;
/// Bytes in one socket block: a line the engine writes, a line the application writes.
pub const SOCKET_BLOCK_BYTES: usize = 128;
/// The page size the layout aligns to.
pub const PAGE: usize = 4096;
/// Bytes of the region header (one page).
pub const HEADER_BYTES: usize = PAGE;
/// A queue's header: the consumer's published head, alone on its line.
pub const QUEUE_HEADER_BYTES: usize = 64;

/// Largest ring a layout may ask for (64 MiB): ring positions stay far from u32 wrap.
pub const MAX_RING_SIZE: u32 = 64 << 20;
/// Most sockets one application may hold.
pub const MAX_SOCKETS: u32 = 1 << 16;
/// Most contexts (application threads) one application may hold.
pub const MAX_CONTEXTS: u32 = 1024;
/// Most entries in one context queue.
pub const MAX_QUEUE_ENTRIES: u32 = 1 << 16;
/// Byte offset, in a verbs queue's header line, of the word an application writes to arm a
/// completion queue's notification (docs/verbs.md "Completion events").
pub const VERBS_ARM_OFFSET: usize = 8;
/// Most verbs queues one application may hold.
pub const MAX_VERBS_QUEUES: u32 = 4096;
/// Most engine data-path cores a layout gives pipes for.
pub const MAX_PIPE_CORES: u32 = 64;
/// Most completion queues of one application in pipe mode (each has an arm word).
pub const MAX_PIPE_CQS: u32 = 1 << 14;
/// Bytes of one pipe-mode completion queue's arm word slot.
pub const PIPE_ARM_BYTES: usize = 8;
/// Largest region file (its rings are sparse: pages exist only once touched).
pub const MAX_REGION_BYTES: u64 = 1 << 40;

/// The sizes that fix an application region's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Socket slots (each with an RX and a TX payload ring).
    pub max_sockets: u32,
    /// Contexts: application threads that can talk to the engine at once.
    pub max_contexts: u32,
    /// Entries per context queue (a power of two).
    pub queue_entries: u32,
    /// Bytes per payload ring (a power of two, at least a page).
    pub ring_size: u32,
    /// Verbs queues (RDMA send, receive and completion queues; 0: no verbs).
    #[serde(default = "default_verbs_queues")]
    pub verbs_queues: u32,
    /// Entries per verbs queue (a power of two).
    #[serde(default = "default_verbs_queue_entries")]
    pub verbs_queue_entries: u32,
    /// Engine data-path cores each context has a pair of notification pipes for (0: no
    /// pipes; the service's multi-core data-path uses one per core).
    #[serde(default = "default_pipe_cores")]
    pub verbs_pipe_cores: u32,
    /// Entries per notification pipe (a power of two).
    #[serde(default = "default_pipe_entries")]
    pub verbs_pipe_entries: u32,
    /// Pipe-mode completion queues the region has arm words for.
    #[serde(default = "default_pipe_cqs")]
    pub verbs_pipe_cqs: u32,
    /// Engine data-path cores serving sockets: each context has a command and a completion
    /// queue per core, and slot `s` is served by core `s % queue_cores` (1: one pair).
    #[serde(default = "default_queue_cores")]
    pub queue_cores: u32,
}

fn default_queue_cores() -> u32 {
    1
}

fn default_pipe_cores() -> u32 {
    1
}

fn default_pipe_entries() -> u32 {
    1024
}

fn default_pipe_cqs() -> u32 {
    4096
}

fn default_verbs_queues() -> u32 {
    64
}

fn default_verbs_queue_entries() -> u32 {
    4096
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            max_sockets: 1024,
            max_contexts: 64,
            queue_entries: 256,
            ring_size: 256 << 10,
            verbs_queues: default_verbs_queues(),
            verbs_queue_entries: default_verbs_queue_entries(),
            verbs_pipe_cores: default_pipe_cores(),
            verbs_pipe_entries: default_pipe_entries(),
            verbs_pipe_cqs: default_pipe_cqs(),
            queue_cores: default_queue_cores(),
        }
    }
}

/// Direction of a payload ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Engine writes received bytes, the application reads them.
    Rx,
    /// The application writes bytes to send, the engine reads them.
    Tx,
}

fn align_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

impl Layout {
    /// Checks every size against its bounds.
    pub fn validate(&self) -> Result<(), ShmError> {
        let bad = |m: String| Err(ShmError::Layout(m));
        if self.max_sockets == 0 || self.max_sockets > MAX_SOCKETS {
            return bad(format!(
                "max_sockets {} not in 1..={MAX_SOCKETS}",
                self.max_sockets
            ));
        }
        if self.max_contexts == 0 || self.max_contexts > MAX_CONTEXTS {
            return bad(format!(
                "max_contexts {} not in 1..={MAX_CONTEXTS}",
                self.max_contexts
            ));
        }
        if !self.queue_entries.is_power_of_two()
            || self.queue_entries < 8
            || self.queue_entries > MAX_QUEUE_ENTRIES
        {
            return bad(format!(
                "queue_entries {} is not a power of two in 8..={MAX_QUEUE_ENTRIES}",
                self.queue_entries
            ));
        }
        if !self.ring_size.is_power_of_two()
            || (self.ring_size as usize) < PAGE
            || self.ring_size > MAX_RING_SIZE
        {
            return bad(format!(
                "ring_size {} is not a power of two from {PAGE} to {MAX_RING_SIZE}",
                self.ring_size
            ));
        }
        if self.verbs_queues > MAX_VERBS_QUEUES {
            return bad(format!(
                "verbs_queues {} not in 0..={MAX_VERBS_QUEUES}",
                self.verbs_queues
            ));
        }
        if !self.verbs_queue_entries.is_power_of_two()
            || self.verbs_queue_entries < 8
            || self.verbs_queue_entries > MAX_QUEUE_ENTRIES
        {
            return bad(format!(
                "verbs_queue_entries {} is not a power of two in 8..={MAX_QUEUE_ENTRIES}",
                self.verbs_queue_entries
            ));
        }
        if self.verbs_pipe_cores > MAX_PIPE_CORES {
            return bad(format!(
                "verbs_pipe_cores {} not in 0..={MAX_PIPE_CORES}",
                self.verbs_pipe_cores
            ));
        }
        if !self.verbs_pipe_entries.is_power_of_two()
            || self.verbs_pipe_entries < 8
            || self.verbs_pipe_entries > MAX_QUEUE_ENTRIES
        {
            return bad(format!(
                "verbs_pipe_entries {} is not a power of two in 8..={MAX_QUEUE_ENTRIES}",
                self.verbs_pipe_entries
            ));
        }
        if self.verbs_pipe_cqs > MAX_PIPE_CQS {
            return bad(format!(
                "verbs_pipe_cqs {} not in 0..={MAX_PIPE_CQS}",
                self.verbs_pipe_cqs
            ));
        }
        if self.queue_cores == 0 || self.queue_cores > MAX_PIPE_CORES {
            return bad(format!(
                "queue_cores {} not in 1..={MAX_PIPE_CORES}",
                self.queue_cores
            ));
        }
        if self.file_len() as u64 > MAX_REGION_BYTES {
            return bad(format!(
                "the region would be {} bytes (at most {MAX_REGION_BYTES})",
                self.file_len()
            ));
        }
        Ok(())
    }

    /// Bytes of one queue (header and entries).
    pub fn queue_bytes(&self) -> usize {
        QUEUE_HEADER_BYTES + self.queue_entries as usize * ENTRY_BYTES
    }

    /// Bytes of one context: the command queue, the completion queue, the application's line.
    pub fn context_bytes(&self) -> usize {
        2 * self.queue_bytes() + 64
    }

    /// Offset of context `i`'s command queue (application to engine).
    pub fn command_queue_offset(&self, i: u32) -> usize {
        HEADER_BYTES + i as usize * self.context_bytes()
    }

    /// Offset of context `i`'s completion queue (engine to application).
    pub fn completion_queue_offset(&self, i: u32) -> usize {
        self.command_queue_offset(i) + self.queue_bytes()
    }

    /// Offset of context `i`'s line written by the application (its sleeping flag).
    pub fn context_line_offset(&self, i: u32) -> usize {
        self.command_queue_offset(i) + 2 * self.queue_bytes()
    }

    /// Offset of context `i`'s command queue for engine core `core` (core 0: the context's
    /// own, [`Layout::command_queue_offset`]).
    pub fn command_queue_offset_on(&self, i: u32, core: u32) -> usize {
        if core == 0 {
            return self.command_queue_offset(i);
        }
        let pairs = self.queue_cores as usize - 1;
        self.pipe_arm_offset(self.verbs_pipe_cqs)
            + (i as usize * pairs + core as usize - 1) * 2 * self.queue_bytes()
    }

    /// Offset of context `i`'s completion queue for engine core `core`.
    pub fn completion_queue_offset_on(&self, i: u32, core: u32) -> usize {
        if core == 0 {
            return self.completion_queue_offset(i);
        }
        self.command_queue_offset_on(i, core) + self.queue_bytes()
    }

    /// The engine core that serves socket slot `s`.
    pub fn slot_core(&self, s: u32) -> u32 {
        s % self.queue_cores.max(1)
    }

    /// Offset of the first socket block.
    pub fn sockets_offset(&self) -> usize {
        HEADER_BYTES + self.max_contexts as usize * self.context_bytes()
    }

    /// Offset of socket block `s`.
    pub fn socket_offset(&self, s: u32) -> usize {
        self.sockets_offset() + s as usize * SOCKET_BLOCK_BYTES
    }

    /// Bytes of one verbs queue (header and entries).
    pub fn verbs_queue_bytes(&self) -> usize {
        QUEUE_HEADER_BYTES + self.verbs_queue_entries as usize * ENTRY_BYTES
    }

    /// Offset of verbs queue `q`.
    pub fn verbs_queue_offset(&self, q: u32) -> usize {
        self.sockets_offset()
            + self.max_sockets as usize * SOCKET_BLOCK_BYTES
            + q as usize * self.verbs_queue_bytes()
    }

    /// Bytes of one notification pipe (header and entries).
    pub fn pipe_bytes(&self) -> usize {
        QUEUE_HEADER_BYTES + self.verbs_pipe_entries as usize * ENTRY_BYTES
    }

    /// Index of a pipe among all pipes: per context, per core, work-request then completion.
    fn pipe_index(&self, context: u32, core: u32, completion: bool) -> usize {
        (context as usize * self.verbs_pipe_cores as usize + core as usize) * 2
            + usize::from(completion)
    }

    /// Offset of context `context`'s work-request pipe (`completion` false, application to
    /// engine) or completion pipe (engine to application) for engine core `core`.
    pub fn pipe_offset(&self, context: u32, core: u32, completion: bool) -> usize {
        self.verbs_queue_offset(self.verbs_queues)
            + self.pipe_index(context, core, completion) * self.pipe_bytes()
    }

    /// Offset of pipe-mode completion queue arm word `slot`.
    pub fn pipe_arm_offset(&self, slot: u32) -> usize {
        self.pipe_offset(self.max_contexts, 0, false) + slot as usize * PIPE_ARM_BYTES
    }

    /// Bytes before the first ring (header, contexts, socket blocks, verbs queues, pipes,
    /// arm words, the other cores' queue pairs), page aligned.
    pub fn control_len(&self) -> usize {
        let pairs = self.max_contexts as usize * (self.queue_cores.max(1) as usize - 1);
        align_up(
            self.pipe_arm_offset(self.verbs_pipe_cqs) + pairs * 2 * self.queue_bytes(),
            PAGE,
        )
    }

    /// Index of a ring among all rings.
    fn ring_index(s: u32, dir: Dir) -> usize {
        2 * s as usize + usize::from(dir == Dir::Tx)
    }

    /// Offset of a ring in the file.
    pub fn ring_file_offset(&self, s: u32, dir: Dir) -> usize {
        self.control_len() + Self::ring_index(s, dir) * self.ring_size as usize
    }

    /// Offset of a ring's first mapping in the address space (each ring takes twice its size).
    pub fn ring_map_offset(&self, s: u32, dir: Dir) -> usize {
        self.control_len() + Self::ring_index(s, dir) * 2 * self.ring_size as usize
    }

    /// Bytes of the region file.
    pub fn file_len(&self) -> usize {
        self.control_len() + 2 * self.max_sockets as usize * self.ring_size as usize
    }

    /// Bytes of address space a mapping of the region takes.
    pub fn map_len(&self) -> usize {
        self.control_len() + 4 * self.max_sockets as usize * self.ring_size as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_valid_and_aligned() {
        let l = Layout::default();
        l.validate().unwrap();
        assert_eq!(l.control_len() % PAGE, 0);
        assert_eq!(l.socket_offset(1) - l.socket_offset(0), SOCKET_BLOCK_BYTES);
        assert_eq!(l.sockets_offset() % 64, 0);
        assert_eq!(
            l.ring_file_offset(0, Dir::Tx),
            l.control_len() + l.ring_size as usize
        );
        assert_eq!(
            l.ring_map_offset(1, Dir::Rx) - l.ring_map_offset(0, Dir::Tx),
            2 * l.ring_size as usize
        );
        assert!(l.context_line_offset(0) + 64 <= l.command_queue_offset(1));
        assert_eq!(
            l.verbs_queue_offset(0),
            l.socket_offset(l.max_sockets - 1) + SOCKET_BLOCK_BYTES
        );
        assert!(l.verbs_queue_offset(l.verbs_queues) <= l.control_len());
        assert_eq!(
            l.pipe_offset(0, 0, false),
            l.verbs_queue_offset(l.verbs_queues)
        );
        assert_eq!(
            l.pipe_offset(0, 0, true) - l.pipe_offset(0, 0, false),
            l.pipe_bytes()
        );
        assert_eq!(
            l.pipe_offset(1, 0, false),
            l.pipe_offset(0, l.verbs_pipe_cores - 1, true) + l.pipe_bytes()
        );
        assert!(l.pipe_arm_offset(l.verbs_pipe_cqs) <= l.control_len());
    }

    #[test]
    fn pipes_of_many_cores_do_not_overlap() {
        let l = Layout {
            verbs_pipe_cores: 4,
            max_contexts: 3,
            ..Layout::default()
        };
        l.validate().unwrap();
        let mut offsets: Vec<usize> = (0..3)
            .flat_map(|c| (0..4).flat_map(move |k| [(c, k, false), (c, k, true)]))
            .map(|(c, k, x)| l.pipe_offset(c, k, x))
            .collect();
        let n = offsets.len();
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), n);
        assert_eq!(
            l.pipe_arm_offset(0),
            offsets[n - 1] + l.pipe_bytes(),
            "arm words after the last pipe"
        );
    }

    #[test]
    fn queue_pairs_of_many_cores_do_not_overlap_anything() {
        let one = Layout {
            max_contexts: 3,
            ..Layout::default()
        };
        let l = Layout {
            queue_cores: 4,
            ..one
        };
        l.validate().unwrap();
        // Core 0's pairs are where a one-core layout has them.
        for c in 0..3 {
            assert_eq!(l.command_queue_offset_on(c, 0), one.command_queue_offset(c));
            assert_eq!(
                l.completion_queue_offset_on(c, 0),
                one.completion_queue_offset(c)
            );
        }
        assert_eq!(l.sockets_offset(), one.sockets_offset());
        let mut spans: Vec<(usize, usize)> = (0..3)
            .flat_map(|c| (0..4).map(move |k| (c, k)))
            .flat_map(|(c, k)| {
                let q = l.queue_bytes();
                [
                    (l.command_queue_offset_on(c, k), q),
                    (l.completion_queue_offset_on(c, k), q),
                ]
            })
            .collect();
        for c in 0..3 {
            spans.push((l.context_line_offset(c), 64));
        }
        spans.push((
            l.sockets_offset(),
            l.pipe_arm_offset(l.verbs_pipe_cqs) - l.sockets_offset(),
        ));
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:?} overlap");
        }
        let (last, len) = spans[spans.len() - 1];
        assert!(last + len <= l.control_len());
        assert_eq!(l.slot_core(5), 1);
        assert_eq!(one.slot_core(5), 0);
    }

    #[test]
    fn a_layout_without_verbs_fields_reads_with_the_defaults() {
        let json = r#"{"max_sockets":8,"max_contexts":2,"queue_entries":16,"ring_size":4096}"#;
        let l: Layout = serde_json::from_str(json).unwrap();
        assert_eq!(l.verbs_queues, 64);
        assert_eq!(l.verbs_queue_entries, 4096);
        assert_eq!(l.verbs_pipe_cores, 1);
        assert_eq!(l.verbs_pipe_entries, 1024);
        assert_eq!(l.queue_cores, 1);
    }

    #[test]
    fn out_of_range_layouts_are_refused() {
        let ok = Layout::default();
        for bad in [
            Layout {
                max_sockets: 0,
                ..ok
            },
            Layout {
                max_contexts: 0,
                ..ok
            },
            Layout {
                queue_entries: 100,
                ..ok
            },
            Layout {
                queue_entries: 4,
                ..ok
            },
            Layout {
                ring_size: 1000,
                ..ok
            },
            Layout {
                ring_size: 2048,
                ..ok
            },
            Layout {
                ring_size: 128 << 20,
                ..ok
            },
            Layout {
                verbs_queues: MAX_VERBS_QUEUES + 1,
                ..ok
            },
            Layout {
                verbs_queue_entries: 1000,
                ..ok
            },
            Layout {
                verbs_pipe_cores: MAX_PIPE_CORES + 1,
                ..ok
            },
            Layout {
                verbs_pipe_entries: 100,
                ..ok
            },
            Layout {
                verbs_pipe_cqs: MAX_PIPE_CQS + 1,
                ..ok
            },
            Layout {
                queue_cores: 0,
                ..ok
            },
            Layout {
                queue_cores: MAX_PIPE_CORES + 1,
                ..ok
            },
            Layout {
                max_sockets: MAX_SOCKETS,
                ring_size: MAX_RING_SIZE,
                ..ok
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?} accepted");
        }
    }
}
