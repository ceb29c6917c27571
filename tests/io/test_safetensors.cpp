// safetensors: round trips of every dtype, zero-copy views, the writer's layout, atomic
// writes, sharded checkpoints, every corrupt-header rule with its message, and loading into
// parameters (strict and non-strict reports).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expect_error.h"
#include "microllm/io/safetensors.h"

using namespace microllm;
using microllm::testing::throws_error;
namespace fs = std::filesystem;

namespace {

// Distinct, exactly representable values of `dtype` for a tensor of `shape`.
Tensor sample(DType dtype, const Shape& shape, int seed = 0) {
  const int64_t n = shape_numel(shape);
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i + seed;
    switch (dtype) {
      case DType::Bool:
        values[i] = k % 3 == 0;
        break;
      case DType::U8:
        values[i] = static_cast<double>((k * 37) % 256);
        break;
      case DType::I8:
        values[i] = static_cast<double>((k * 11) % 200 - 100);
        break;
      case DType::I32:
        values[i] = static_cast<double>(k * 100003 - 700000);
        break;
      case DType::I64:
        values[i] = static_cast<double>(k * 1000000007LL - 5000000000LL);
        break;
      default:
        values[i] = static_cast<double>(k % 9 - 4) * 0.5 + (k % 2 ? 0.25 : 0.0);
        break;
    }
  }
  return Tensor::from_vector(values, shape, dtype);
}

// The dense bytes of a tensor, for exact comparisons.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor dense = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const unsigned char*>(dense.raw_data());
  return std::vector<unsigned char>(p, p + dense.nbytes());
}

// The bytes of a safetensors file: header length (8 bytes LE), header text, data.
std::string file_bytes(const std::string& header, const std::string& data,
                       std::optional<uint64_t> header_len = std::nullopt) {
  const uint64_t n = header_len.value_or(header.size());
  std::string out;
  for (int b = 0; b < 8; ++b) out += static_cast<char>((n >> (8 * b)) & 0xff);
  return out + header + data;
}

// parse_safetensors on `bytes` must fail naming the source and every fragment.
::testing::AssertionResult rejects(const std::string& bytes,
                                   std::initializer_list<std::string_view> fragments) {
  auto result =
      throws_error([&] { io::parse_safetensors(bytes.data(), bytes.size(), "mem.safetensors"); },
                   "safetensors", fragments);
  if (!result) return result;
  return throws_error([&] { io::parse_safetensors(bytes.data(), bytes.size(), "mem.safetensors"); },
                      "safetensors", {"mem.safetensors: "});
}

