//! Element types: [`ElemType`], what a model declares (ONNX's `elem_type`),
//! and [`DeviceType`], what tile memory holds.

use crate::error::{Error, Result};
use crate::float8::Float8;

/// An element type a model can declare (ONNX's `elem_type`). Codes are
/// ONNX's TensorProto codes; names are numpy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    Bool,
    F16,
    F64,
    U32,
    U64,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
}

impl ElemType {
    pub fn from_onnx(code: i32) -> Option<ElemType> {
        Some(match code {
            1 => ElemType::F32,
            2 => ElemType::U8,
            3 => ElemType::I8,
            4 => ElemType::U16,
            5 => ElemType::I16,
            6 => ElemType::I32,
            7 => ElemType::I64,
            9 => ElemType::Bool,
            10 => ElemType::F16,
            11 => ElemType::F64,
            12 => ElemType::U32,
            13 => ElemType::U64,
            16 => ElemType::BF16,
            17 => ElemType::F8E4M3FN,
            18 => ElemType::F8E4M3FNUZ,
            19 => ElemType::F8E5M2,
            20 => ElemType::F8E5M2FNUZ,
            _ => return None,
        })
    }

    pub fn onnx_code(self) -> i32 {
        match self {
            ElemType::F32 => 1,
            ElemType::U8 => 2,
            ElemType::I8 => 3,
            ElemType::U16 => 4,
            ElemType::I16 => 5,
            ElemType::I32 => 6,
            ElemType::I64 => 7,
            ElemType::Bool => 9,
            ElemType::F16 => 10,
            ElemType::F64 => 11,
            ElemType::U32 => 12,
            ElemType::U64 => 13,
            ElemType::BF16 => 16,
            ElemType::F8E4M3FN => 17,
            ElemType::F8E4M3FNUZ => 18,
            ElemType::F8E5M2 => 19,
            ElemType::F8E5M2FNUZ => 20,
        }
    }

    /// numpy's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "float32",
            ElemType::U8 => "uint8",
            ElemType::I8 => "int8",
            ElemType::U16 => "uint16",
            ElemType::I16 => "int16",
            ElemType::I32 => "int32",
            ElemType::I64 => "int64",
            ElemType::Bool => "bool",
            ElemType::F16 => "float16",
            ElemType::F64 => "float64",
            ElemType::U32 => "uint32",
            ElemType::U64 => "uint64",
            ElemType::BF16 => "bfloat16",
            ElemType::F8E4M3FN => "float8_e4m3fn",
            ElemType::F8E4M3FNUZ => "float8_e4m3fnuz",
            ElemType::F8E5M2 => "float8_e5m2",
            ElemType::F8E5M2FNUZ => "float8_e5m2fnuz",
        }
    }

    pub fn from_name(name: &str) -> Result<ElemType> {
        Ok(match name {
            "float32" => ElemType::F32,
            "uint8" => ElemType::U8,
            "int8" => ElemType::I8,
            "uint16" => ElemType::U16,
            "int16" => ElemType::I16,
            "int32" => ElemType::I32,
            "int64" => ElemType::I64,
            "bool" => ElemType::Bool,
            "float16" => ElemType::F16,
            "float64" => ElemType::F64,
            "uint32" => ElemType::U32,
            "uint64" => ElemType::U64,
            "bfloat16" => ElemType::BF16,
            "float8_e4m3fn" => ElemType::F8E4M3FN,
            "float8_e4m3fnuz" => ElemType::F8E4M3FNUZ,
            "float8_e5m2" => ElemType::F8E5M2,
            "float8_e5m2fnuz" => ElemType::F8E5M2FNUZ,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported element type '{name}'"
                )))
            }
        })
    }

    pub fn size(self) -> usize {
        match self {
            ElemType::U8 | ElemType::I8 | ElemType::Bool => 1,
            ElemType::F8E4M3FN | ElemType::F8E4M3FNUZ | ElemType::F8E5M2 | ElemType::F8E5M2FNUZ => {
                1
            }
            ElemType::U16 | ElemType::I16 | ElemType::F16 | ElemType::BF16 => 2,
            ElemType::F32 | ElemType::I32 | ElemType::U32 => 4,
            ElemType::F64 | ElemType::I64 | ElemType::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F32 | ElemType::F16 | ElemType::F64 | ElemType::BF16
        ) || self.float8().is_some()
    }

    /// The float8 format of a float8 type.
    pub fn float8(self) -> Option<Float8> {
        match self {
            ElemType::F8E4M3FN => Some(Float8::E4M3FN),
            ElemType::F8E4M3FNUZ => Some(Float8::E4M3FNUZ),
            ElemType::F8E5M2 => Some(Float8::E5M2),
            ElemType::F8E5M2FNUZ => Some(Float8::E5M2FNUZ),
            _ => None,
        }
    }

    /// A storage type: a float type the IPU has no arithmetic for
    /// (bfloat16, the float8 types). Its values are converted to the
    /// precision's float type on the way in (exactly: float32 holds them
    /// all, and float16 the float8 ones) and rounded back on the way out.
    pub fn is_storage_only(self) -> bool {
        self == ElemType::BF16 || self.float8().is_some()
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            ElemType::U8
                | ElemType::I8
                | ElemType::U16
                | ElemType::I16
                | ElemType::I32
                | ElemType::I64
                | ElemType::U32
                | ElemType::U64
        )
    }

    /// Where a value of this type lives on the IPU when precision allows full
    /// float32 (the precision policy may narrow floats to half).
    pub fn device_default(self) -> DeviceType {
        if self.is_float() {
            DeviceType::F32
        } else if self == ElemType::Bool {
            DeviceType::Bool
        } else {
            DeviceType::I32
        }
    }
}

