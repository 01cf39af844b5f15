//! neurenix-sys: the only crate that sees C++. It bridges the C++ core and
//! IPU simulator (`cpp/`) with the `cxx` crate ([`bridge`]) and implements
//! the core's device seam on top of it: [`GraphBuilder`] is a
//! [`neurenix_core::backend::Backend`], [`Executable`] and [`Engine`] its
//! compiled and loaded programs; [`DeviceManager`] attaches simulated IPUs.
//!
//! Every fallible C++ function is declared returning `Result`, so a C++
//! exception arrives as an error with its code, never as an abort.

mod bridge;
mod device;
mod error;
mod executable;
mod graph;

pub use device::{Device, DeviceInfo, DeviceManager};
pub use executable::{Engine, Executable};
pub use graph::GraphBuilder;

use neurenix_core::error::Result;
use neurenix_core::report::SystemInfo;

/// Validates an IPU model description ("version=ipu2,num_ipus=16,...") and
/// returns the system's figures.
pub fn describe_system(spec: &str) -> Result<SystemInfo> {
    bridge::ffi::describe_system(spec)
        .map(executable::system_info)
        .map_err(error::from_cxx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use neurenix_core::backend::Backend;
    use neurenix_core::dtype::DeviceType;
    use neurenix_core::error::Error;
    use neurenix_core::expr::ExprOp;

    #[test]
    fn every_expression_operation_has_the_same_name_on_both_sides() {
        for op in ExprOp::ALL {
            assert_eq!(
                bridge::ffi::expr_op_name(bridge::ExprOpCode(op)),
                op.name(),
                "{op:?}"
            );
        }
    }

    #[test]
    fn bad_system_spec_is_an_error_not_an_abort() {
        let e = describe_system("version=ipu9").err().unwrap();
        assert!(matches!(e, Error::InvalidArgument(_)));
        assert!(e.to_string().contains("ipu9"));
        let e = describe_system("tiles=4").err().unwrap();
        assert!(e.to_string().contains("'tiles'"));
    }

    #[test]
    fn cxx_errors_cross_with_their_code_and_plain_message() {
        let mut g = GraphBuilder::new("version=ipu2,num_ipus=1,tiles_per_ipu=4", 1).unwrap();
        let x = g.add_input("x", DeviceType::F32, &[2, 3], 0).unwrap();
        // Shape mismatch: a reshape that changes the element count.
        let e = g.reshape(x, &[7]).unwrap_err();
        assert!(
            matches!(&e, Error::ShapeMismatch { message, .. } if message.starts_with("reshape of [2, 3] to [7]")),
            "{e:?}"
        );
        // Invalid argument: an unknown tensor handle.
        let e = g.reshape(99, &[6]).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("unknown tensor handle 99")),
            "{e:?}"
        );
        // The builder goes on working after errors.
        assert_eq!(g.reshape(x, &[6]).unwrap(), x + 1);
    }

    #[test]
    fn busy_devices_name_their_ipus_and_holders() {
        let dir = std::env::temp_dir().join(format!("neurenix-sys-test-{}", std::process::id()));
        let spec = "version=ipu2,num_ipus=2,tiles_per_ipu=4";
        let mut a = DeviceManager::new(spec, dir.to_str().unwrap()).unwrap();
        let mut b = DeviceManager::new(spec, dir.to_str().unwrap()).unwrap();
        let mut held = a.attach(1, Some(1), 0.0).unwrap();
        assert_eq!(held.ipus(), vec![1]);
        match b.attach(1, Some(1), 0.0) {
            Err(Error::DeviceUnavailable { ipus, .. }) => assert_eq!(ipus, vec![1]),
            other => panic!("expected DeviceUnavailable, got {:?}", other.err()),
        }
        let e = b.attach(1, Some(9), 0.0).err().unwrap();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("device_id 9")),
            "{e:?}"
        );
        let any = b.attach(1, None, 0.0).unwrap();
        assert_eq!(any.ipus(), vec![0]);
        held.detach();
        let _ = std::fs::remove_dir_all(dir);
    }
}