// A header entry {"dtype": D, "shape": S, "data_offsets": [b, e]} as JSON text.
std::string entry(const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("microllm_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_file(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out << bytes;
    return path(name);
  }
  std::string read_file(const std::string& file) const {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Files in the test directory, by name.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// ---- round trips -------------------------------------------------------------------------

TEST_F(Safetensors, RoundTripsEveryDTypeBitExactly) {
  io::NamedTensors tensors;
  for (DType dtype : kAllDTypes)
    tensors.emplace_back("t." + std::string(dtype_name(dtype)), sample(dtype, {3, 5}));
  tensors.emplace_back("scalar", sample(DType::F32, {}, 3));
  tensors.emplace_back("empty", Tensor::empty({0, 4}, DType::BF16));
  io::save_safetensors(path("all.safetensors"), tensors, {{"note", "every dtype"}});

  const io::SafetensorsFile file = io::SafetensorsFile::open(path("all.safetensors"));
  EXPECT_EQ(file.names().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    const Tensor got = file.tensor(name);
    EXPECT_EQ(got.dtype(), expected.dtype()) << name;
    EXPECT_EQ(got.shape(), expected.shape()) << name;
    EXPECT_EQ(bytes_of(got), bytes_of(expected)) << name;
    EXPECT_EQ(file.info(name).nbytes(), expected.nbytes()) << name;
  }
  EXPECT_EQ(file.metadata().at("note"), "every dtype");
  EXPECT_EQ(file.metadata().at("format"), "pt");  // added: transformers requires it
}

TEST_F(Safetensors, DTypeNamesMapBothWays) {
  for (DType dtype : kAllDTypes)
    EXPECT_EQ(io::dtype_from_safetensors_name(io::safetensors_dtype_name(dtype)), dtype);
  EXPECT_EQ(io::safetensors_dtype_name(DType::BF16), "BF16");
  EXPECT_EQ(io::safetensors_dtype_name(DType::F8E4M3), "F8_E4M3");
  EXPECT_EQ(io::safetensors_dtype_name(DType::Bool), "BOOL");
  EXPECT_TRUE(throws_error([] { io::dtype_from_safetensors_name("U16"); }, "safetensors",
                           {"'U16' is not supported by microllm"}));
  EXPECT_TRUE(throws_error([] { io::dtype_from_safetensors_name("float32"); }, "safetensors",
                           {"unknown dtype 'float32'", "BF16"}));
}

TEST_F(Safetensors, WritesViewsAsDenseBytes) {
  const Tensor base = sample(DType::F32, {4, 6});
  const Tensor transposed = base.transpose(0, 1);  // (6, 4), not contiguous
  const Tensor narrowed = base.narrow(1, 1, 3);    // (4, 3), not contiguous
  io::save_safetensors(path("views.safetensors"), {{"t", transposed}, {"n", narrowed}});
  const io::SafetensorsFile file = io::SafetensorsFile::open(path("views.safetensors"));
  EXPECT_EQ(file.tensor("t").to_vector_f64(), transposed.to_vector_f64());
  EXPECT_EQ(file.tensor("n").to_vector_f64(), narrowed.to_vector_f64());
  EXPECT_EQ(file.tensor("t").shape(), (Shape{6, 4}));
}

// ---- zero copy ---------------------------------------------------------------------------

TEST_F(Safetensors, TensorsAreAlignedViewsIntoTheMapping) {
  // Mixed element sizes in an order that would misalign if written as given.
  io::NamedTensors tensors = {{"a.u8", sample(DType::U8, {3})},
                              {"b.f32", sample(DType::F32, {5})},
                              {"c.bf16", sample(DType::BF16, {3})},
                              {"d.f64", sample(DType::F64, {2, 3})},
                              {"e.i8", sample(DType::I8, {1})}};
  io::save_safetensors(path("m.safetensors"), tensors);
  Tensor kept;
  {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path("m.safetensors"));
    const auto* begin = static_cast<const char*>(file.mapped_data());
    const char* end = begin + file.mapped_size();
    for (const auto& [name, expected] : tensors) {
      const Tensor t = file.tensor(name);
      const auto* p = static_cast<const char*>(t.raw_data());
      EXPECT_TRUE(p >= begin && p + t.nbytes() <= end) << name << " is not a view of the mapping";
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % dtype_size(t.dtype()), 0u) << name;
    }
    kept = file.tensor("d.f64");
  }
  // The view keeps the mapping alive after the file object is gone.
  EXPECT_EQ(kept.to_vector_f64(), tensors[3].second.to_vector_f64());
  // Writing into a view changes private pages only, never the file.
  kept.fill(42.0);
  const io::SafetensorsFile again = io::SafetensorsFile::open(path("m.safetensors"));
  EXPECT_EQ(again.tensor("d.f64").to_vector_f64(), tensors[3].second.to_vector_f64());
}

TEST_F(Safetensors, MisalignedDataIsCopiedNotViewed) {
  // Another writer's layout: a 2-byte I8 tensor, then F32 data at data offset 2.
  const std::string header =
      "{\"a\":" + entry("I8", "[2]", 0, 2) + ",\"b\":" + entry("F32", "[2]", 2, 10) + "}";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  const float values[2] = {1.5f, -2.25f};
  std::string data = "\x01\x02";
  data.append(reinterpret_cast<const char*>(values), sizeof(values));
  const io::SafetensorsFile file =
      io::SafetensorsFile::open(write_file("x.safetensors", file_bytes(padded, data)));
  const Tensor b = file.tensor("b");
  EXPECT_EQ(b.to_vector_f64(), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw_data()) % 4, 0u);
  EXPECT_EQ(file.tensor("a").to_vector_f64(), (std::vector<double>{1, 2}));
}

TEST_F(Safetensors, BoolBytesOtherThanZeroOrOneReadAsTrue) {
  const std::string header = "{\"m\":" + entry("BOOL", "[4]", 0, 4) + "}";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  const io::SafetensorsFile file = io::SafetensorsFile::open(
      write_file("b.safetensors", file_bytes(padded, std::string("\x00\x01\x02\xff", 4))));
  const Tensor m = file.tensor("m");
  const auto* bytes = static_cast<const unsigned char*>(m.raw_data());
  EXPECT_EQ(std::vector<unsigned char>(bytes, bytes + 4), (std::vector<unsigned char>{0, 1, 1, 1}));
}