/// ONNX's name of element type `code` (`TensorProto.DataType`), for every
/// type the installed ONNX releases define up to FLOAT6E3M2, whether or not
/// neurenix holds it; None for codes ONNX does not define.
pub fn onnx_type_name(code: i32) -> Option<&'static str> {
    Some(match code {
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17 => "FLOAT8E4M3FN",
        18 => "FLOAT8E4M3FNUZ",
        19 => "FLOAT8E5M2",
        20 => "FLOAT8E5M2FNUZ",
        21 => "UINT4",
        22 => "INT4",
        23 => "FLOAT4E2M1",
        24 => "FLOAT8E8M0",
        25 => "UINT2",
        26 => "INT2",
        27 => "FLOAT6E2M3",
        28 => "FLOAT6E3M2",
        _ => return None,
    })
}

/// Names of the element types a model may declare, for messages.
pub fn held_type_names() -> String {
    let mut names: Vec<&str> = (1..=28)
        .filter_map(ElemType::from_onnx)
        .map(ElemType::name)
        .collect();
    names.sort_unstable();
    names.join(", ")
}

/// Why element type `code` cannot be used, or None when neurenix holds it.
/// `what` names where the type appears ("input 'x'", "node 'c' (Cast)
/// casts to", ...). A type ONNX defines but neurenix does not hold is
/// unsupported; a code ONNX does not define makes the model malformed.
pub fn refusal(code: i32, what: &str) -> Option<Refusal> {
    if ElemType::from_onnx(code).is_some() {
        return None;
    }
    Some(match onnx_type_name(code) {
        Some(name) => Refusal::Unsupported(format!(
            "{what} element type {name} (ONNX code {code}), which neurenix does not support: \
             the IPU computes in float32, float16, int32 and bool, and the host converts only \
             {} to and from them; convert the model to one of those types",
            held_type_names()
        )),
        None if code == 0 => Refusal::Malformed(format!("{what} no element type (code 0)")),
        None => Refusal::Malformed(format!(
            "{what} element type code {code}, which ONNX does not define"
        )),
    })
}

/// What [`refusal`] says about a type: unsupported, or malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unsupported(String),
    Malformed(String),
}

impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Types tile memory holds. The IPU has no 64-bit arithmetic: 64-bit integers
/// become int32 (with a range check on the way in) and float64 becomes
/// float32. The float8 types are the IPU21's matrix-product operands
/// (Poplar's QUARTER formats F143 and F152): codes whose scale travels
/// beside them (`precision="float8"`, docs/precision.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    F32,
    F16,
    I32,
    Bool,
    F8E4M3FNUZ,
    F8E5M2FNUZ,
}

