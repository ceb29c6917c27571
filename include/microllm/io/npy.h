// NumPy .npy files: read (format 1.0, 2.0 and 3.0) and write (1.0) single tensors.
//
// Reference: numpy.lib.format,
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
// Layout of a file: the magic "\x93NUMPY", a major and a minor version byte, the header
// length (2 bytes little-endian in 1.0, 4 bytes in 2.0/3.0), an ASCII Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and
// ended by '\n', then the raw elements.
//
// Element types: '<f8' F64, '<f4' F32, '<f2' F16, '<i8' I64, '<i4' I32, '|i1' I8,
// '|u1' U8, '|b1' Bool (little-endian only). BF16 and FP8 are not NumPy types: save_npy
// writes them as '<f4' and callers cast back after loading.
#pragma once

#include <string>

#include "microllm/core/tensor.h"

namespace microllm::io {

// Reads a CPU tensor. Fortran-ordered arrays are loaded and made C-ordered. Throws
// microllm::Error naming the file and what is wrong (magic, version, header, dtype, size).
Tensor load_npy(const std::string& path);

// Writes `t` (any device, strides or dtype) as a dense C-ordered array, format 1.0.
// BF16, F8E4M3 and F8E5M2 are written as '<f4'.
void save_npy(const std::string& path, const Tensor& t);

}  // namespace microllm::io
