//! The boundary with C. Every exported function's body runs through [`run`] or
//! [`with_stack`], under `catch_unwind`, after its pointers are checked here: no panic and
//! no NULL dereference crosses into the core. All of the crate's `unsafe` that dereferences
//! a caller's pointer is in this file.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use crate::error::sluice_error;

/// What [`with_stack`] needs of an opaque stack (TCP's `sluice_stack`, MTP's
/// `sluice_mtp_stack`): its poison flag and its count of refused calls.
pub(crate) trait Guarded {
    /// A call panicked: every later call is refused.
    fn poisoned(&mut self) -> &mut bool;
    /// Calls refused for the caller's bad input.
    fn refused_calls(&mut self) -> &mut u64;
}

/// A body's result: a count (>= 0) or an error.
pub(crate) type Outcome = Result<i64, sluice_error>;

/// Runs `body`, mapping an error to its code and a panic to `Panic`.
pub(crate) fn run(body: impl FnOnce() -> Outcome) -> i64 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => e as i64,
        Err(_) => sluice_error::Panic as i64,
    }
}

/// A status from [`run`]'s result (bodies of status functions return 0 on success).
pub(crate) fn status(code: i64) -> sluice_error {
    sluice_error::from_code(code).unwrap_or(sluice_error::Ok)
}

/// Runs `body` on the stack `stack` points to: NULL is refused, a poisoned stack is
/// refused, a panic poisons it, and a refusal of the caller's input is counted.
///
/// # Safety
/// `stack` is NULL or a pointer from `sluice_stack_new` (`sluice_mtp_stack_new`) not yet
/// freed, which no other thread uses during the call.
pub(crate) unsafe fn with_stack<S: Guarded>(
    stack: *mut S,
    body: impl FnOnce(&mut S) -> Outcome,
) -> i64 {
    let Some(mut ptr) = NonNull::new(stack) else {
        return sluice_error::NullPointer as i64;
    };
    // SAFETY: non-null, and by this function's contract a live stack that only this thread
    // uses now, so a unique reference for the call is sound.
    let s = unsafe { ptr.as_mut() };
    if *s.poisoned() {
        return sluice_error::Poisoned as i64;
    }
    match catch_unwind(AssertUnwindSafe(|| body(s))) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            if matches!(
                e,
                sluice_error::NullPointer
                    | sluice_error::InvalidArgument
                    | sluice_error::InvalidHandle
                    | sluice_error::BufferTooSmall
            ) {
                *s.refused_calls() += 1;
            }
            e as i64
        }
        Err(_) => {
            *s.poisoned() = true;
            sluice_error::Panic as i64
        }
    }
}

/// An out-parameter, checked before the call does anything, written at its end (so a
/// NULL out-pointer never leaves a connection opened and lost).
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// Checks `ptr`: NULL is `NullPointer`, misaligned is `InvalidArgument`.
    ///
    /// # Safety
    /// `ptr` is NULL or valid for a write of a `T` until [`Out::write`].
    pub(crate) unsafe fn new(ptr: *mut T) -> Result<Self, sluice_error> {
        let p = NonNull::new(ptr).ok_or(sluice_error::NullPointer)?;
        if !ptr.is_aligned() {
            return Err(sluice_error::InvalidArgument);
        }
        Ok(Out(p))
    }

    /// Writes the value.
    pub(crate) fn write(self, value: T) {
        // SAFETY: non-null and aligned (checked in `new`), and valid for a write of T by
        // `new`'s contract; `write` does not read or drop the old contents, which may be
        // uninitialized.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// A caller's struct, read by reference.
///
/// # Safety
/// `ptr` is NULL or points to an initialized `T` that is not written during the call.
pub(crate) unsafe fn input<'a, T>(ptr: *const T) -> Result<&'a T, sluice_error> {
    if ptr.is_null() {
        return Err(sluice_error::NullPointer);
    }
    if !ptr.is_aligned() {
        return Err(sluice_error::InvalidArgument);
    }
    // SAFETY: non-null and aligned (checked above), initialized and not written during the
    // call by this function's contract.
    Ok(unsafe { &*ptr })
}

/// A caller's struct, read and changed in place.
///
/// # Safety
/// `ptr` is NULL or points to an initialized `T` that nothing else accesses during the call.
pub(crate) unsafe fn in_out<'a, T>(ptr: *mut T) -> Result<&'a mut T, sluice_error> {
    if ptr.is_null() {
        return Err(sluice_error::NullPointer);
    }
    if !ptr.is_aligned() {
        return Err(sluice_error::InvalidArgument);
    }
    // SAFETY: non-null and aligned (checked above), initialized and not accessed elsewhere
    // during the call by this function's contract.
    Ok(unsafe { &mut *ptr })
}

/// A caller's bytes: NULL with length 0 is the empty slice; NULL otherwise is refused, and
/// so is a length no object can have.
///
/// # Safety
/// `ptr` is NULL or valid for reads of `len` bytes that are not written during the call.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], sluice_error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(sluice_error::NullPointer);
    }
    if len > isize::MAX as usize {
        return Err(sluice_error::InvalidArgument);
    }
    // SAFETY: non-null, `len` at most isize::MAX (checked above), and valid for reads of
    // `len` bytes not written meanwhile by this function's contract; u8 needs no alignment.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A caller's 6-byte MAC address: NULL is refused.
