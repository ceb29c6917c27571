// safetensors with CUDA tensors: loading streams through the bounded pinned staging buffer
// in chunks (counted host→device copies), converting dtypes on the host; saving CUDA
// tensors writes their values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>

#include "cuda/cuda_test_utils.h"
#include "microllm/io/safetensors.h"

using namespace microllm;
namespace fs = std::filesystem;

namespace {

const Device kGpu = Device::cuda(0);

Tensor ramp(const Shape& shape, DType dtype, double scale) {
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 97) * scale - 3.0;
  return Tensor::from_vector(values, shape, dtype);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("microllm_st_cuda_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST(SafetensorsCuda, LoadStreamsThroughBoundedPinnedStagingInChunks) {
  MICROLLM_REQUIRE_CUDA();
  const fs::path dir = fresh_dir("load");
  const Tensor w = ramp({33, 17}, DType::BF16, 0.125);  // 561 elements
  const Tensor b = ramp({5}, DType::BF16, 0.5);
  io::save_safetensors((dir / "model.safetensors").string(), {{"w", w}, {"b", b}, {"wt", w}});

  std::map<std::string, Tensor> params = {
      {"w", Tensor::zeros({33, 17}, DType::F32, kGpu)},
      {"b", Tensor::zeros({5}, DType::F32, kGpu)},
      // Not contiguous: staged into a dense temporary, then copied on the device.
      {"wt", Tensor::zeros({17, 33}, DType::F32, kGpu).transpose(0, 1)}};
  io::LoadOptions options;
  options.staging_bytes = 256;  // two 128-byte halves: 32 F32 elements per chunk
  cuda::reset_transfer_stats();
  const io::LoadReport report = io::load_into(params, io::open_checkpoint(dir.string()), options);
  const cuda::TransferStats stats = cuda::transfer_stats();
  EXPECT_TRUE(report.ok()) << report.describe();
  EXPECT_EQ(report.loaded.size(), 3u);
  EXPECT_EQ(stats.h2d_calls, 18 + 1 + 18);  // ceil(561/32) + ceil(5/32) + ceil(561/32)
  EXPECT_EQ(stats.h2d_bytes, (561 + 5 + 561) * 4);

  EXPECT_EQ(params["w"].to_vector_f64(), w.to_vector_f64());
  EXPECT_EQ(params["b"].to_vector_f64(), b.to_vector_f64());
  EXPECT_EQ(params["wt"].to_vector_f64(), w.to_vector_f64());
  fs::remove_all(dir);
}

TEST(SafetensorsCuda, LoadIntoBF16ParametersAndSaveFromTheDevice) {
  MICROLLM_REQUIRE_CUDA();
  const fs::path dir = fresh_dir("save");
  const Tensor w = ramp({64, 48}, DType::F32, 0.25);
  io::save_safetensors((dir / "model.safetensors").string(), {{"w", w}});
  std::map<std::string, Tensor> params = {{"w", Tensor::zeros({64, 48}, DType::BF16, kGpu)}};
  EXPECT_TRUE(io::load_into(params, io::open_checkpoint(dir.string()), true).ok());
  EXPECT_EQ(params["w"].to_vector_f64(), w.to(DType::BF16).to_vector_f64());

  // Saving device tensors (one a non-contiguous view) writes their values.
  const Tensor on_gpu = w.to(kGpu);
  io::save_safetensors((dir / "out.safetensors").string(),
                       {{"w", on_gpu}, {"wt", on_gpu.transpose(0, 1)}, {"p", params["w"]}});
  const io::SafetensorsFile file = io::SafetensorsFile::open((dir / "out.safetensors").string());
  EXPECT_EQ(file.tensor("w").to_vector_f64(), w.to_vector_f64());
  EXPECT_EQ(file.tensor("wt").to_vector_f64(), w.transpose(0, 1).to_vector_f64());
  EXPECT_EQ(file.tensor("p").dtype(), DType::BF16);
  EXPECT_EQ(file.tensor("p").to_vector_f64(), w.to(DType::BF16).to_vector_f64());
  fs::remove_all(dir);
}