// ---- the writer's layout -----------------------------------------------------------------

TEST_F(Safetensors, HeaderIsPaddedWithSpacesAndKeepsTheGivenOrder) {
  io::save_safetensors(path("h.safetensors"),
                       {{"zeta", sample(DType::BF16, {3})}, {"alpha", sample(DType::F32, {2})}},
                       {{"k", "v"}});
  const std::string bytes = read_file(path("h.safetensors"));
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(bytes[b]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos)
      << "padding must be spaces";
  EXPECT_LT(header.find("__metadata__"), header.find("zeta"));
  EXPECT_LT(header.find("zeta"), header.find("alpha"));
  // Data by descending element size: the F32 tensor first.
  const auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["alpha"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(json["zeta"]["data_offsets"], nlohmann::json({8, 14}));
  EXPECT_EQ(json["zeta"]["dtype"], "BF16");
  EXPECT_EQ(bytes.size(), 8 + n + 14);
}

TEST_F(Safetensors, EmptyCheckpointRoundTrips) {
  io::save_safetensors(path("e.safetensors"), {});
  const io::SafetensorsFile file = io::SafetensorsFile::open(path("e.safetensors"));
  EXPECT_TRUE(file.names().empty());
  EXPECT_EQ(file.header().data_size, 0u);
}

TEST_F(Safetensors, WriterRejectsBadNamesBeforeTouchingTheDisk) {
  const Tensor t = sample(DType::F32, {2});
  EXPECT_TRUE(throws_error(
      [&] {
        io::save_safetensors(path("w.safetensors"), {{"a", t}, {"a", t}});
      },
      "safetensors", {"w.safetensors", "'a' is given twice"}));
  EXPECT_TRUE(throws_error(
      [&] {
        io::save_safetensors(path("w.safetensors"), {{"", t}});
      },
      "safetensors", {"empty name"}));
  EXPECT_TRUE(throws_error(
      [&] {
        io::save_safetensors(path("w.safetensors"), {{"__metadata__", t}});
      },
      "safetensors", {"reserved"}));
  EXPECT_TRUE(throws_error(
      [&] {
        io::save_safetensors(path("w.safetensors"), {{"u", Tensor()}});
      },
      "safetensors", {"'u' is undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        io::save_safetensors(path("w.safetensors"), {{std::string("bad\xff", 4), t}});
      },
      "safetensors", {"not valid UTF-8"}));
  EXPECT_TRUE(throws_error(
      [&] {
        io::save_safetensors(path("no/such/dir/w.safetensors"), {{"a", t}});
      },
      "safetensors", {"cannot create the temporary file"}));
  EXPECT_TRUE(listing().empty());
}

// ---- atomic writes -----------------------------------------------------------------------

TEST_F(Safetensors, FailedWriteLeavesTheOldFileIntact) {
  const std::string file = path("model.safetensors");
  io::save_safetensors(file, {{"w", sample(DType::F32, {8})}});
  const std::string before = read_file(file);

  // Make the next write fail for real: a 64 KiB file size limit (EFBIG, not SIGXFSZ).
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Tensor big = Tensor::zeros({256, 1024});  // 1 MiB
  auto result = throws_error(
      [&] {
        io::save_safetensors(file, {{"w", big}});
      },
      "safetensors", {"model.safetensors", "write to", "failed", "untouched"});
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(result);

  EXPECT_EQ(read_file(file), before);
  EXPECT_EQ(listing(), (std::vector<std::string>{"model.safetensors"})) << "temporary file left";
  EXPECT_EQ(io::SafetensorsFile::open(file).tensor("w").to_vector_f64(),
            sample(DType::F32, {8}).to_vector_f64());
}

TEST_F(Safetensors, SaveReplacesAnExistingFile) {
  const std::string file = path("model.safetensors");
  io::save_safetensors(file, {{"w", sample(DType::F32, {8})}});
  const io::SafetensorsFile old_file = io::SafetensorsFile::open(file);
  const Tensor old_view = old_file.tensor("w");
  io::save_safetensors(file, {{"w", sample(DType::F32, {8}, 5)}});
  EXPECT_EQ(io::SafetensorsFile::open(file).tensor("w").to_vector_f64(),
            sample(DType::F32, {8}, 5).to_vector_f64());
  // A view of the replaced file still reads the old bytes (rename, not overwrite in place).
  EXPECT_EQ(old_view.to_vector_f64(), sample(DType::F32, {8}).to_vector_f64());
}

// ---- sharded checkpoints -----------------------------------------------------------------

TEST_F(Safetensors, ShardedWriteAndRead) {
  io::NamedTensors tensors = {{"embed", sample(DType::F32, {4, 4})},     // 64 bytes
                              {"layer.0", sample(DType::BF16, {8})},     // 16
                              {"layer.1", sample(DType::BF16, {8}, 1)},  // 16
                              {"big", sample(DType::F32, {40})},         // 160 > limit
                              {"norm", sample(DType::F32, {4})}};        // 16
  const std::vector<std::string> shards =
      io::save_safetensors_sharded(dir_.string(), tensors, 100, {{"k", "v"}});
  EXPECT_EQ(shards, (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                              "model-00002-of-00003.safetensors",
                                              "model-00003-of-00003.safetensors"}));
  const auto index = nlohmann::json::parse(read_file(path("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 272);
  EXPECT_EQ(index["weight_map"]["embed"], shards[0]);
  EXPECT_EQ(index["weight_map"]["layer.1"], shards[0]);
  EXPECT_EQ(index["weight_map"]["big"], shards[1]);
  EXPECT_EQ(index["weight_map"]["norm"], shards[2]);

  const io::SafetensorsCheckpoint checkpoint = io::open_checkpoint(dir_.string());
  EXPECT_EQ(checkpoint.files().size(), 3u);
  EXPECT_EQ(checkpoint.names().size(), tensors.size());
  for (const auto& [name, expected] : tensors)
    EXPECT_EQ(bytes_of(checkpoint.tensor(name)), bytes_of(expected)) << name;
  EXPECT_EQ(checkpoint.metadata().at("k"), "v");
  EXPECT_EQ(checkpoint.index_metadata().at("total_size"), "272");
  EXPECT_TRUE(throws_error([&] { checkpoint.tensor("nope"); }, "safetensors",
                           {"model.safetensors.index.json", "no tensor named 'nope'"}));
}

TEST_F(Safetensors, ShardedSaveRemovesAStaleSingleFile) {
  io::save_safetensors(path("model.safetensors"), {{"old", sample(DType::F32, {2})}});
  io::save_safetensors_sharded(dir_.string(), {{"new", sample(DType::F32, {2})}}, 1 << 20);
  const io::SafetensorsCheckpoint checkpoint = io::open_checkpoint(dir_.string());
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"new"}));
  EXPECT_FALSE(fs::exists(path("model.safetensors")));
}

