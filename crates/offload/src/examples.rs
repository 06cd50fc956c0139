//! The paper's two offload functions (flexins.txt 5.6, appendix A.3), as Rust handlers,
//! with their request formats (little-endian).
//!
//! - Batched READ: `n: u32`, then `n` items of `(addr: u64, len: u32)`; the response is
//!   the items' bytes, concatenated.
//! - Linked-list traversal: `head: u64, key: u64, max_hops: u32`; a node is `key: u64,
//!   next: u64 (0 ends the list), value: [u8; VALUE_LEN]`; the response is the value of the
//!   first node with the key, within `max_hops` nodes.

use crate::api::{Handler, HandlerError, OffloadCtx};

/// Bytes of a list node's value (the paper's 64-byte values).
pub const VALUE_LEN: usize = 64;
/// Bytes of a list node.
pub const NODE_LEN: usize = 16 + VALUE_LEN;
/// Items one batched READ request carries at most.
pub const MAX_ITEMS: usize = 256;

fn u32_at(b: &[u8], at: usize) -> Result<u32, HandlerError> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(HandlerError::BadRequest)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, HandlerError> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or(HandlerError::BadRequest)
}

/// A batched READ request for `items`.
pub fn batched_read_request(items: &[(u64, u32)]) -> Vec<u8> {
    let mut out = (items.len() as u32).to_le_bytes().to_vec();
    for &(addr, len) in items {
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    out
}

/// A list traversal request.
pub fn list_request(head: u64, key: u64, max_hops: u32) -> Vec<u8> {
    let mut out = head.to_le_bytes().to_vec();
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&max_hops.to_le_bytes());
    out
}

/// A list node's bytes.
pub fn list_node(key: u64, next: u64, value: &[u8; VALUE_LEN]) -> [u8; NODE_LEN] {
    let mut n = [0u8; NODE_LEN];
    n[..8].copy_from_slice(&key.to_le_bytes());
    n[8..16].copy_from_slice(&next.to_le_bytes());
    n[16..].copy_from_slice(value);
    n
}

/// Batched READ: every item read at once (all submitted, then waited for), one response.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchedRead;

impl Handler for BatchedRead {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        let req = ctx.request().to_vec();
        let n = u32_at(&req, 0)? as usize;
        if n > MAX_ITEMS || req.len() != 4 + 12 * n {
            return Err(HandlerError::BadRequest);
        }
        let mut items = Vec::with_capacity(n);
        let mut total = 0usize;
        for i in 0..n {
            let (addr, len) = (
                u64_at(&req, 4 + 12 * i)?,
                u32_at(&req, 12 + 12 * i)? as usize,
            );
            total = total
                .checked_add(len)
                .ok_or(HandlerError::ResponseTooLarge)?;
            items.push((addr, len));
        }
        ctx.alloc_resp(total)?;
        let mut at = 0;
        for (addr, len) in items {
            ctx.submit_read(addr, at, len)?;
            at += len;
        }
        ctx.wait_all()?;
        ctx.submit_resp(total)
    }
}

/// Linked-list traversal: follows next-pointers from the head to the key, within the
/// request's hop limit (and the step budget), and answers the value.
#[derive(Clone, Copy, Debug, Default)]
pub struct ListTraversal;

impl Handler for ListTraversal {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        let req = ctx.request();
        let (head, key, max_hops) = (u64_at(req, 0)?, u64_at(req, 8)?, u32_at(req, 16)?);
        // The response holds the value; a node's key and next pointer are read into its
        // front first, and the value over them once the key matches.
        ctx.alloc_resp(VALUE_LEN)?;
        let mut node = head;
        for _ in 0..max_hops {
            if node == 0 {
                break;
            }
            let id = ctx.submit_read(node, 0, 16)?;
            ctx.wait(id)?;
            let r = ctx.resp_mut().ok_or(HandlerError::NoResponse)?;
            let (k, next) = (u64_at(r, 0)?, u64_at(r, 8)?);
            if k == key {
                let id = ctx.submit_read(node + 16, 0, VALUE_LEN)?;
                ctx.wait(id)?;
                return ctx.submit_resp(VALUE_LEN);
            }
            node = next;
        }
        Err(HandlerError::NotFound)
    }
}