///
/// # Safety
/// `ptr` is NULL or valid for reads of 6 bytes.
pub(crate) unsafe fn mac(ptr: *const u8) -> Result<[u8; 6], sluice_error> {
    if ptr.is_null() {
        return Err(sluice_error::NullPointer);
    }
    // SAFETY: non-null (checked above) and valid for reads of 6 bytes by this function's
    // contract.
    let b = unsafe { bytes(ptr, 6)? };
    b.try_into().map_err(|_| sluice_error::InvalidArgument)
}

/// A caller's buffer to fill, zeroed: NULL is refused unless `len` is 0.
///
/// # Safety
/// `ptr` is NULL or valid for writes of `len` bytes that nothing else accesses during the
/// call.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize) -> Result<&'a mut [u8], sluice_error> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(sluice_error::NullPointer);
    }
    if len > isize::MAX as usize {
        return Err(sluice_error::InvalidArgument);
    }
    // The caller's memory may be uninitialized, which a `&mut [u8]` must not be: zero it
    // first (callers pass no more than they will fill: a frame, the readable bytes).
    // SAFETY: non-null, `len` at most isize::MAX (checked above), and valid for writes of
    // `len` bytes nothing else touches by this function's contract; after `write_bytes`
    // every byte is initialized.
    Ok(unsafe {
        std::ptr::write_bytes(ptr, 0, len);
        std::slice::from_raw_parts_mut(ptr, len)
    })
}

/// A caller's NUL-terminated string, as UTF-8.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string not written during the call.
pub(crate) unsafe fn c_str<'a>(ptr: *const std::ffi::c_char) -> Result<&'a str, sluice_error> {
    if ptr.is_null() {
        return Err(sluice_error::NullPointer);
    }
    // SAFETY: non-null, NUL-terminated and unchanged during the call by this function's
    // contract.
    let s = unsafe { std::ffi::CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| sluice_error::InvalidArgument)
}

/// Destroys a stack made by `Box::into_raw` (the `*_stack_free` functions). NULL is ignored;
/// a panic in a destructor does not unwind into C (the memory is then leaked).
///
/// # Safety
/// `stack` is NULL or a pointer from `Box::into_raw` not yet freed, not used after this call.
pub(crate) unsafe fn free<S>(stack: *mut S) {
    let Some(ptr) = NonNull::new(stack) else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: by this function's contract, a live pointer from Box::into_raw that nobody
        // uses after this call.
        drop(unsafe { Box::from_raw(ptr.as_ptr()) });
    }));
}