TEST_F(Safetensors, ShardedIndexErrors) {
  io::save_safetensors(path("s1.safetensors"), {{"a", sample(DType::F32, {2})}});
  io::save_safetensors(path("s2.safetensors"),
                       {{"b", sample(DType::F32, {2})}, {"a", sample(DType::F32, {2})}});
  io::save_safetensors(path("s3.safetensors"), {{"c", sample(DType::F32, {2})}});
  auto index = [&](const std::string& text) { return write_file("i.index.json", text); };
  auto open = [&](const std::string& file) {
    return [file] { io::SafetensorsCheckpoint::open_index(file); };
  };

  EXPECT_TRUE(throws_error(
      open(index(R"({"weight_map": {"a": "s1.safetensors", "z": "gone.safetensors"}})")),
      "safetensors", {"i.index.json", "shard 'gone.safetensors'", "missing"}));
  EXPECT_TRUE(throws_error(
      open(index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})")),
      "safetensors", {"tensor 'a' is in two shards", "s1.safetensors", "s2.safetensors"}));
  EXPECT_TRUE(throws_error(
      open(index(
          R"({"weight_map": {"a": "s1.safetensors", "c": "s1.safetensors", "x": "s3.safetensors"}})")),
      "safetensors", {"'c' is mapped to 's1.safetensors'"}));
  EXPECT_TRUE(
      throws_error(open(index(R"({"weight_map": {"b": "s2.safetensors"}})")), "safetensors",
                   {"tensor 'a' in shard", "s2.safetensors", "not listed in the weight_map"}));
  EXPECT_TRUE(throws_error(open(index(R"({"weight_map": {"a": "../s1.safetensors"}})")),
                           "safetensors", {"plain file names"}));
  EXPECT_TRUE(throws_error(open(index(R"({"weight_map": {"a": "/etc/passwd"}})")), "safetensors",
                           {"plain file names"}));
  EXPECT_TRUE(throws_error(open(index(R"({"weight_map": {"a": 3}})")), "safetensors",
                           {"weight_map entry 'a'", "expected a shard file name"}));
  EXPECT_TRUE(
      throws_error(open(index(R"({"metadata": {}})")), "safetensors", {"\"weight_map\" object"}));
  EXPECT_TRUE(
      throws_error(open(index(R"({"weight_map": {"a": "s1.safetensors", "a": "s1.safetensors"}})")),
                   "safetensors", {"key 'a' appears twice", "weight_map"}));
  EXPECT_TRUE(throws_error(open(index("{\"weight_map\": ")), "safetensors",
                           {"i.index.json", "index is not valid JSON"}));
  // A mapping that matches the headers opens.
  const auto ok = io::SafetensorsCheckpoint::open_index(index(
      R"({"metadata": {"total_size": 8, "n": {"x": 1}}, "weight_map": {"c": "s3.safetensors"}})"));
  EXPECT_EQ(ok.names(), (std::vector<std::string>{"c"}));
  EXPECT_EQ(ok.index_metadata().at("total_size"), "8");
  EXPECT_EQ(ok.index_metadata().count("n"), 0u);
}

