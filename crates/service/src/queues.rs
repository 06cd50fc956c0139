//! Which verbs queues of an application's region are given out, shared by the objects
//! that use them (RDMA completion queues and queue pairs, MTP endpoints), so that the two
//! transports never hand out the same queue.

use std::sync::{Arc, Mutex};

use sluice_shm::Region;

/// One application's verbs queues: the region and which are in use.
#[derive(Clone)]
pub(crate) struct VerbsQueues {
    /// The region they lie in.
    pub region: Arc<Region>,
    used: Arc<Mutex<Vec<bool>>>,
}

impl VerbsQueues {
    /// Every queue of `region` free.
    pub fn new(region: Arc<Region>) -> VerbsQueues {
        let n = region.layout().verbs_queues as usize;
        VerbsQueues {
            region,
            used: Arc::new(Mutex::new(vec![false; n])),
        }
    }

    /// Takes `N` free queues, zeroed; None (nothing taken) if there are not `N`.
    pub fn take<const N: usize>(&self) -> Option<[u32; N]> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = [0u32; N];
        let mut found = 0;
        for (i, u) in used.iter().enumerate() {
            if found == N {
                break;
            }
            if !u {
                out[found] = i as u32;
                found += 1;
            }
        }
        if found < N {
            return None;
        }
        for &q in &out {
            used[q as usize] = true;
            self.region.clear_verbs_queue(q);
        }
        Some(out)
    }

    /// Gives queue `q` back.
    pub fn free(&self, q: u32) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(u) = used.get_mut(q as usize) {
            *u = false;
        }
    }
}
