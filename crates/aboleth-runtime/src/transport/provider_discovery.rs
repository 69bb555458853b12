//! What `connect_all("efa")` and `connect_all("ionic")` find on this host, for an error that
//! names what is missing: the RDMA devices the kernel lists in `/sys/class/infiniband` with the
//! driver each is bound to (`efa`, `ionic`, `mlx5_core`: the `device/driver` link), and whether
//! the provider's user-space libraries load (rdma-core's `libibverbs.so.1` and `libefa.so.1` or
//! `libionic.so.1`, and libfabric's `libfabric.so.1` for EFA's `efa-direct` GDA operations),
//! loaded with `dlopen` at run time so that nothing is needed to build.
//!
//! What it does not do: open a device, create queues, or call any verb. Neither transport has
//! a lowering or a device runtime yet, so even a host with the device and the libraries gets an
//! error; this module makes it say exactly what was found.

use std::path::Path;

use aboleth_abi::Transport;

use crate::error::RuntimeError;

/// One RDMA device: its name and the kernel driver it is bound to (`None`: no driver link).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaDevice {
    /// The device's name in sysfs (`rdmap0s6`, `mlx5_0`, `ionic_0`).
    pub name: String,
    /// The driver's name (`efa`, `ionic`, `mlx5_core`).
    pub driver: Option<String>,
}

/// Whether one library loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryProbe {
    /// The soname tried.
    pub name: &'static str,
    /// What the transport needs it for.
    pub purpose: &'static str,
    /// `Ok(())` when it loaded, else the loader's message.
    pub loaded: Result<(), String>,
}

/// What was found for one provider transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderDiscovery {
    /// EFA or Ionic.
    pub transport: Transport,
    /// The directory listed.
    pub sysfs_directory: String,
    /// Its devices; `None` when the directory could not be listed.
    pub devices: Option<Vec<RdmaDevice>>,
    /// Why it could not be listed (`No such file or directory`, a permission error).
    pub unreadable: Option<String>,
    /// The libraries tried, in order.
    pub libraries: Vec<LibraryProbe>,
}

/// The kernel driver a provider's devices are bound to.
pub fn provider_driver(transport: Transport) -> &'static str {
    match transport {
        Transport::Ionic => "ionic",
        _ => "efa",
    }
}

/// The libraries a provider transport would load, with what each is for.
pub fn provider_libraries(transport: Transport) -> &'static [(&'static str, &'static str)] {
    match transport {
        Transport::Ionic => &[
            ("libibverbs.so.1", "rdma-core's verbs"),
            (
                "libionic.so.1",
                "rdma-core's ionic provider (ionic_dv_qp_set_gda, the doorbell value the GPU rings)",
            ),
        ],
        _ => &[
            ("libibverbs.so.1", "rdma-core's verbs"),
            (
                "libefa.so.1",
                "rdma-core's EFA provider (efadv_query_qp_wqs: the send queue and doorbell the GPU writes)",
            ),
            (
                "libfabric.so.1",
                "libfabric's efa-direct fabric (FI_EFA_GDA_OPS)",
            ),
        ],
    }
}