TEST_F(Safetensors, OpenCheckpointFindsTheFolderLayout) {
  EXPECT_TRUE(throws_error([&] { io::open_checkpoint(dir_.string()); }, "safetensors",
                           {"neither model.safetensors nor model.safetensors.index.json"}));
  EXPECT_TRUE(throws_error([&] { io::open_checkpoint(path("absent")); }, "safetensors",
                           {"absent", "no such file or directory"}));
  io::save_safetensors(path("model.safetensors"), {{"w", sample(DType::F32, {2})}});
  EXPECT_EQ(io::open_checkpoint(dir_.string()).names(), (std::vector<std::string>{"w"}));
  EXPECT_EQ(io::open_checkpoint(path("model.safetensors")).names(),
            (std::vector<std::string>{"w"}));
  write_file("model.safetensors.index.json", R"({"weight_map": {}})");
  EXPECT_TRUE(throws_error([&] { io::open_checkpoint(dir_.string()); }, "safetensors",
                           {"both model.safetensors and model.safetensors.index.json", "stale"}));
  EXPECT_TRUE(io::open_checkpoint(path("model.safetensors.index.json")).names().empty());
  EXPECT_TRUE(throws_error([&] { io::SafetensorsFile::open(dir_.string()); }, "safetensors",
                           {"is a directory"}));
  EXPECT_TRUE(throws_error([&] { io::SafetensorsFile::open("/dev/null"); }, "safetensors",
                           {"/dev/null", "is not a regular file"}));
}

// ---- corrupt headers ---------------------------------------------------------------------

TEST_F(Safetensors, RejectsBrokenFraming) {
  EXPECT_TRUE(rejects(std::string("\x05\x00\x00", 3), {"3 bytes, too short"}));
  EXPECT_TRUE(rejects(file_bytes("{}", "", 1000),
                      {"header length 1000 runs past the end of the 10-byte file"}));
  EXPECT_TRUE(
      rejects(file_bytes("{}", "", uint64_t{1} << 63), {"exceeds the 100000000-byte limit"}));
  EXPECT_TRUE(rejects(file_bytes("{}", "", ~uint64_t{0}), {"exceeds the 100000000-byte limit"}));
  EXPECT_TRUE(rejects(file_bytes("  {}", ""), {"does not start with '{'"}));
  EXPECT_TRUE(rejects(file_bytes("", ""), {"does not start with '{'"}));
  EXPECT_TRUE(rejects(file_bytes("{\"a\":", ""), {"header is not valid JSON"}));
  EXPECT_TRUE(rejects(file_bytes("{} x", ""), {"header is not valid JSON"}));
  EXPECT_TRUE(rejects(file_bytes("{\"\xff\":1}", ""), {"header is not valid JSON"}));
  // And through a file, naming the path.
  const std::string truncated = write_file("t.safetensors", file_bytes("{}", "", 64));
  EXPECT_TRUE(throws_error([&] { io::SafetensorsFile::open(truncated); }, "safetensors",
                           {truncated, "runs past the end"}));
  const std::string tiny = write_file("tiny.safetensors", "abc");
  EXPECT_TRUE(
      throws_error([&] { io::SafetensorsFile::open(tiny); }, "safetensors", {tiny, "too short"}));
  EXPECT_TRUE(throws_error([&] { io::SafetensorsFile::open(path("absent.safetensors")); },
                           "safetensors", {"absent.safetensors", "cannot open"}));
}

