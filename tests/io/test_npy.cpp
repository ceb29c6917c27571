// .npy reader/writer: round trips of every dtype and shape kind, files written by hand in
// the other layouts NumPy produces (format 2.0, Fortran order), and corrupt files rejected
// with a message naming the file and the fault.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "microllm/io/npy.h"

using namespace microllm;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed afterwards.
class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("microllm_npy_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes magic, version, header length (2 or 4 bytes), `header` and `data` verbatim.
  std::string write_raw(const std::string& name, int major, const std::string& header,
                        const std::string& data, int64_t header_len = -1) {
    std::ofstream out(path(name), std::ios::binary);
    out.write("\x93NUMPY", 6);
    out.put(static_cast<char>(major)).put(0);
    const uint32_t len =
        header_len < 0 ? static_cast<uint32_t>(header.size()) : static_cast<uint32_t>(header_len);
    for (int i = 0; i < (major == 1 ? 2 : 4); ++i)
      out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out << header << data;
    return path(name);
  }

  // load_npy must throw an Error whose message names the file and contains `fault`.
  void expect_rejected(const std::string& file, const std::string& fault) {
    try {
      io::load_npy(file);
      ADD_FAILURE() << "loading " << file << " did not throw (expected: " << fault << ")";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(file), std::string::npos) << message;
      EXPECT_NE(message.find(fault), std::string::npos)
          << "expected '" << fault << "' in: " << message;
    }
  }

  fs::path dir_;
};

std::string f32_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

constexpr const char* kDict23 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

}  // namespace

TEST_F(Npy, RoundTripEveryDtype) {
  const std::vector<double> values = {0, 1, -2, 3, 4, -5,
                                      6, 7, 1,  0, 1, 2};  // exact in every dtype
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::I64, DType::I32, DType::I8}) {
    const Tensor t = Tensor::from_vector(values, {3, 4}, dtype);
    io::save_npy(path("x.npy"), t);
    const Tensor back = io::load_npy(path("x.npy"));
    EXPECT_EQ(back.dtype(), dtype) << dtype;
    EXPECT_EQ(back.shape(), (Shape{3, 4})) << dtype;
    EXPECT_EQ(back.to_vector_f64(), values) << dtype;
  }
  const std::vector<double> unsigned_values = {0, 1, 255, 7};
  io::save_npy(path("u8.npy"), Tensor::from_vector(unsigned_values, {4}, DType::U8));
  EXPECT_EQ(io::load_npy(path("u8.npy")).to_vector_f64(), unsigned_values);
  const std::vector<double> bools = {1, 0, 0, 1, 1};
  io::save_npy(path("b.npy"), Tensor::from_vector(bools, {5}, DType::Bool));
  const Tensor b = io::load_npy(path("b.npy"));
  EXPECT_EQ(b.dtype(), DType::Bool);
  EXPECT_EQ(b.to_vector_f64(), bools);
}

TEST_F(Npy, RoundTripShapes) {
  for (const Shape& shape : {Shape{}, Shape{5}, Shape{0, 3}, Shape{2, 1, 3, 2}}) {
    std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * static_cast<double>(i) - 1.0;
    io::save_npy(path("x.npy"), Tensor::from_vector(values, shape, DType::F64));
    const Tensor back = io::load_npy(path("x.npy"));
    EXPECT_EQ(back.shape(), shape) << shape_str(shape);
    EXPECT_EQ(back.to_vector_f64(), values) << shape_str(shape);
  }
}