impl DeviceType {
    pub fn size(self) -> usize {
        match self {
            DeviceType::F32 | DeviceType::I32 => 4,
            DeviceType::F16 => 2,
            DeviceType::Bool | DeviceType::F8E4M3FNUZ | DeviceType::F8E5M2FNUZ => 1,
        }
    }
    /// float32 or float16: the types the IPU computes in.
    pub fn is_float(self) -> bool {
        matches!(self, DeviceType::F32 | DeviceType::F16)
    }
    /// The float8 format of a float8 type.
    pub fn float8(self) -> Option<Float8> {
        match self {
            DeviceType::F8E4M3FNUZ => Some(Float8::E4M3FNUZ),
            DeviceType::F8E5M2FNUZ => Some(Float8::E5M2FNUZ),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::F32 => "float32",
            DeviceType::F16 => "float16",
            DeviceType::I32 => "int32",
            DeviceType::Bool => "bool",
            DeviceType::F8E4M3FNUZ => "float8_e4m3fnuz",
            DeviceType::F8E5M2FNUZ => "float8_e5m2fnuz",
        }
    }
    /// The model type a device value of this type stands for.
    pub fn as_elem_type(self) -> ElemType {
        match self {
            DeviceType::F32 => ElemType::F32,
            DeviceType::F16 => ElemType::F16,
            DeviceType::I32 => ElemType::I32,
            DeviceType::Bool => ElemType::Bool,
            DeviceType::F8E4M3FNUZ => ElemType::F8E4M3FNUZ,
            DeviceType::F8E5M2FNUZ => ElemType::F8E5M2FNUZ,
        }
    }
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ElemType; 17] = [
        ElemType::F32,
        ElemType::U8,
        ElemType::I8,
        ElemType::U16,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::Bool,
        ElemType::F16,
        ElemType::F64,
        ElemType::U32,
        ElemType::U64,
        ElemType::BF16,
        ElemType::F8E4M3FN,
        ElemType::F8E4M3FNUZ,
        ElemType::F8E5M2,
        ElemType::F8E5M2FNUZ,
    ];

    #[test]
    fn onnx_codes_and_names_round_trip() {
        for dt in ALL {
            assert_eq!(ElemType::from_onnx(dt.onnx_code()), Some(dt));
            assert_eq!(ElemType::from_name(dt.name()).unwrap(), dt);
            assert_eq!(dt.to_string(), dt.name());
        }
        // ONNX: 1 float, 7 int64, 9 bool, 10 float16, 16 bfloat16, 17-20
        // float8; 8 is string, 14/15 complex, 21-28 the 2-, 4- and 6-bit
        // types and float8e8m0, which have no element type here.
        assert_eq!(ElemType::from_onnx(1), Some(ElemType::F32));
        assert_eq!(ElemType::from_onnx(7), Some(ElemType::I64));
        assert_eq!(ElemType::from_onnx(16), Some(ElemType::BF16));
        assert_eq!(ElemType::from_onnx(19), Some(ElemType::F8E5M2));
        for code in [0, 8, 14, 15, 21, 22, 23, 24, 25, 26, 27, 28, 29, -1] {
            assert_eq!(ElemType::from_onnx(code), None, "code {code}");
        }
        assert!(matches!(
            ElemType::from_name("complex64"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn types_neurenix_does_not_hold_are_unsupported_and_undefined_codes_malformed() {
        assert_eq!(refusal(1, "input 'x' has"), None);
        assert_eq!(refusal(17, "input 'x' has"), None);
        for (code, name) in [
            (8, "STRING"),
            (22, "INT4"),
            (23, "FLOAT4E2M1"),
            (24, "FLOAT8E8M0"),
        ] {
            match refusal(code, "input 'x' has") {
                Some(Refusal::Unsupported(m)) => {
                    assert!(m.starts_with("input 'x' has element type"), "{m}");
                    assert!(m.contains(name) && m.contains("bfloat16"), "{m}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        assert!(matches!(refusal(99, "w"), Some(Refusal::Malformed(m)) if m.contains("99")));
        assert!(matches!(refusal(0, "w"), Some(Refusal::Malformed(_))));
        for code in 1..=28 {
            assert!(onnx_type_name(code).is_some(), "{code}");
        }
    }

    #[test]
    fn storage_types_are_the_floats_without_a_device_type() {
        for dt in ALL {
            assert_eq!(
                dt.is_storage_only(),
                dt.is_float() && !matches!(dt, ElemType::F32 | ElemType::F16 | ElemType::F64),
                "{dt}"
            );
        }
    }

    #[test]
    fn sizes_kinds_and_device_types() {
        for dt in ALL {
            assert_eq!(
                dt.size(),
                match dt {
                    ElemType::U8 | ElemType::I8 | ElemType::Bool => 1,
                    _ if dt.float8().is_some() => 1,
                    ElemType::U16 | ElemType::I16 | ElemType::F16 | ElemType::BF16 => 2,
                    ElemType::F32 | ElemType::I32 | ElemType::U32 => 4,
                    _ => 8,
                }
            );
            assert!(!(dt.is_float() && dt.is_int()));
            assert_eq!(dt.is_float() || dt.is_int(), dt != ElemType::Bool);
            let dev = dt.device_default();
            assert_eq!(dev.is_float(), dt.is_float());
            if dt == ElemType::Bool {
                assert_eq!(dev, DeviceType::Bool);
            } else if dt.is_int() {
                assert_eq!(
                    dev,
                    DeviceType::I32,
                    "{dt}: the IPU computes integers in int32"
                );
            } else {
                assert_eq!(dev, DeviceType::F32);
            }
        }
        for (dev, size) in [
            (DeviceType::F32, 4),
            (DeviceType::F16, 2),
            (DeviceType::I32, 4),
            (DeviceType::Bool, 1),
        ] {
            assert_eq!(dev.size(), size);
            assert_eq!(dev.as_elem_type().name(), dev.name());
            assert_eq!(dev.as_elem_type().size(), dev.size());
        }
    }
}
