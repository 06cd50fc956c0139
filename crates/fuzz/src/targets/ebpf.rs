//! eBPF bytecode: whatever the verifier accepts runs on any frame without panic, without a
//! run-time error and within its budget (the property lives in `sluice_ebpf::fuzzing`).

/// The `ebpf_verify_run` target.
pub fn verify_run(data: &[u8]) {
    let _ = sluice_ebpf::fuzzing::verify_and_run(data);
}

/// The `ebpf_jit_differential` target: what the verifier accepts runs identically under the
/// x86-64 JIT and the interpreter (the property lives in `sluice_ebpf_jit::differential`).
pub fn jit_differential(data: &[u8]) {
    let _ = sluice_ebpf_jit::differential::check(data);
}
