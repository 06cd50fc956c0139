//! Module and map admin requests (`sluice ctl module ...`, `sluice ctl map ...`; issue 19
//! items 1b, 1c): answered in the engine's hook turn, between frames, since the modules and
//! their maps live in the engine's [`Hooks`] and the engine is one thread.

use sluice_ebpf::MapKind;
use sluice_engine::hooks::{HookPoint, Hooks};
use sluice_engine::modules::ModuleId;
use sluice_shm::admin::{from_hex, to_hex, AdminReply, AdminRequest, ModuleRow, Page, MAX_OBJECT};

use crate::counters::Counters;

/// Longest module name or section an operator may give.
const MAX_NAME: usize = 255;

/// The hook point a request names.
pub(crate) fn hook_point(name: &str) -> Result<HookPoint, String> {
    match name {
        "ingress" => Ok(HookPoint::Ingress),
        "egress" => Ok(HookPoint::Egress),
        "established" => Ok(HookPoint::Established),
        other => Err(format!(
            "EINVAL: no hook point {other:?} (ingress, established or egress)"
        )),
    }
}

/// Answers an admitted module or map request; Err is the reason of a Refused reply.
pub(crate) fn answer(
    req: AdminRequest,
    hooks: &mut Hooks,
    counters: &mut Counters,
) -> Result<AdminReply, String> {
    match req {
        AdminRequest::ModuleLoad {
            hook,
            name,
            section,
            object,
        } => {
            let r = load(&hook, &name, &section, &object, hooks);
            match r {
                Ok(_) => counters.modules_loaded += 1,
                Err(_) => counters.modules_refused += 1,
            }
            r
        }
        AdminRequest::ModuleUnload { id } => hooks
            .modules_mut()
            .detach(ModuleId(id))
            .map(|_| AdminReply::Done)
            .ok_or_else(|| format!("ENOENT: no module {id}")),
        AdminRequest::ModuleList => Ok(AdminReply::Modules { rows: list(hooks) }),
        AdminRequest::MapDump {
            module,
            map,
            cursor,
            max,
        } => dump(hooks, module, &map, cursor, max),
        AdminRequest::MapGet { module, map, key } => {
            let key = from_hex(&key).map_err(|e| format!("EINVAL: key {e}"))?;
            with_map(hooks, module, &map, |maps, id| {
                match maps.get(id, &key).map_err(|e| format!("EINVAL: {e}"))? {
                    Some(v) => Ok(AdminReply::MapValue { value: to_hex(v) }),
                    None => Err(format!("ENOENT: no key {} in {map}", to_hex(&key))),
                }
            })
        }
        AdminRequest::MapSet {
            module,
            map,
            key,
            value,
        } => {
            let key = from_hex(&key).map_err(|e| format!("EINVAL: key {e}"))?;
            let value = from_hex(&value).map_err(|e| format!("EINVAL: value {e}"))?;
            with_map(hooks, module, &map, |maps, id| {
                // BPF_ANY: insert or replace.
                maps.set(id, &key, &value, 0)
                    .map(|_| AdminReply::Done)
                    .map_err(|e| format!("EINVAL: {e}"))
            })
        }
        AdminRequest::MapDelete { module, map, key } => {
            let key = from_hex(&key).map_err(|e| format!("EINVAL: key {e}"))?;
            with_map(hooks, module, &map, |maps, id| {
                maps.delete(id, &key)
                    .map(|_| AdminReply::Done)
                    .map_err(|e| format!("EINVAL: {e}"))
            })
        }
        _ => Err("EINVAL: not a module request".to_string()),
    }
}

fn load(
    hook: &str,
    name: &str,
    section: &str,
    object: &str,
    hooks: &mut Hooks,
) -> Result<AdminReply, String> {
    let at = hook_point(hook)?;
    if name.len() > MAX_NAME || section.len() > MAX_NAME {
        return Err(format!(
            "EINVAL: name and section: at most {MAX_NAME} bytes"
        ));
    }
    // Checked before decoding, so a too-large request costs no allocation of its size.
    if object.len() / 2 > MAX_OBJECT {
        return Err(format!("E2BIG: an object of at most {MAX_OBJECT} bytes"));
    }
    let bytes = from_hex(object).map_err(|e| format!("EINVAL: object {e}"))?;
    let (program, maps) =
        sluice_ebpf::load(&bytes, section).map_err(|e| format!("EINVAL: {name}: {e}"))?;
    let id = hooks
        .modules_mut()
        .attach(at, name, section, program, maps)
        .map_err(|e| format!("ENOSPC: {e}"))?;
    Ok(AdminReply::ModuleLoaded { id: id.0 })
}

fn list(hooks: &Hooks) -> Vec<ModuleRow> {
    hooks
        .modules()
        .modules()
        .iter()
        .map(|m| {
            let c = m.counters;
            ModuleRow {
                id: m.id.0,
                hook: m.at.name().to_string(),
                name: m.name.clone(),
                section: m.section.clone(),
                insns: m.program.insns().len() as u32,
                maps: m.maps.defs().map(|d| d.name.clone()).collect(),
                runs: c.runs,
                passed: c.passed,
                dropped: c.dropped + c.aborted + c.invalid_action,
                tx: c.tx,
                redirected: c.redirected,
                run_errors: c.run_errors,
                exec: m.mode().to_string(),
            }
        })
        .collect()
}

/// Runs `f` on module `module`'s map `map`.
fn with_map(
    hooks: &mut Hooks,
    module: u32,
    map: &str,
    f: impl FnOnce(&mut sluice_ebpf::Maps, sluice_ebpf::MapId) -> Result<AdminReply, String>,
) -> Result<AdminReply, String> {
    let mut chain = hooks.modules_mut();
    let m = chain
        .module_mut(ModuleId(module))
        .ok_or_else(|| format!("ENOENT: no module {module}"))?;
    let id = m
        .maps
        .id(map)
        .ok_or_else(|| format!("ENOENT: module {module} has no map {map:?}"))?;
    f(&mut m.maps, id)
}

fn dump(
    hooks: &mut Hooks,
    module: u32,
    map: &str,
    cursor: u32,
    max: u32,
) -> Result<AdminReply, String> {
    with_map(hooks, module, map, |maps, id| {
        let array = maps
            .map(id)
            .is_some_and(|m| matches!(m.def().kind, MapKind::Array | MapKind::PerCpuArray));
        let mut page = Page::new(max);
        let entries = maps.iter(id).map_err(|e| format!("EINVAL: {e}"))?;
        for (i, (k, v)) in entries.enumerate().skip(cursor as usize) {
            // An array has every index: the ones never written say nothing.
            if array && v.iter().all(|&b| b == 0) {
                continue;
            }
            if !page.push((to_hex(k), to_hex(v))) {
                return Ok(AdminReply::MapEntries {
                    rows: page.rows,
                    next: Some(i as u32),
                });
            }
        }
        Ok(AdminReply::MapEntries {
            rows: page.rows,
            next: None,
        })
    })
}
