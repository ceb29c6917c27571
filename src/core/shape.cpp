// Shape arithmetic shared by views and operators.
#include "microllm/core/shape.h"

#include <algorithm>
#include <sstream>

#include "microllm/core/error.h"

namespace microllm {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '(';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) out << ',';
  out << ')';
  return out.str();
}

std::ostream& operator<<(std::ostream& out, ShapeStr s) { return out << shape_str(s.shape); }

int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  const int64_t normalized = dim < 0 ? dim + rank : dim;
  MICROLLM_CHECK(normalized >= 0 && normalized < rank, op, "dimension ", dim,
                 " is out of range for a tensor of rank ", rank);
  return normalized;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right; missing leading dimensions count as 1.
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    MICROLLM_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ",
                   shape_str(b), " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace microllm