/// Writes `text` into a caller's buffer as a NUL-terminated C string, cut to fit (nothing
/// when the buffer is empty).
pub(crate) fn write_c_string(buf: &mut [u8], text: &str) {
    if let Some(room) = buf.len().checked_sub(1) {
        let n = text.len().min(room);
        buf[..n].copy_from_slice(&text.as_bytes()[..n]);
        buf[n] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for an opaque stack: the guard's two fields only.
    #[derive(Default)]
    struct Fake {
        poisoned: bool,
        refused_calls: u64,
    }

    impl Guarded for Fake {
        fn poisoned(&mut self) -> &mut bool {
            &mut self.poisoned
        }
        fn refused_calls(&mut self) -> &mut u64 {
            &mut self.refused_calls
        }
    }

    fn stack() -> Box<Fake> {
        Box::default()
    }

    #[test]
    fn a_panic_is_an_error_code_and_poisons_the_stack() {
        assert_eq!(run(|| panic!("boom")), sluice_error::Panic as i64);
        assert_eq!(
            run(|| Err(sluice_error::WouldBlock)),
            sluice_error::WouldBlock as i64
        );
        assert_eq!(run(|| Ok(7)), 7);
        let ptr = Box::into_raw(stack());
        // SAFETY: a live stack from Box::into_raw, used by this thread only.
        let first = unsafe { with_stack(ptr, |_| panic!("inside the core")) };
        assert_eq!(first, sluice_error::Panic as i64);
        // SAFETY: as above.
        let later = unsafe { with_stack(ptr, |_| Ok(1)) };
        assert_eq!(later, sluice_error::Poisoned as i64);
        // SAFETY: from Box::into_raw above, not used afterwards.
        drop(unsafe { Box::from_raw(ptr) });
    }

    #[test]
    fn refusals_of_the_callers_input_are_counted() {
        let ptr = Box::into_raw(stack());
        for (e, counted) in [
            (sluice_error::InvalidHandle, 1),
            (sluice_error::WouldBlock, 1),
            (sluice_error::BufferTooSmall, 2),
            (sluice_error::ConnReset, 2),
            (sluice_error::NullPointer, 3),
        ] {
            // SAFETY: a live stack from Box::into_raw, used by this thread only.
            let r = unsafe { with_stack(ptr, |_| Err(e)) };
            assert_eq!(r, e as i64);
            // SAFETY: as above, and no call is running.
            assert_eq!(unsafe { (*ptr).refused_calls }, counted);
        }
        // SAFETY: from Box::into_raw above, not used afterwards.
        drop(unsafe { Box::from_raw(ptr) });
    }

    #[test]
    fn null_and_misaligned_pointers_are_refused() {
        // SAFETY: NULL is allowed by every helper's contract.
        unsafe {
            assert_eq!(
                with_stack(std::ptr::null_mut::<Fake>(), |_| Ok(0)),
                sluice_error::NullPointer as i64
            );
            assert_eq!(
                Out::<u64>::new(std::ptr::null_mut()).err(),
                Some(sluice_error::NullPointer)
            );
            assert_eq!(
                input::<u64>(std::ptr::null()).err(),
                Some(sluice_error::NullPointer)
            );
            assert_eq!(
                in_out::<u64>(std::ptr::null_mut()).err(),
                Some(sluice_error::NullPointer)
            );
            assert_eq!(
                bytes(std::ptr::null(), 3).err(),
                Some(sluice_error::NullPointer)
            );
            assert_eq!(bytes(std::ptr::null(), 0), Ok(&[][..]));
            assert_eq!(
                bytes_mut(std::ptr::null_mut(), 3).err(),
                Some(sluice_error::NullPointer)
            );
            assert_eq!(
                c_str(std::ptr::null()).err(),
                Some(sluice_error::NullPointer)
            );
        }
        let mut words = [0u64; 2];
        let misaligned = words
            .as_mut_ptr()
            .cast::<u8>()
            .wrapping_add(1)
            .cast::<u64>();
        // SAFETY: in bounds of `words` and valid for writes; refused before any access.
        unsafe {
            assert_eq!(
                Out::new(misaligned).err(),
                Some(sluice_error::InvalidArgument)
            );
            assert_eq!(
                input(misaligned.cast_const()).err(),
                Some(sluice_error::InvalidArgument)
            );
            assert_eq!(
                in_out(misaligned).err(),
                Some(sluice_error::InvalidArgument)
            );
        }
        let byte = 0u8;
        // SAFETY: a length no object can have is refused before the slice is made.
        let huge = unsafe { bytes(&byte, usize::MAX) };
        assert_eq!(huge.err(), Some(sluice_error::InvalidArgument));
        let bad_utf8 = [0xffu8, 0];
        // SAFETY: NUL-terminated.
        let s = unsafe { c_str(bad_utf8.as_ptr().cast()) };
        assert_eq!(s.err(), Some(sluice_error::InvalidArgument));
    }

    #[test]
    fn a_buffer_to_fill_is_zeroed_and_exactly_as_long_as_asked() {
        let mut buf = [0xaau8; 8];
        // SAFETY: valid for writes of 8 bytes, nothing else touches it.
        let slice = unsafe { bytes_mut(buf.as_mut_ptr(), 5).unwrap() };
        assert_eq!(slice, &[0; 5]);
        assert_eq!(buf, [0, 0, 0, 0, 0, 0xaa, 0xaa, 0xaa]);
    }
}
