//! Layouts (flextoe.txt 3.2, Table 3): which roles run on which data-path thread. Roles
//! talk only through links, whichever thread they share, so a layout changes nothing but
//! the assignment.

/// One role of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleId {
    /// The device's receive and transmit side.
    Nic,
    /// Pre replica `r`.
    Pre(u16),
    /// Flow group `g`'s protocol role.
    Protocol(u16),
    /// Post replica `r`.
    Post(u16),
}

impl std::fmt::Display for RoleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoleId::Nic => f.write_str("nic"),
            RoleId::Pre(r) => write!(f, "pre {r}"),
            RoleId::Protocol(g) => write!(f, "protocol {g}"),
            RoleId::Post(r) => write!(f, "post {r}"),
        }
    }
}

/// How the data-path's roles are spread over threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every role on one thread.
    RunToCompletion {
        /// Flow groups.
        groups: u16,
    },
    /// NIC and pre on one thread, the protocol roles and post on another.
    Pipelined {
        /// Flow groups.
        groups: u16,
    },
    /// Pre and post replicated: the NIC and protocol roles on thread 0, replica `r`'s pre
    /// and post on thread `r + 1`.
    Replicated {
        /// Flow groups.
        groups: u16,
        /// Pre and post replicas.
        replicas: u16,
    },
    /// A thread per flow group with its protocol role and one pre and one post replica;
    /// the NIC role on thread 0.
    FlowGroups {
        /// Flow groups (= threads).
        groups: u16,
    },
}

/// Most flow groups or replicas a layout may have.
pub const MAX_GROUPS: u16 = 64;

/// Why a layout cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Groups or replicas out of 1..=[`MAX_GROUPS`].
    Size {
        /// What is out of range.
        what: &'static str,
        /// Its value.
        value: u16,
    },
    /// More data-path threads than cores.
    TooManyThreads {
        /// Threads the layout needs.
        threads: usize,
        /// Cores available.
        cores: usize,
    },
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::Size { what, value } => {
                write!(f, "layout: {value} {what}, must be 1..={MAX_GROUPS}")
            }
            LayoutError::TooManyThreads { threads, cores } => write!(
                f,
                "layout: {threads} data-path threads, but only {cores} core(s) are available"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// A layout's assignment: the roles of each thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Flow groups.
    pub groups: u16,
    /// Pre and post replicas.
    pub replicas: u16,
    /// Per thread, its roles in stepping order.
    pub threads: Vec<Vec<RoleId>>,
}

impl Layout {
    /// Flow groups of the layout.
    pub fn groups(&self) -> u16 {
        match *self {
            Layout::RunToCompletion { groups }
            | Layout::Pipelined { groups }
            | Layout::Replicated { groups, .. }
            | Layout::FlowGroups { groups } => groups,
        }
    }

    /// The assignment, or why the shape is invalid.
    pub fn plan(&self) -> Result<Plan, LayoutError> {
        let groups = self.groups();
        if !(1..=MAX_GROUPS).contains(&groups) {
            return Err(LayoutError::Size {
                what: "flow groups",
                value: groups,
            });
        }
        let protocols = (0..groups).map(RoleId::Protocol);
        let (replicas, threads) = match *self {
            Layout::RunToCompletion { .. } => {
                let mut t = vec![RoleId::Nic, RoleId::Pre(0)];
                t.extend(protocols);
                t.push(RoleId::Post(0));
                (1, vec![t])
            }
            Layout::Pipelined { .. } => {
                let mut second: Vec<RoleId> = protocols.collect();
                second.push(RoleId::Post(0));
                (1, vec![vec![RoleId::Nic, RoleId::Pre(0)], second])
            }
            Layout::Replicated { replicas, .. } => {
                if !(1..=MAX_GROUPS).contains(&replicas) {
                    return Err(LayoutError::Size {
                        what: "replicas",
                        value: replicas,
                    });
                }
                let mut first = vec![RoleId::Nic];
                first.extend(protocols);
                let mut threads = vec![first];
                threads.extend((0..replicas).map(|r| vec![RoleId::Pre(r), RoleId::Post(r)]));
                (replicas, threads)
            }
            Layout::FlowGroups { .. } => {
                let threads = (0..groups)
                    .map(|g| {
                        let mut t = if g == 0 { vec![RoleId::Nic] } else { vec![] };
                        t.extend([RoleId::Pre(g), RoleId::Protocol(g), RoleId::Post(g)]);
                        t
                    })
                    .collect();
                (groups, threads)
            }
        };
        Ok(Plan {
            groups,
            replicas,
            threads,
        })
    }

    /// [`Layout::plan`], refused when it needs more threads than `cores`.
    pub fn plan_on(&self, cores: usize) -> Result<Plan, LayoutError> {
        let plan = self.plan()?;
        if plan.threads.len() > cores.max(1) {
            return Err(LayoutError::TooManyThreads {
                threads: plan.threads.len(),
                cores,
            });
        }
        Ok(plan)
    }
}

impl Plan {
    /// One line per thread with its roles, then the flow groups.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, roles) in self.threads.iter().enumerate() {
            let names: Vec<String> = roles.iter().map(ToString::to_string).collect();
            s.push_str(&format!("thread {i}: {}\n", names.join(", ")));
        }
        s.push_str(&format!(
            "flow groups: {} (0..{}), pre/post replicas: {}\n",
            self.groups, self.groups, self.replicas
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every role of a plan appears on exactly one thread.
    fn each_role_once(plan: &Plan) {
        let mut all: Vec<RoleId> = plan.threads.iter().flatten().copied().collect();
        let n = all.len();
        all.dedup();
        assert_eq!(all.len(), n);
        let count = |f: fn(&RoleId) -> bool| all.iter().filter(|r| f(r)).count();
        assert_eq!(count(|r| *r == RoleId::Nic), 1);
        assert_eq!(
            count(|r| matches!(r, RoleId::Protocol(_))),
            usize::from(plan.groups)
        );
        assert_eq!(
            count(|r| matches!(r, RoleId::Pre(_))),
            usize::from(plan.replicas)
        );
        assert_eq!(
            count(|r| matches!(r, RoleId::Post(_))),
            usize::from(plan.replicas)
        );
    }

    #[test]
    fn each_layout_places_every_role_once() {
        for l in [
            Layout::RunToCompletion { groups: 3 },
            Layout::Pipelined { groups: 2 },
            Layout::Replicated {
                groups: 2,
                replicas: 3,
            },
            Layout::FlowGroups { groups: 4 },
        ] {
            each_role_once(&l.plan().unwrap());
        }
        let p = Layout::FlowGroups { groups: 2 }.plan().unwrap();
        assert_eq!(p.threads.len(), 2);
        assert_eq!(p.threads[0][0], RoleId::Nic, "the NIC role on thread 0");
        assert!(p.describe().contains("thread 1: pre 1, protocol 1, post 1"));
    }

    #[test]
    fn bad_shapes_and_too_many_threads_are_typed_errors() {
        assert_eq!(
            Layout::FlowGroups { groups: 0 }.plan(),
            Err(LayoutError::Size {
                what: "flow groups",
                value: 0
            })
        );
        assert!(Layout::Replicated {
            groups: 1,
            replicas: 0
        }
        .plan()
        .is_err());
        let e = Layout::FlowGroups { groups: 3 }.plan_on(2).unwrap_err();
        assert_eq!(
            e,
            LayoutError::TooManyThreads {
                threads: 3,
                cores: 2
            }
        );
        assert!(e.to_string().contains("only 2 core(s)"));
        assert!(Layout::RunToCompletion { groups: 4 }.plan_on(1).is_ok());
    }
}