TEST_F(Safetensors, RejectsWrongTypesAndShapes) {
  const std::string f32x2 = std::string(8, '\0');
  auto one = [&](const std::string& value) { return file_bytes("{\"w\":" + value + "}", f32x2); };
  EXPECT_TRUE(rejects(one("5"), {"tensor 'w'", "entry is a number, expected an object"}));
  EXPECT_TRUE(
      rejects(one(R"({"dtype":"F32","shape":[2]})"), {"tensor 'w'", "lacks 'data_offsets'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"),
                      {"tensor 'w'", "unexpected key 'x'"}));
  EXPECT_TRUE(
      rejects(one(R"({"dtype":32,"shape":[2],"data_offsets":[0,8]})"), {"dtype is a number"}));
  EXPECT_TRUE(rejects(one(entry("F99", "[2]", 0, 8)), {"tensor 'w'", "unknown dtype 'F99'"}));
  EXPECT_TRUE(rejects(one(entry("U16", "[4]", 0, 8)), {"tensor 'w'", "'U16' is not supported"}));
  EXPECT_TRUE(rejects(one(entry("F32", "\"2\"", 0, 8)), {"shape is a string, expected an array"}));
  EXPECT_TRUE(rejects(one(entry("F32", "[-2]", 0, 8)), {"tensor 'w'", "negative dimension -2"}));
  EXPECT_TRUE(rejects(one(entry("F32", "[2.5]", 0, 8)), {"shape holds a number 2.5"}));
  EXPECT_TRUE(rejects(one(entry("F32", "[null]", 0, 8)), {"shape holds null"}));
  EXPECT_TRUE(rejects(one(entry("F32", "[9223372036854775808]", 0, 8)),
                      {"dimension 9223372036854775808 is too large"}));
  EXPECT_TRUE(rejects(one(entry("F32", "[99999999999999999999]", 0, 8)), {"shape holds a number"}));
  EXPECT_TRUE(
      rejects(one(entry("F32", "[4294967296,4294967296]", 0, 8)), {"has too many elements"}));
  EXPECT_TRUE(
      rejects(one(entry("F64", "[2305843009213693952]", 0, 8)), {"needs more than 2^64 bytes"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"),
                      {"data_offsets must be an array of two non-negative integers"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,-8]})"),
                      {"data_offsets must be an array of two"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[2],"data_offsets":"0,8"})"),
                      {"data_offsets must be an array of two"}));
  EXPECT_TRUE(
      rejects(one(entry("F32", "[0]", 8, 0)), {"data_offsets [8, 0] end before they begin"}));
  EXPECT_TRUE(
      rejects(one(entry("F32", "[4]", 0, 16)),
              {"tensor 'w'", "data_offsets [0, 16] run past the end of the 8-byte data section"}));
  EXPECT_TRUE(
      rejects(one(entry("F32", "[3]", 0, 8)),
              {"tensor 'w'", "shape (3,) of F32 needs 12 bytes but data_offsets [0, 8] hold 8"}));
  EXPECT_TRUE(rejects(one(entry("BF16", "[2,3]", 0, 8)), {"shape (2, 3) of BF16 needs 12 bytes"}));
  EXPECT_TRUE(
      rejects(file_bytes("{\"\":" + entry("F32", "[2]", 0, 8) + "}", f32x2), {"empty name"}));
}

