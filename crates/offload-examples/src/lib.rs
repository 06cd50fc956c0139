//! The paper's two offload functions (flexins.txt 5.6, appendix A.3) as a handler library
//! the engine loads at run time (`libsluice_offload_examples.so`), with the request formats
//! of `sluice_offload::examples` (little-endian):
//!
//! - `batched_read`: `n: u32`, then `n` x `(addr: u64, len: u32)`; the items' bytes.
//! - `list_traversal`: `head: u64, key: u64, max_hops: u32`; a node is `key: u64, next:
//!   u64 (0 ends), value: [u8; 64]`; the value of the first node with the key.
//!
//! And three that misbehave, for the tests: `panics`, `spins` (loops through the API until
//! the budget stops it), `reads_outside` (reads address 0, in no region).
#![deny(unsafe_code)]

use sluice_offload_api::{export_handlers, status, Ctx, Status};

/// Bytes of a list node's value.
pub const VALUE_LEN: usize = 64;
/// Items one batched READ carries at most.
pub const MAX_ITEMS: usize = 256;

fn u32_at(b: &[u8], at: usize) -> Result<u32, Status> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(Status(status::BAD_REQUEST))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, Status> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or(Status(status::BAD_REQUEST))
}

/// Batched READ: every item submitted, then all waited for; one response.
pub fn batched_read(ctx: &mut Ctx<'_>) -> Result<(), Status> {
    let req = ctx.request().to_vec();
    let n = u32_at(&req, 0)? as usize;
    if n > MAX_ITEMS || req.len() != 4 + 12 * n {
        return Err(Status(status::BAD_REQUEST));
    }
    let mut total = 0usize;
    for i in 0..n {
        total = total
            .checked_add(u32_at(&req, 12 + 12 * i)? as usize)
            .ok_or(Status(status::RESPONSE_TOO_LARGE))?;
    }
    ctx.alloc_resp(total)?;
    let (mut at, mut last) = (0, None);
    for i in 0..n {
        let (addr, len) = (
            u64_at(&req, 4 + 12 * i)?,
            u32_at(&req, 12 + 12 * i)? as usize,
        );
        last = Some(ctx.submit_read(addr, at, len)?);
        at += len;
    }
    if let Some(id) = last {
        ctx.wait(id)?;
    }
    ctx.submit_resp(total)
}

/// Linked-list traversal: follows next-pointers from the head to the key within the hop
/// limit; a node's key and next are read into the response's front, the value over them.
pub fn list_traversal(ctx: &mut Ctx<'_>) -> Result<(), Status> {
    let req = ctx.request();
    let (head, key, max_hops) = (u64_at(req, 0)?, u64_at(req, 8)?, u32_at(req, 16)?);
    ctx.alloc_resp(VALUE_LEN)?;
    let mut node = head;
    for _ in 0..max_hops {
        if node == 0 {
            break;
        }
        let id = ctx.submit_read(node, 0, 16)?;
        ctx.wait(id)?;
        let r = ctx.resp_mut();
        let (k, next) = (u64_at(r, 0)?, u64_at(r, 8)?);
        if k == key {
            let id = ctx.submit_read(node + 16, 0, VALUE_LEN)?;
            ctx.wait(id)?;
            return ctx.submit_resp(VALUE_LEN);
        }
        node = next;
    }
    Err(Status(status::NOT_FOUND))
}

/// Panics (the library's boundary catches it: status PANICKED).
pub fn panics(ctx: &mut Ctx<'_>) -> Result<(), Status> {
    let n = ctx.request().len();
    panic!("a handler that panics on a {n}-byte request");
}

/// Loops through the API for ever: the step budget stops it.
pub fn spins(ctx: &mut Ctx<'_>) -> Result<(), Status> {
    loop {
        ctx.step()?;
    }
}

/// Reads address 0, inside no region: refused.
pub fn reads_outside(ctx: &mut Ctx<'_>) -> Result<(), Status> {
    ctx.alloc_resp(8)?;
    let id = ctx.submit_read(0, 0, 8)?;
    ctx.wait(id)?;
    ctx.submit_resp(8)
}

export_handlers!(
    "batched_read" => batched_read,
    "list_traversal" => list_traversal,
    "panics" => panics,
    "spins" => spins,
    "reads_outside" => reads_outside,
);
