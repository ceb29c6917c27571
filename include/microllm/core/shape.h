// Shapes and strides (in elements) and the arithmetic on them shared by views and operators.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace microllm {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
// Row-major strides of a dense tensor of this shape.
Strides contiguous_strides(const Shape& shape);
// "(2, 3, 4)"
std::string shape_str(const Shape& shape);
// Maps a possibly negative dimension into [0, rank); `op` names the caller in the error.
int64_t normalize_dim(int64_t dim, int64_t rank, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

struct ShapeStr {
  const Shape& shape;
};
std::ostream& operator<<(std::ostream& out, ShapeStr s);

}  // namespace microllm