TEST_F(Safetensors, RejectsOverlapsHolesAndTrailingBytes) {
  const std::string data(16, '\0');
  EXPECT_TRUE(rejects(file_bytes("{\"a\":" + entry("F32", "[3]", 0, 12) +
                                     ",\"b\":" + entry("F32", "[2]", 8, 16) + "}",
                                 data),
                      {"tensors 'a' [0, 12] and 'b' [8, 16] overlap"}));
  EXPECT_TRUE(rejects(file_bytes("{\"a\":" + entry("F32", "[2]", 0, 8) +
                                     ",\"b\":" + entry("F32", "[2]", 0, 8) + "}",
                                 std::string(8, '\0')),
                      {"'a' [0, 8] and 'b' [0, 8] overlap"}));
  EXPECT_TRUE(rejects(file_bytes("{\"a\":" + entry("F32", "[1]", 0, 4) +
                                     ",\"b\":" + entry("F32", "[2]", 8, 16) + "}",
                                 data),
                      {"bytes [4, 8) of the data section belong to no tensor", "hole before 'b'"}));
  EXPECT_TRUE(rejects(file_bytes("{\"a\":" + entry("F32", "[2]", 0, 8) + "}", data),
                      {"bytes [8, 16) at the end of the data section belong to no tensor"}));
  EXPECT_TRUE(rejects(file_bytes("{}", "x"), {"bytes [0, 1) at the end"}));
  // Zero-length tensors may share an offset with anything that starts there.
  const std::string ok =
      file_bytes("{\"a\":" + entry("F32", "[0]", 0, 0) + ",\"b\":" + entry("F32", "[2]", 0, 8) +
                     ",\"c\":" + entry("I8", "[0,5]", 8, 8) + "}",
                 std::string(8, '\0'));
  EXPECT_EQ(io::parse_safetensors(ok.data(), ok.size(), "ok").tensors.size(), 3u);
}

TEST_F(Safetensors, RejectsDuplicatesAndBadMetadata) {
  const std::string data(8, '\0');
  const std::string w = entry("F32", "[2]", 0, 8);
  EXPECT_TRUE(rejects(file_bytes("{\"w\":" + w + ",\"w\":" + w + "}", data),
                      {"tensor name 'w' appears twice"}));
  EXPECT_TRUE(rejects(
      file_bytes(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
      {"key 'dtype' appears twice in the entry of 'w'"}));
  EXPECT_TRUE(rejects(file_bytes("{\"__metadata__\":{},\"__metadata__\":{},\"w\":" + w + "}", data),
                      {"__metadata__ appears twice"}));
  EXPECT_TRUE(rejects(file_bytes("{\"__metadata__\":[],\"w\":" + w + "}", data),
                      {"__metadata__ is an array, expected an object of string values"}));
  EXPECT_TRUE(rejects(file_bytes("{\"__metadata__\":{\"n\":1},\"w\":" + w + "}", data),
                      {"__metadata__ value of 'n' is a number, expected a string"}));
  EXPECT_TRUE(rejects(file_bytes("{\"__metadata__\":{\"n\":{\"x\":\"y\"}},\"w\":" + w + "}", data),
                      {"value of 'n' is an object"}));
  const std::string ok = file_bytes("{\"__metadata__\":{\"format\":\"pt\"},\"w\":" + w + "}", data);
  const io::SafetensorsHeader header = io::parse_safetensors(ok.data(), ok.size(), "ok");
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.data_offset, ok.size() - 8);
  EXPECT_EQ(header.data_size, 8u);
}

TEST_F(Safetensors, DeepNestingIsRejectedWithoutCrashing) {
  const std::string arrays = "{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_TRUE(rejects(file_bytes(arrays, ""), {"nests deeper than 64 levels"}));
  std::string objects = "{";
  for (int i = 0; i < 100000; ++i) objects += "\"a\":{";
  EXPECT_TRUE(rejects(file_bytes(objects, ""), {"nests deeper than 64 levels"}));
  const std::string unclosed = "{\"w\":" + std::string(100000, '[');
  EXPECT_TRUE(rejects(file_bytes(unclosed, ""), {"nests deeper than 64 levels"}));
}

// ---- loading into parameters -------------------------------------------------------------

class SafetensorsLoad : public Safetensors {
 protected:
  // A tiny model's parameters, all F32 and filled with -7 so untouched ones are visible.
  std::map<std::string, Tensor> params() const {
    std::map<std::string, Tensor> p;
    p["embed.weight"] = Tensor::full({4, 3}, -7);
    p["norm.weight"] = Tensor::full({3}, -7);
    p["head.weight"] = Tensor::full({2, 3}, -7);
    return p;
  }
};

TEST_F(SafetensorsLoad, StrictLoadConvertsBF16IntoF32) {
  const Tensor embed = sample(DType::BF16, {4, 3}), norm = sample(DType::BF16, {3}, 1),
               head = sample(DType::BF16, {2, 3}, 2);
  io::save_safetensors(path("model.safetensors"),
                       {{"embed.weight", embed}, {"norm.weight", norm}, {"head.weight", head}});
  auto p = params();
  const io::LoadReport report = io::load_into(p, io::open_checkpoint(dir_.string()), true);
  EXPECT_TRUE(report.ok()) << report.describe();
  EXPECT_EQ(report.loaded.size(), 3u);
  EXPECT_EQ(report.describe(), "");
  EXPECT_EQ(p["embed.weight"].dtype(), DType::F32);
  EXPECT_EQ(p["embed.weight"].to_vector_f64(), embed.to_vector_f64());
  EXPECT_EQ(p["norm.weight"].to_vector_f64(), norm.to_vector_f64());
  EXPECT_EQ(p["head.weight"].to_vector_f64(), head.to_vector_f64());
}