/// Lists `directory` (normally `/sys/class/infiniband`) with each device's driver, and tries
/// each of the provider's libraries with `load`.
pub fn discover_in(
    transport: Transport,
    directory: &Path,
    load: impl Fn(&str) -> Result<(), String>,
) -> ProviderDiscovery {
    let listing = std::fs::read_dir(directory);
    let unreadable = listing.as_ref().err().map(|error| error.to_string());
    let devices = listing.ok().map(|entries| {
        let mut devices: Vec<RdmaDevice> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| {
                let driver = std::fs::read_link(entry.path().join("device/driver"))
                    .ok()
                    .and_then(|target| {
                        target
                            .file_name()
                            .map(|name| name.to_string_lossy().into_owned())
                    });
                RdmaDevice {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    driver,
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        devices
    });
    let libraries = provider_libraries(transport)
        .iter()
        .map(|&(name, purpose)| LibraryProbe {
            name,
            purpose,
            loaded: load(name),
        })
        .collect();
    ProviderDiscovery {
        transport,
        sysfs_directory: directory.display().to_string(),
        devices,
        unreadable,
        libraries,
    }
}

/// [`discover_in`] over `/sys/class/infiniband`, loading with `dlopen`.
pub fn discover(transport: Transport) -> ProviderDiscovery {
    discover_in(transport, Path::new("/sys/class/infiniband"), |name| {
        // SAFETY: loading runs the library's initializers (rdma-core's and libfabric's only
        // register providers) and the handle is dropped at once; no symbol is called.
        unsafe { libloading::Library::new(name) }
            .map(drop)
            .map_err(|error| error.to_string())
    })
}

impl ProviderDiscovery {
    /// The devices bound to the provider's driver.
    pub fn provider_devices(&self) -> Vec<&RdmaDevice> {
        let driver = provider_driver(self.transport);
        self.devices
            .iter()
            .flatten()
            .filter(|device| device.driver.as_deref() == Some(driver))
            .collect()
    }

    /// The error `connect_all` gives: the devices and libraries found or missing, and that the
    /// transport has no lowering or runtime yet.
    pub fn unavailable_error(&self) -> RuntimeError {
        let name = self.transport.name();
        let driver = provider_driver(self.transport);
        let directory = &self.sysfs_directory;
        let devices = match &self.devices {
            None => format!(
                "no RDMA device is visible here ({directory}: {})",
                self.unreadable.as_deref().unwrap_or("not listed")
            ),
            Some(devices) if devices.is_empty() => format!("{directory} lists no RDMA device"),
            Some(devices) => {
                let listed = devices
                    .iter()
                    .map(|device| {
                        format!(
                            "{} ({})",
                            device.name,
                            device.driver.as_deref().unwrap_or("no driver")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                if self.provider_devices().is_empty() {
                    format!("{directory} lists {listed}, none bound to the {driver} driver")
                } else {
                    format!("{directory} lists {listed}")
                }
            }
        };
        let libraries = self
            .libraries
            .iter()
            .map(|library| match &library.loaded {
                Ok(()) => format!("{} loads", library.name),
                Err(error) => format!(
                    "{} ({}) does not load: {error}",
                    library.name, library.purpose
                ),
            })
            .collect::<Vec<_>>()
            .join("; ");
        let status = match self.transport {
            Transport::Efa => {
                "its work-request encoders are cross-checked against rdma-core and a device model runs them, but no lowering or device runtime exists yet"
            }
            _ => "no encoders, lowering or device runtime exist yet",
        };
        RuntimeError::ProviderUnavailable {
            transport: name,
            reason: format!(
                "{devices}; {libraries}. The {name} transport is experimental: {status}; use \"p2p\" or \"proxy\" between GPUs of one host"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs(devices: &[(&str, Option<&str>)]) -> tempfile_directory::Directory {
        let directory = tempfile_directory::Directory::new();
        for (name, driver) in devices {
            let device = directory.path().join(name).join("device");
            std::fs::create_dir_all(&device).expect("create the device");
            if let Some(driver) = driver {
                let target = directory.path().join("drivers").join(driver);
                std::fs::create_dir_all(&target).expect("create the driver");
                std::os::unix::fs::symlink(&target, device.join("driver")).expect("link");
            }
        }
        std::fs::remove_dir_all(directory.path().join("drivers")).ok();
        directory
    }

    /// A directory under the system's temporary one, removed when dropped (no dependency).
    mod tempfile_directory {
        pub struct Directory(std::path::PathBuf);
        impl Directory {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "aboleth-provider-discovery-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).expect("create the directory");
                Self(path)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Directory {
            fn drop(&mut self) {
                std::fs::remove_dir_all(&self.0).ok();
            }
        }
    }

    #[test]
    fn no_device_and_missing_libraries_are_named() {
        let found = discover_in(
            Transport::Efa,
            Path::new("/nonexistent/infiniband"),
            |name| {
                if name == "libefa.so.1" {
                    Err(format!("{name}: cannot open shared object file"))
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(found.devices, None);
        let message = found.unavailable_error().to_string();
        assert!(
            message.starts_with(
                "the efa transport cannot be used here: no RDMA device is visible here (/nonexistent/infiniband: No such file or directory (os error 2)); libibverbs.so.1 loads; libefa.so.1 (rdma-core's EFA provider"
            ),
            "{message}"
        );
        assert!(
            message.contains("libefa.so.1: cannot open shared object file; libfabric.so.1 loads")
        );
        assert!(message.contains("no lowering or device runtime exists yet"));
    }

    #[test]
    fn devices_of_other_drivers_are_listed_with_their_driver() {
        let sysfs = fake_sysfs(&[("mlx5_0", Some("mlx5_core")), ("rxe0", None)]);
        let found = discover_in(Transport::Ionic, sysfs.path(), |_| Ok(()));
        assert!(found.provider_devices().is_empty());
        let message = found.unavailable_error().to_string();
        assert!(
            message.contains(
                "lists mlx5_0 (mlx5_core), rxe0 (no driver), none bound to the ionic driver"
            ),
            "{message}"
        );
        assert!(message.contains("libionic.so.1 loads"));
        let sysfs = fake_sysfs(&[("rdmap0s6", Some("efa"))]);
        let found = discover_in(Transport::Efa, sysfs.path(), |_| Ok(()));
        assert_eq!(found.provider_devices().len(), 1);
        let message = found.unavailable_error().to_string();
        assert!(
            message.contains("lists rdmap0s6 (efa); libibverbs.so.1 loads"),
            "{message}"
        );
    }
}
