//! Asking systemd's service manager for a cgroup subtree of reaper's own: a transient scope with
//! `Delegate=yes` that reaper moves itself into, as `systemd-run --scope -p Delegate=yes` does
//! (org.freedesktop.systemd1(5): `StartTransientUnit`, `JobRemoved`).
//!
//! Under systemd the cgroup tree is systemd's: a normal user may not write to its session's
//! cgroup, and root's service cgroup belongs to its unit (systemd.resource-control(5),
//! "Delegate="). A delegated scope is the documented way for a program to own a subtree: its
//! files are the caller's, and systemd leaves what is below it alone. The scope lives as long as
//! a process is in it and is collected afterwards.
//!
//! Mechanism only: which manager to ask, and whether to ask at all, is the caller's choice.

use std::time::Duration;

use zbus::zvariant::{OwnedObjectPath, Value};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// Which service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bus {
    /// The user's own manager (`user@UID.service`), on the session bus
    /// (`$DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus`).
    User,
    /// The system manager (PID 1), on the system bus.
    System,
}

impl Bus {
    pub fn as_str(self) -> &'static str {
        match self {
            Bus::User => "the user's service manager",
            Bus::System => "the system service manager",
        }
    }
}

/// A failed step of the conversation with systemd, with what systemd or the bus said.
#[derive(Debug)]
pub struct SystemdError {
    pub step: &'static str,
    pub detail: String,
}

impl std::fmt::Display for SystemdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.detail)
    }
}

impl std::error::Error for SystemdError {}

fn fail(step: &'static str) -> impl FnOnce(zbus::Error) -> SystemdError {
    move |e| SystemdError {
        step,
        detail: e.to_string(),
    }
}

/// A connection to one manager, with every call bounded by `timeout` (a manager that does not
/// answer must not hang reaper).
pub struct Manager {
    conn: zbus::Connection,
    bus: Bus,
}

impl Manager {
    pub async fn connect(bus: Bus, timeout: Duration) -> Result<Self, SystemdError> {
        let builder = match bus {
            Bus::User => zbus::connection::Builder::session(),
            Bus::System => zbus::connection::Builder::system(),
        }
        .map_err(fail("cannot find the bus address"))?;
        let conn = tokio::time::timeout(timeout, builder.method_timeout(timeout).build())
            .await
            .map_err(|_| SystemdError {
                step: "cannot connect to the bus",
                detail: format!("no answer within {timeout:?}"),
            })?
            .map_err(fail("cannot connect to the bus"))?;
        Ok(Self { conn, bus })
    }

    pub fn bus(&self) -> Bus {
        self.bus
    }

    /// Calls `method` of the manager's interface; an error names the method.
    async fn manager<B>(
        &self,
        method: &'static str,
        body: &B,
    ) -> Result<zbus::Message, SystemdError>
    where
        B: zbus::export::serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(Some(SYSTEMD), MANAGER_PATH, Some(MANAGER), method, body)
            .await
            .map_err(fail(method))
    }

    /// The unit `pid` belongs to (0: the caller, as systemd sees it), and whether it has
    /// `Delegate=yes` (a subtree already ours).
    pub async fn unit_of(&self, pid: u32) -> Result<(String, bool), SystemdError> {
        let reply = self.manager("GetUnitByPID", &(pid,)).await?;
        let unit: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(fail("GetUnitByPID's answer"))?;
        let id: String = self
            .property(&unit, "org.freedesktop.systemd1.Unit", "Id")
            .await?
            .try_into()
            .map_err(|e: zbus::zvariant::Error| SystemdError {
                step: "the unit's Id",
                detail: e.to_string(),
            })?;
        // `Delegate` is a property of the unit's kind (Service, Scope); a slice has none.
        let kind = match id.rsplit_once('.') {
            Some((_, "service")) => Some("org.freedesktop.systemd1.Service"),
            Some((_, "scope")) => Some("org.freedesktop.systemd1.Scope"),
            _ => None,
        };
        let delegated = match kind {
            Some(iface) => self
                .property(&unit, iface, "Delegate")
                .await
                .ok()
                .and_then(|v| bool::try_from(v).ok())
                .unwrap_or(false),
            None => false,
        };
        Ok((id, delegated))
    }

    async fn property(
        &self,
        path: &OwnedObjectPath,
        iface: &str,
        name: &str,
    ) -> Result<zbus::zvariant::OwnedValue, SystemdError> {
        let reply = self
            .conn
            .call_method(Some(SYSTEMD), path, Some(PROPERTIES), "Get", &(iface, name))
            .await
            .map_err(fail("reading a unit property"))?;
        reply
            .body()
            .deserialize()
            .map_err(fail("a unit property's value"))
    }

    /// Starts the transient scope `unit` (`NAME.scope`) with `Delegate=yes` holding `pid` (0: the
    /// caller, whose pid systemd takes from the bus credentials, right across PID namespaces), and
    /// waits until systemd has finished the start job (the move is done then). The scope is
    /// collected when its last process exits.
    pub async fn start_delegated_scope(
        &self,
        unit: &str,
        pid: u32,
        description: &str,
        timeout: Duration,
    ) -> Result<(), SystemdError> {
        // Listen before asking: the job may finish before the call returns.
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(SYSTEMD)
            .and_then(|b| b.interface(MANAGER))
            .and_then(|b| b.member("JobRemoved"))
            .and_then(|b| b.path(MANAGER_PATH))
            .map_err(fail("building the JobRemoved match"))?
            .build();
        let mut jobs = zbus::MessageStream::for_match_rule(rule, &self.conn, Some(64))
            .await
            .map_err(fail("subscribing to JobRemoved"))?;
        // Managers send job signals only to subscribed clients (org.freedesktop.systemd1(5)).
        self.manager("Subscribe", &()).await?;
        let properties: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description)),
            ("PIDs", Value::from(vec![pid])),
            ("Delegate", Value::from(true)),
            ("CollectMode", Value::from("inactive-or-failed")),
        ];
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        let reply = self
            .manager("StartTransientUnit", &(unit, "fail", properties, aux))
            .await?;
        let job: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(fail("StartTransientUnit's answer"))?;
        let wait = async {
            use futures_util::StreamExt as _;
            while let Some(msg) = jobs.next().await {
                let Ok(msg) = msg else { continue };
                let Ok((_id, path, _unit, result)) =
                    msg.body()
                        .deserialize::<(u32, OwnedObjectPath, String, String)>()
                else {
                    continue;
                };
                if path == job {
                    return Some(result);
                }
            }
            None
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Some(r)) if r == "done" => Ok(()),
            Ok(Some(r)) => Err(SystemdError {
                step: "starting the scope",
                detail: format!("systemd's job for {unit} ended with '{r}'"),
            }),
            Ok(None) => Err(SystemdError {
                step: "starting the scope",
                detail: "the bus connection closed before the job finished".into(),
            }),
            Err(_) => Err(SystemdError {
                step: "starting the scope",
                detail: format!("the job for {unit} did not finish within {timeout:?}"),
            }),
        }
    }
}