TEST_F(SafetensorsLoad, StrictLoadListsEveryProblemAndCopiesNothing) {
  io::save_safetensors(path("model.safetensors"),
                       {{"embed.weight", sample(DType::F32, {4, 3})},
                        {"head.weight", sample(DType::F32, {3, 2})},  // transposed
                        {"extra.a", sample(DType::F32, {1})},
                        {"extra.b", sample(DType::F32, {1})}});
  auto p = params();
  p["ids"] = Tensor::zeros({1}, DType::I64);
  io::save_safetensors(path("ids.safetensors"), {{"ids", sample(DType::F32, {1})}});
  EXPECT_TRUE(
      throws_error([&] { io::load_into(p, io::open_checkpoint(path("model.safetensors")), true); },
                   "safetensors",
                   {"model.safetensors", "strict loading; nothing was copied",
                    "missing from the checkpoint (2): ids, norm.weight",
                    "unexpected in the checkpoint (2): extra.a, extra.b",
                    "head.weight: model (2, 3) f32, checkpoint (3, 2) f32"}));
  for (const auto& [name, t] : p)
    if (name != "ids")
      for (double v : t.to_vector_f64()) ASSERT_EQ(v, -7.0) << name << " was touched";
  // A float checkpoint does not load into an integer parameter.
  std::map<std::string, Tensor> ids = {{"ids", p["ids"]}};
  EXPECT_TRUE(
      throws_error([&] { io::load_into(ids, io::open_checkpoint(path("ids.safetensors")), true); },
                   "safetensors", {"ids: model (1,) i64, checkpoint (1,) f32"}));
}

TEST_F(SafetensorsLoad, NonStrictLoadReportsAndCopiesWhatMatches) {
  const Tensor embed = sample(DType::F32, {4, 3});
  io::save_safetensors(path("model.safetensors"), {{"embed.weight", embed},
                                                   {"head.weight", sample(DType::F32, {3, 2})},
                                                   {"extra", sample(DType::F32, {1})}});
  auto p = params();
  const io::LoadReport report = io::load_into(p, io::open_checkpoint(dir_.string()), false);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"embed.weight"}));
  EXPECT_EQ(report.missing, (std::vector<std::string>{"norm.weight"}));
  EXPECT_EQ(report.unexpected, (std::vector<std::string>{"extra"}));
  ASSERT_EQ(report.mismatched.size(), 1u);
  EXPECT_EQ(report.mismatched[0].name, "head.weight");
  EXPECT_EQ(report.mismatched[0].model_shape, (Shape{2, 3}));
  EXPECT_EQ(report.mismatched[0].checkpoint_shape, (Shape{3, 2}));
  EXPECT_EQ(p["embed.weight"].to_vector_f64(), embed.to_vector_f64());
  for (double v : p["head.weight"].to_vector_f64()) EXPECT_EQ(v, -7.0);  // mis-shaped: untouched
  const std::string text = report.describe();
  EXPECT_NE(text.find("missing from the checkpoint (1): norm.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("unexpected in the checkpoint (1): extra"), std::string::npos) << text;
  EXPECT_NE(text.find("mis-shaped or mistyped (1): head.weight"), std::string::npos) << text;
}

TEST_F(SafetensorsLoad, LoadsIntoNonContiguousParametersAndFromShards) {
  const Tensor w = sample(DType::F16, {3, 4});
  io::save_safetensors_sharded(dir_.string(), {{"w", w}, {"b", sample(DType::F32, {5})}}, 8);
  Tensor storage = Tensor::full({4, 3}, -7);
  std::map<std::string, Tensor> p = {{"w", storage.transpose(0, 1)},
                                     {"b", Tensor::zeros({5}, DType::F64)}};
  const io::LoadReport report = io::load_into(p, io::open_checkpoint(dir_.string()), true);
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(p["w"].to_vector_f64(), w.to_vector_f64());
  EXPECT_EQ(p["b"].to_vector_f64(), sample(DType::F32, {5}).to_vector_f64());
}

}  // namespace
