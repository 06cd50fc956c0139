//! eBPF bytecode: whatever the verifier accepts runs on any frame without panic, without a
//! run-time error and within its budget (the property lives in `sluice_ebpf::fuzzing`).

/// The `ebpf_verify_run` target.
pub fn verify_run(data: &[u8]) {
    let _ = sluice_ebpf::fuzzing::verify_and_run(data);
}