TEST_F(Npy, NarrowFloatsTravelAsF32) {
  const std::vector<double> values = {1.5, -2.5, 3.0, 0.0078125};  // exact in BF16, E4M3 and E5M2
  for (DType dtype : {DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    io::save_npy(path("x.npy"), Tensor::from_vector(values, {2, 2}, dtype));
    const Tensor back = io::load_npy(path("x.npy"));
    EXPECT_EQ(back.dtype(), DType::F32) << dtype;
    EXPECT_EQ(back.to_vector_f64(), values) << dtype;
  }
}

TEST_F(Npy, ViewsAreWrittenDense) {
  const Tensor t =
      Tensor::from_vector(std::vector<double>{0, 1, 2, 3, 4, 5}, {2, 3}).transpose(0, 1);
  io::save_npy(path("x.npy"), t.narrow(0, 1, 2));  // (2, 2) view with an offset
  const Tensor back = io::load_npy(path("x.npy"));
  EXPECT_EQ(back.shape(), (Shape{2, 2}));
  EXPECT_EQ(back.to_vector_f64(), (std::vector<double>{1, 4, 2, 5}));
}

TEST_F(Npy, WritesFormat10WithAlignedHeader) {
  io::save_npy(path("x.npy"), Tensor::zeros({2, 3}));
  std::ifstream in(path("x.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len =
      static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 6 * sizeof(float));
}

TEST_F(Npy, ReadsFormat20AndFortranOrder) {
  const std::vector<float> v = {0, 1, 2, 3, 4, 5};
  const Tensor t2 = io::load_npy(write_raw("v2.npy", 2, std::string(kDict23) + "\n", f32_bytes(v)));
  EXPECT_EQ(t2.shape(), (Shape{2, 3}));
  EXPECT_EQ(t2.to_vector_f32(), v);
  // Column-major (2, 3): memory 0..5 holds a[0][0], a[1][0], a[0][1], ...
  const Tensor f = io::load_npy(write_raw(
      "f.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", f32_bytes(v)));
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_TRUE(f.is_contiguous());
  EXPECT_EQ(f.to_vector_f32(), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  // Double quotes, no trailing comma, extra spaces: still a valid Python dict.
  const Tensor q = io::load_npy(
      write_raw("q.npy", 1, "{ \"shape\" : (6,) , \"fortran_order\": False, \"descr\": \"<f4\" }\n",
                f32_bytes(v)));
  EXPECT_EQ(q.shape(), (Shape{6}));
}

TEST_F(Npy, BoolBytesAreNormalized) {
  const Tensor b = io::load_npy(
      write_raw("b.npy", 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }\n",
                std::string("\x00\x02\x01", 3)));
  EXPECT_EQ(b.to_vector_f64(), (std::vector<double>{0, 1, 1}));
}

TEST_F(Npy, RejectsBadFiles) {
  const std::string data = f32_bytes({0, 1, 2, 3, 4, 5});
  const std::string header = std::string(kDict23) + "\n";
  expect_rejected(path("missing.npy"), "cannot open");
  fs::create_directory(path("dir.npy"));
  expect_rejected(path("dir.npy"), "is a directory");
  {
    std::ofstream(path("short.npy")) << "\x93NUM";
    expect_rejected(path("short.npy"), "too short");
  }
  {
    std::ofstream(path("text.npy")) << "hello, this is not numpy";
    expect_rejected(path("text.npy"), "magic");
  }
  expect_rejected(write_raw("v9.npy", 9, header, data), "version 9.0");
  expect_rejected(write_raw("hlen.npy", 1, header, data, 5000), "runs past the end");
  expect_rejected(write_raw("trunc.npy", 1, header, data.substr(0, 20)),
                  "truncated: data is 20 bytes");
  expect_rejected(write_raw("trail.npy", 1, header, data + "xy"), "trailing bytes");
  expect_rejected(
      write_raw("be.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data),
      "big-endian");
  expect_rejected(
      write_raw("c8.npy", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data),
      "unsupported dtype '<c8'");
  expect_rejected(write_raw("nokey.npy", 1, "{'descr': '<f4', 'shape': (2, 3), }", data),
                  "missing key 'fortran_order'");
  expect_rejected(
      write_raw("extra.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}",
                data),
      "unexpected key 'x'");
  expect_rejected(
      write_raw("dup.npy", 1,
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", data),
      "key 'descr' repeats");
  expect_rejected(
      write_raw("neg.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", data),
      "non-negative integer");
  expect_rejected(
      write_raw("bool.npy", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", data),
      "True or False");
  expect_rejected(
      write_raw("open.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,", data),
      "bad header");
  expect_rejected(write_raw("junk.npy", 1,
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} junk", data),
                  "after the closing");
  expect_rejected(
      write_raw("huge.npy", 1,
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                data),
      "too many elements");
}

TEST_F(Npy, SaveReportsUnwritablePath) {
  const std::string bad = path("no_such_dir/x.npy");
  try {
    io::save_npy(bad, Tensor::zeros({2}));
    ADD_FAILURE() << "save_npy into a missing directory did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open file for writing"), std::string::npos)
        << e.what();
  }
}
